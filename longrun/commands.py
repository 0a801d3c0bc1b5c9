"""The `longrun` commands that talk to a running API: submit, status, watch, list,
approvals, approve, reject, pause, resume, cancel, tools, metrics and compare. Every one
takes `--json`, `--api-url` (LONGRUN_API_URL) and `--api-key` (LONGRUN_API_KEY), and exits
with a code scripts can rely on (see longrun.client)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from longrun import watching
from longrun.client import (
    BY_STATUS,
    DEFAULT_API_URL,
    EXIT_COMPLETED,
    EXIT_USAGE,
    Api,
    ApiError,
)

ApiUrl = Annotated[
    str, typer.Option("--api-url", envvar="LONGRUN_API_URL", help="where the longrun API is")
]
ApiKey = Annotated[
    str | None,
    typer.Option("--api-key", envvar="LONGRUN_API_KEY", help="your API key", show_default=False),
]
Json = Annotated[bool, typer.Option("--json", help="print JSON, not a table")]
RunId = Annotated[str, typer.Argument(help="the run's id (run-…)", show_default=False)]
Labels = Annotated[list[str] | None, typer.Option("--label", help="key:value; repeat for several")]

out = Console()
err = Console(stderr=True)


@contextmanager
def _api(url: str, key: str | None) -> Iterator[Api]:
    """The API client; a failed request ends the command with its exit code."""
    api = Api(url, key)
    try:
        yield api
    except ApiError as exc:
        err.print(f"[red]longrun:[/red] {exc}", highlight=False)
        raise typer.Exit(exc.code) from None
    finally:
        api.close()


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def submit(
    plan: Annotated[
        Path | None,
        typer.Argument(
            help='a JSON file: the body of POST /v1/runs, or just a plan ({"steps": …})',
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    goal: Annotated[str | None, typer.Option(help="the goal (alone: a goal-only run)")] = None,
    label: Labels = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="the same key twice starts one run")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="then watch it to its end")] = False,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Start a run from a plan file, or of a goal the agent plans itself.

    Example: longrun submit plan.json --label team:ops --watch

    Example: longrun submit --goal "Summarise the open incidents into out/summary.md"
    """
    body: dict[str, Any] = {}
    if plan is not None:
        try:
            body = json.loads(plan.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            err.print(f"[red]longrun:[/red] {plan} is not JSON: {exc}", highlight=False)
            raise typer.Exit(EXIT_USAGE) from None
        if isinstance(body, dict) and "steps" in body:
            body = {"plan": body}
        if not isinstance(body, dict):
            err.print(f"[red]longrun:[/red] {plan} holds no JSON object")
            raise typer.Exit(EXIT_USAGE)
    if goal is not None:
        body["goal"] = goal
    if "goal" not in body:
        err.print('[red]longrun:[/red] give a goal (--goal, or "goal" in the file)')
        raise typer.Exit(EXIT_USAGE)
    if label:
        body["labels"] = {**body.get("labels", {}), **_labels(label)}
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    with _api(api_url, api_key) as api:
        created = api.post("/v1/runs", body, headers=headers)
        if json_out and not watch:
            _print_json(created)
        elif not watch:
            out.print(created["run_id"], highlight=False)
        if watch:
            raise typer.Exit(watching.watch(api, created["run_id"], json_out=json_out))


def status(
    run_id: RunId, json_out: Json = False, api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None
) -> None:
    """Where a run stands: status, steps done, pending approvals, usage. Exits 0 when it
    completed, 1 failed, 3 cancelled, 4 waiting for a person, 7 still running.

    Example: longrun status run-0123… --json
    """
    with _api(api_url, api_key) as api:
        run = api.get(f"/v1/runs/{run_id}")
    if json_out:
        _print_json(run)
    else:
        out.print(watching.view(run, []))
    raise typer.Exit(BY_STATUS.get(run["status"], EXIT_COMPLETED))


def watch(
    run_id: RunId, json_out: Json = False, api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None
) -> None:
    """Follow a run live until it ends: steps done, phase, approvals waiting, cost. With
    --json, one event per line. Exits as `status` does once the run has ended.

    Example: longrun watch run-0123…
    """
    with _api(api_url, api_key) as api:
        raise typer.Exit(watching.watch(api, run_id, json_out=json_out))


def list_runs(
    status: Annotated[
        str | None,
        typer.Option(help="running, waiting_approval, paused, completed, failed, cancelled"),
    ] = None,
    label: Labels = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="at most this many")] = 20,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """List runs, newest first.

    Example: longrun list --status waiting_approval --label team:ops
    """
    with _api(api_url, api_key) as api:
        page = api.get("/v1/runs", status=status, label=label, page_size=limit)
    if json_out:
        _print_json(page)
        return
    table = Table("run", "status", "goal", "labels", "started")
    for run in page["runs"]:
        labels = ", ".join(f"{k}:{v}" for k, v in run["labels"].items())
        table.add_row(run["run_id"], run["status"], run["goal"][:60], labels, run["started_at"])
    out.print(table)


def approvals(
    label: Labels = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """What waits for a person, across runs, oldest first.

    Example: longrun approvals --label team:ops
    """
    with _api(api_url, api_key) as api:
        inbox = api.get("/v1/approvals", label=label)
    if json_out:
        _print_json(inbox)
        return
    if not inbox["approvals"]:
        out.print("Nothing waits for a person.")
        return
    table = Table("run", "approval", "goal", "what", "since")
    for item in inbox["approvals"]:
        table.add_row(
            item["run_id"],
            item["approval_id"],
            item["goal"][:40],
            item["summary"][:80],
            item["requested_at"],
        )
    out.print(table)
    out.print("Decide with: longrun approve|reject RUN APPROVAL [--comment …]")


Comment = Annotated[str | None, typer.Option(help="why, for the audit trail")]
ApprovalId = Annotated[str, typer.Argument(help="the approval's id (apr-…)", show_default=False)]


def approve(
    run_id: RunId,
    approval_id: ApprovalId,
    comment: Comment = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Approve a gated step. Exits 6 if someone decided it first (and says who).

    Example: longrun approve run-0123… apr-publish --comment "checked the draft"
    """
    _decide(run_id, approval_id, "approve", comment, json_out, api_url, api_key)


def reject(
    run_id: RunId,
    approval_id: ApprovalId,
    comment: Comment = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Reject a gated step: it is skipped or fails the run, as the step says.

    Example: longrun reject run-0123… apr-deploy --comment "not on a Friday"
    """
    _decide(run_id, approval_id, "reject", comment, json_out, api_url, api_key)


def _decide(
    run_id: str,
    approval_id: str,
    decision: str,
    comment: str | None,
    json_out: bool,
    api_url: str,
    api_key: str | None,
) -> None:
    with _api(api_url, api_key) as api:
        # Bound to the call the run asks for now, which is shown: if the run asks for
        # another by the time the decision arrives, it is refused.
        run = api.get(f"/v1/runs/{run_id}")
        asked = next(
            (a for a in run.get("pending_approvals", []) if a["approval_id"] == approval_id),
            None,
        )
        body = {"decision": decision, "comment": comment}
        if asked is not None and asked.get("digest"):
            body["digest"] = asked["digest"]
            if not json_out:
                out.print(f"{approval_id}: {asked['summary'][:200]}", highlight=False)
                out.print(f"digest {asked['digest']}", highlight=False)
        _said(api.post(f"/v1/runs/{run_id}/approvals/{approval_id}", body), json_out)


Reason = Annotated[str | None, typer.Option(help="why, for the audit trail")]


def pause(
    run_id: RunId,
    reason: Reason = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Pause a run before its next model or tool call (the call in flight finishes).

    Example: longrun pause run-0123… --reason "provider incident"
    """
    with _api(api_url, api_key) as api:
        _said(api.post(f"/v1/runs/{run_id}/pause", {"reason": reason}), json_out)


def resume(
    run_id: RunId,
    reason: Reason = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Resume a paused run (also one paused because its model was unavailable).

    Example: longrun resume run-0123…
    """
    with _api(api_url, api_key) as api:
        _said(api.post(f"/v1/runs/{run_id}/resume", {"reason": reason}), json_out)


def cancel(
    run_id: RunId,
    compensate: Annotated[
        bool, typer.Option("--compensate", help="first undo completed reversible steps")
    ] = False,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Cancel a run, optionally undoing its completed reversible steps.

    Example: longrun cancel run-0123… --compensate
    """
    with _api(api_url, api_key) as api:
        _said(api.post(f"/v1/runs/{run_id}/cancel", {"compensate": compensate}), json_out)


def tools(
    json_out: Json = False, api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None
) -> None:
    """The tools plans and agents may call, with their arguments.

    Example: longrun tools --json
    """
    with _api(api_url, api_key) as api:
        catalogue = api.get("/v1/tools")
    if json_out:
        _print_json(catalogue)
        return
    table = Table("tool", "side effect", "arguments", "description")
    for tool in catalogue["tools"]:
        args = ", ".join(tool["args_schema"].get("properties", {}))
        effect = tool["side_effect"] or "by arguments"
        table.add_row(tool["name"], effect, args, tool["description"])
    out.print(table)


def metrics(
    since: Annotated[str | None, typer.Option(help="ISO time; default: 7 days ago")] = None,
    until: Annotated[str | None, typer.Option(help="ISO time; default: now")] = None,
    label: Labels = None,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """How runs that ended in a window fared: success and recovery rates, interventions,
    cost, duration, drift.

    Example: longrun metrics --since 2026-12-01T00:00:00Z --label team:ops
    """
    with _api(api_url, api_key) as api:
        found = api.get("/v1/metrics", since=since, until=until, label=label)
    if json_out:
        _print_json(found)
        return
    table = Table("figure", "value", show_header=False)
    runs = found["runs"]
    table.add_row("window", f"{found['since']} … {found['until']}")
    table.add_row(
        "runs ended",
        f"{runs['ended']} ({runs['completed']} completed, {runs['failed']} failed, "
        f"{runs['cancelled']} cancelled); {runs['live']} live",
    )
    table.add_row("success rate", _share(found["success_rate"]))
    table.add_row(
        "recovery rate",
        f"{_share(found['recovery_rate'])} of {found['met_failure']} that met a failure",
    )
    table.add_row("interventions per run", str(found["interventions_per_run"]))
    for name in ("cost_usd", "duration_s"):
        spread = found[name]
        table.add_row(name, f"mean {spread['mean']}, p50 {spread['p50']}, p95 {spread['p95']}")
    for name, value in found["drift"].items():
        table.add_row(name.replace("_", " "), str(value))
    out.print(table)


def compare(
    run_a: RunId,
    run_b: RunId,
    json_out: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
    api_key: ApiKey = None,
) -> None:
    """Two runs side by side (a run and its fork, say): outcome, steps, tool and model
    calls, tokens, cost and time.

    Example: longrun compare run-0123… run-4567…
    """
    with _api(api_url, api_key) as api:
        found = [compared(api.get(f"/v1/runs/{run_id}")) for run_id in (run_a, run_b)]
    if json_out:
        _print_json({"runs": found})
        return
    table = Table("", run_a, run_b)
    for name in found[0]:
        if name != "run_id":
            table.add_row(name.replace("_", " "), *(str(run[name]) for run in found))
    out.print(table)


def compared(run: dict[str, Any]) -> dict[str, Any]:
    """What `compare` shows of a run's status."""
    steps = run["steps"]
    usage = run["usage"]
    counts = {s: sum(step["status"] == s for step in steps) for s in ("completed", "failed")}
    return {
        "run_id": run["run_id"],
        "status": run["status"],
        "error": run["error"] or "",
        "steps": f"{len(steps)}: {counts['completed']} completed, {counts['failed']} failed",
        "tool_calls": usage["tool_calls"],
        "replayed_calls": run["figures"]["replayed_calls"],
        "model_calls": usage["model_calls"],
        "tokens": f"{usage['input_tokens']} in, {usage['output_tokens']} out",
        "cost_usd": round(usage["cost_usd"], 6),
        "duration_s": round(usage["duration_s"], 1),
    }


def _share(value: float | None) -> str:
    return "none" if value is None else f"{value:.0%}"


def _said(answer: dict[str, Any], json_out: bool) -> None:
    if json_out:
        _print_json(answer)
    else:
        out.print(answer.get("detail") or "done", highlight=False)


def _labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep:
            err.print(f"[red]longrun:[/red] a label is key:value, not '{item}'")
            raise typer.Exit(EXIT_USAGE)
        labels[key] = value
    return labels


COMMANDS: dict[str, Callable[..., None]] = {
    "submit": submit,
    "status": status,
    "watch": watch,
    "list": list_runs,
    "approvals": approvals,
    "approve": approve,
    "reject": reject,
    "pause": pause,
    "resume": resume,
    "cancel": cancel,
    "tools": tools,
    "metrics": metrics,
    "compare": compare,
}
