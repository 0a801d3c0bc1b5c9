"""The registry of changes (workflows/changes.py) is the whole story: every change workflow
code asks about is registered, every registered change is asked about, and the API names at
start exactly the changes made after the baseline."""

from __future__ import annotations

import re

from longrun import wire
from tests.helpers import REPO
from workflows.changes import BASELINE, CHANGES

ASKED = re.compile(r"""\bchanged\(\s*["']([a-z0-9-]+)["']\s*\)""")


def _asked() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "workflows").rglob("*.py"):
        if path.name != "changes.py":
            found |= set(ASKED.findall(path.read_text()))
    return found


def test_every_change_asked_about_is_registered_and_every_registered_one_is_asked() -> None:
    asked = _asked()
    assert asked - set(CHANGES) == set(), "asked about, not registered"
    assert set(CHANGES) - asked == set(), "registered, asked about nowhere"


def test_the_api_names_every_change_after_the_baseline_and_no_other() -> None:
    after = set(CHANGES)
    assert len(wire.STARTED_WITH) == len(set(wire.STARTED_WITH))
    assert set(wire.STARTED_WITH) == {BASELINE} | after


def test_every_change_says_what_runs_with_it_and_before_it_do() -> None:
    for name, change in CHANGES.items():
        assert change.name == name and change.now and change.before, name
