"""The generated docs are what longrun/dev/docs.py writes (docs/settings.md from
longrun/settings.py, the tables of docs/evals.md and docs/benchmarks.md from their results
files), every setting has a description to generate it from, and the README stays a front
door whose links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from longrun.dev.docs import REPO, generated
from longrun.settings import ApiKey, OutputTokens, Settings

README_MOST_LINES = 150


@pytest.mark.parametrize("path", list(generated()), ids=lambda p: p.name)
def test_the_generated_docs_are_up_to_date(path: Path) -> None:
    written = path.read_text(encoding="utf-8")
    assert written == generated()[path], (
        f"{path.relative_to(REPO)} differs from what it is generated from: run "
        "`python -m longrun.dev.docs` (make docs)"
    )


def test_the_readme_is_a_front_door_whose_links_lead_somewhere() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MOST_LINES
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


@pytest.mark.parametrize("model", [Settings, OutputTokens, ApiKey])
def test_every_setting_has_a_description(model: type[BaseModel]) -> None:
    undescribed = [
        name
        for name, field in model.model_fields.items()
        if not (field.description and field.description.strip())
    ]
    assert not undescribed, f"{model.__name__} fields without a description: {undescribed}"
