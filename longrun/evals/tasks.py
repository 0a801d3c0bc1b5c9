"""The eval's tasks and their checkers. A task is a JSON file in the suite's directory: the
run to submit (`POST /v1/runs` body), how the scorer answers its approvals, what must hold
once it ended (`expect`), and the stand-in's script for it (what a model that solves it
answers; only the stand-in reads it). In the run body and the script, `{{fixture}}`
stands for the fixture server's URL and `{{marker}}` for a mark unique to the attempt,
which the scorer also appends to the goal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from longrun.evals.fixture import Report


class FileExpect(BaseModel):
    """What a file in the run's workspace must hold (None: it must not exist)."""

    model_config = ConfigDict(extra="forbid")

    equals: str | None = None
    contains: str | None = None
    absent: bool = False


class Expect(BaseModel):
    """What must hold once a run of the task ended; every stated part is checked."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "failed", "cancelled"] | None = None
    error_contains: str | None = None
    files: dict[str, FileExpect] = Field(default_factory=dict)
    effects: dict[str, list[Any]] | None = Field(
        None, description="each effect name's bodies the fixture applied for the run, in order"
    )
    fetched: list[str] = Field(
        default_factory=list, description="'METHOD /path' the run requested at least once"
    )
    outputs: dict[str, Any] = Field(
        default_factory=dict, description="plan step id -> a value its output must contain"
    )
    approvals: int | None = Field(None, description="approvals the run asked")
    within_budget: bool = Field(False, description="usage within the run's budget limits")


class Task(BaseModel):
    """One task of the suite."""

    model_config = ConfigDict(extra="forbid")

    name: str
    about: str
    level: Literal["easy", "hard"]
    run: dict[str, Any]
    decide: Literal["approve", "reject"] = "approve"
    expect: Expect
    standin: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def kind(self) -> str:
        """Goal-only or planned."""
        return "plan" if "plan" in self.run else "goal"

    def body(
        self,
        marker: str,
        fixture_url: str,
        max_duration_s: float | None = None,
        *,
        marked: bool = True,
    ) -> dict[str, Any]:
        """The run to submit for one attempt; with `max_duration_s`, it fails once it has
        run that long (or sooner, if the task says so). `marked`: the goal ends with the
        marker, which the stand-in's rules match; a real model is not shown it (Qwen
        called `eval-139b172970` as a tool)."""
        body: dict[str, Any] = _filled(self.run, marker, fixture_url)
        if marked:
            body["goal"] = f"{body['goal']} ({marker})"
        if max_duration_s is not None:
            budget = body.setdefault("budget", {})
            budget["max_duration_s"] = min(
                budget.get("max_duration_s", max_duration_s), max_duration_s
            )
            budget["on_budget_exhausted"] = "fail"
        body.setdefault("labels", {})["eval"] = self.name
        return body

    def script(self, marker: str, fixture_url: str) -> list[dict[str, Any]]:
        """The stand-in's rules for one attempt."""
        rules: list[dict[str, Any]] = _filled(self.standin, marker, fixture_url)
        return rules


def _filled(value: Any, marker: str, fixture_url: str) -> Any:
    text = json.dumps(value).replace("{{marker}}", marker).replace("{{fixture}}", fixture_url)
    return json.loads(text)


def load_tasks(folder: Path) -> list[Task]:
    """The suite: every *.json in `folder`, by file name."""
    tasks = [Task.model_validate_json(p.read_bytes()) for p in sorted(folder.glob("*.json"))]
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names repeat in {folder}")
    return tasks


def failures(task: Task, run: dict[str, Any], seen: Report, workspace: Path) -> list[str]:
    """What of the task's `expect` the ended run (its status, the fixture's report, its
    workspace) does not meet; empty: it passed."""
    want = task.expect
    found: list[str] = []
    if want.status is not None and run["status"] != want.status:
        found.append(f"status {run['status']}, not {want.status}: {run.get('error') or ''}"[:300])
    if want.error_contains and want.error_contains not in (run.get("error") or ""):
        found.append(f"error does not say '{want.error_contains}': {run.get('error')}"[:300])
    for name, expect in want.files.items():
        found += _file_failures(workspace / name, name, expect)
    if want.effects is not None:
        for name, bodies in want.effects.items():
            applied = [e.body for e in seen.effects if e.run_id == run["run_id"] and e.name == name]
            if applied != bodies:
                found.append(f"effects '{name}' applied {applied}, not {bodies}"[:300])
    requested = seen.by_run.get(run["run_id"], {})
    found += [f"never requested {path}" for path in want.fetched if not requested.get(path)]
    for step_id, value in want.outputs.items():
        output = next((s.get("output") for s in run["steps"] if s["id"] == step_id), None)
        if not _contains(output, value):
            found.append(f"step {step_id} output {str(output)[:200]} lacks {value!r}")
    asked = len(run["approvals"]) + len(run["pending_approvals"])
    if want.approvals is not None and asked != want.approvals:
        found.append(f"{asked} approvals asked, not {want.approvals}")
    if want.within_budget:
        found += _over_budget(run)
    return found


def without_effect(task: Task, run: dict[str, Any], seen: Report, workspace: Path) -> bool:
    """Whether the run ended `completed` having made none of the changes its task asks for:
    no file it is to write exists, no effect it is to apply was applied."""
    want = task.expect
    files = [name for name, expect in want.files.items() if not expect.absent]
    effects = {name for name, bodies in (want.effects or {}).items() if bodies}
    if run["status"] != "completed" or not (files or effects):
        return False
    if any((workspace / name).is_file() for name in files):
        return False
    return not any(e.run_id == run["run_id"] and e.name in effects for e in seen.effects)


def _file_failures(path: Path, name: str, expect: FileExpect) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return [] if expect.absent else [f"no file {name}"]
    if expect.absent:
        return [f"file {name} exists"]
    if expect.equals is not None and text.strip() != expect.equals:
        return [f"{name} holds {text[:100]!r}, not {expect.equals!r}"]
    if expect.contains is not None and expect.contains.lower() not in text.lower():
        return [f"{name} lacks {expect.contains!r}: {text[:100]!r}"]
    return []


def _contains(output: Any, value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in json.dumps(output).lower()
    return value == output or json.dumps(value) in json.dumps(output)


def _over_budget(run: dict[str, Any]) -> list[str]:
    over = []
    for name, use in run["budget"]["limits"].items():
        if use["limit"] is not None and use["used"] > use["limit"]:
            over.append(f"budget {name}: used {use['used']} of {use['limit']}")
    return over
