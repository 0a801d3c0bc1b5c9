"""Verification activities: `verify.step` checks a step's expected evidence,
`verify.acceptance` one acceptance criterion. A check is either deterministic (a tool call
and an expectation on its output) or judged by a model that must cite its reason."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import fatal, reported_with_attempt
from activities.heartbeat import heartbeating
from activities.memory import Journal
from activities.model import ModelActivities
from activities.tools.bound import call_redacted
from activities.tools.builtin import ends
from activities.tools.registry import ToolContext, workspace_of
from longrun import beneath
from longrun.catalogue import CATALOGUE, check_relative
from longrun.contracts import CheckRequest, Expect, ToolCheck, Verdict
from longrun.plans import ReferenceError_, lookup
from longrun.policy import forbidding
from longrun.settings import Settings

MAX_NOTE_CHARS = 2000
SNAPSHOT_FILES = 40
SNAPSHOT_FILE_BYTES = 4096
SNAPSHOT_TOTAL_BYTES = 24_000
TEXT_FIELDS = ("stdout", "stderr", "body", "content", "value")


def _text_of(output: dict[str, Any]) -> str:
    parts = [str(output[k]) for k in TEXT_FIELDS if k in output]
    return "\n".join(parts) if parts else json.dumps(output)


def evaluate(
    expect: Expect, output: dict[str, Any] | None, error: str | None, workspace: Path
) -> Verdict:
    """Test one tool output against an expectation; the evidence says what was seen."""
    problems: list[str] = []
    seen: list[str] = []
    if error is not None:
        problems.append(f"the check's tool failed: {error}")
    out = output or {}
    text = _text_of(out) if output is not None else ""
    if expect.exit_code is not None:
        code = out.get("exit_code")
        seen.append(f"exit code {code}")
        if code != expect.exit_code:
            problems.append(f"exit code {code}, expected {expect.exit_code}")
    if expect.contains is not None and expect.contains not in text:
        problems.append(f"output does not contain {expect.contains!r}")
    if expect.regex is not None and not re.search(expect.regex, text):
        problems.append(f"output does not match /{expect.regex}/")
    if expect.json_path is not None:
        try:
            found = lookup(out, [p for p in expect.json_path.split(".") if p], expect.json_path)
        except ReferenceError_ as exc:
            problems.append(str(exc))
        else:
            seen.append(f"{expect.json_path} = {json.dumps(found)}")
            if found != expect.equals:
                wanted = json.dumps(expect.equals)
                problems.append(f"{expect.json_path} is {json.dumps(found)}, expected {wanted}")
    if expect.file_exists is not None:
        try:
            exists = beneath.exists_beneath(workspace, check_relative(expect.file_exists))
        except ValueError as exc:
            problems.append(str(exc))
        else:
            if not exists:
                problems.append(f"no file {expect.file_exists!r} in the workspace")
    # A process's two streams each keep their end: a test runner's verdict is on stdout.
    tail = ends(out, 800) if "stdout" in out or "stderr" in out else text[-800:]
    if problems:
        return Verdict(
            passed=False, evidence="; ".join(problems) + (f"\noutput: {tail}" if tail else "")
        )
    return Verdict(passed=True, evidence=", ".join(seen) or "all expectations hold")


SNAPSHOT_SKIP = frozenset({".longrun", ".git", ".venv", "node_modules", "__pycache__"})


def _files(workspace: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, names in os.walk(workspace):
        dirs[:] = sorted(d for d in dirs if d not in SNAPSHOT_SKIP)
        found += [Path(root) / n for n in sorted(names)]
        if len(found) > 10 * SNAPSHOT_FILES:
            break
    return [p for p in found if p.is_file() and not p.is_symlink()]


def snapshot(workspace: Path) -> str:
    """The workspace's files, with the start of each small text file, for a judge to read.
    Blocking file work: call it in a thread."""
    lines: list[str] = []
    budget = SNAPSHOT_TOTAL_BYTES
    files = _files(workspace)
    for path in files[:SNAPSHOT_FILES]:
        rel = path.relative_to(workspace)
        with path.open("rb") as f:
            data = f.read(SNAPSHOT_FILE_BYTES)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            lines.append(f"== {rel} (binary, {path.stat().st_size} bytes)")
            continue
        if budget <= 0:
            lines.append(f"== {rel} ({path.stat().st_size} bytes)")
            continue
        text = text[:budget]
        budget -= len(text)
        lines.append(f"== {rel}\n{text}")
    if len(files) > SNAPSHOT_FILES:
        lines.append(f"... and {len(files) - SNAPSHOT_FILES} more files")
    return "\n".join(lines) or "(the workspace is empty)"


class VerifyActivities:
    """Checks of steps and acceptance criteria, bound to one worker's settings and model."""

    def __init__(self, settings: Settings, model: ModelActivities) -> None:
        self._settings = settings
        self._model = model
        self._journal = Journal.of(settings)

    async def _run_check(self, req: CheckRequest, check: ToolCheck) -> Verdict:
        spec = CATALOGUE.get(check.tool)
        if spec is None:  # the API knew the tool; this worker does not
            raise fatal(f"no tool '{check.tool}' on this worker: run workers of the API's version")
        refusal = forbidding(self._settings.policy_file, check.tool)
        if refusal is not None:
            raise fatal(refusal, type="ToolForbidden")
        args = dict(check.args)
        # A check wants to see failures, not to fail on them.
        for flag in ("check", "raise_for_status"):
            if flag in spec.args_model.model_fields:
                args.setdefault(flag, False)
        workspace = workspace_of(self._settings, req.run_id)
        ctx = ToolContext(
            run_id=req.run_id,
            step_id=req.check_id,
            idempotency_key=f"{req.run_id}:check:{req.check_id}",
            workspace=workspace,
            settings=self._settings,
            grant=req.grant,
        )
        output: dict[str, Any] | None = None
        error: str | None = None
        try:
            output = await call_redacted(spec, spec.args_model.model_validate(args), ctx)
        except ApplicationError as exc:
            error = exc.message
        except Exception as exc:  # a check that cannot run is a failed check, not a crash
            error = f"{type(exc).__name__}: {exc}"
        return evaluate(check.expect, output, error, workspace)

    async def _verify(self, req: CheckRequest) -> Verdict:
        with reported_with_attempt():
            async with heartbeating():
                if req.tool_check is not None:
                    return await self._run_check(req, req.tool_check)
                workspace = workspace_of(self._settings, req.run_id)
                files = await asyncio.to_thread(snapshot, workspace)
                evidence = f"{req.observations}\n\nFiles in the workspace:\n{files}"
                # A pass quotes what the tools returned or a file, not the agent's claim.
                sources = [*req.outputs, files] if req.outputs else []
                return await self._model.recorded(
                    req.run_id,
                    self._model.judge(
                        req.judge_model,
                        req.goal,
                        req.statement or f"The goal is met: {req.goal}",
                        evidence.strip(),
                        sources,
                    ),
                )

    @activity.defn(name="verify.step")
    async def step(self, req: CheckRequest) -> Verdict:
        """Check that a plan step produced its expected evidence; keep the outcome in the
        run's journal when asked."""
        verdict = await self._verify(req)
        if req.journal is not None:
            note = req.journal
            if not verdict.passed:
                text = f"{note.text}\nverification failed: {verdict.evidence}"
                note = note.model_copy(update={"kind": "verification", "text": text})
            text = note.text[:MAX_NOTE_CHARS]
            await asyncio.to_thread(self._journal.add, req.run_id, note.kind, note.step, text)
        return verdict

    @activity.defn(name="verify.acceptance")
    async def acceptance(self, req: CheckRequest) -> Verdict:
        """Check one acceptance criterion of a goal-only run."""
        return await self._verify(req)
