"""`longrun watch`: a live view of one run, fed by its event stream (each event brings a
fresh read of the run's status), or its events as JSON lines."""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from longrun.client import BY_STATUS, EXIT_COMPLETED, EXIT_UNREACHABLE, Api, ApiError

RECENT_EVENTS = 6
REFRESH_S = 0.5  # at most one status read this often while events pour in
RECONNECTS = 30  # tries, 2 s apart, while the API is away
NOW = ("approval.requested", "approval.decided", "run.ended", "phase", "audit")
COLOURS = {
    "completed": "green",
    "failed": "red",
    "cancelled": "yellow",
    "waiting_approval": "magenta",
    "paused": "yellow",
    "running": "cyan",
}


def watch(api: Api, run_id: str, *, json_out: bool, console: Console | None = None) -> int:
    """Follow the run until it ends; the exit code its final status means."""
    console = console or Console()
    run = api.get(f"/v1/runs/{run_id}")
    recent: deque[str] = deque(maxlen=RECENT_EVENTS)
    live = None if json_out else Live(view(run, recent), console=console, auto_refresh=False)
    after, read_at, tries = 0, 0.0, 0
    if live is not None:
        live.start()
    try:
        while True:
            try:
                for event in api.events(run_id, after):
                    after, tries = event["id"], 0
                    if json_out:
                        sys.stdout.write(event["data"] + "\n")
                        sys.stdout.flush()
                        continue
                    recent.append(_line(json.loads(event["data"])))
                    if event["type"] in NOW or time.monotonic() - read_at >= REFRESH_S:
                        run, read_at = api.get(f"/v1/runs/{run_id}"), time.monotonic()
                    assert live is not None
                    live.update(view(run, recent), refresh=True)
                break  # the stream closed: the run has ended
            except ApiError as exc:
                tries += 1
                if exc.code != EXIT_UNREACHABLE or tries > RECONNECTS:
                    raise
                time.sleep(2)  # the API is away (restarting?): resume after the last event
        run = api.get(f"/v1/runs/{run_id}")
    finally:
        if live is not None:
            live.update(view(run, recent), refresh=True)
            live.stop()
    return BY_STATUS.get(run["status"], EXIT_COMPLETED)


def view(run: dict[str, Any], recent: deque[str] | list[str]) -> RenderableType:
    """The run as a person glances at it."""
    status = run["status"]
    done, total = _progress(run)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("run", run["run_id"])
    grid.add_row("goal", Text(run["goal"][:200]))
    state = Text(status, style=COLOURS.get(status, ""))
    if run.get("phase"):
        state.append(f"  phase: {run['phase']}")
    if run.get("pause_reason"):
        state.append(f"  paused: {run['pause_reason']}")
    grid.add_row("status", state)
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(total, 1), completed=done, width=40), f"{done}/{total} steps")
    grid.add_row("progress", bar)
    usage = run.get("usage", {})
    grid.add_row(
        "usage",
        f"{usage.get('model_calls', 0)} model calls, {usage.get('input_tokens', 0)} in / "
        f"{usage.get('output_tokens', 0)} out tokens, ${usage.get('cost_usd', 0):.4f}, "
        f"{usage.get('tool_calls', 0)} tool calls",
    )
    for pending in run.get("pending_approvals", []):
        grid.add_row(
            Text("waits for", style="magenta"),
            Text(
                f"{pending['approval_id']} (step {pending['step_id']}): {pending['summary'][:100]}"
            ),
        )
    if run.get("pending_approvals"):
        grid.add_row("", f"decide: longrun approve|reject {run['run_id']} APPROVAL")
    if run.get("error"):
        grid.add_row(Text("error", style="red"), Text(run["error"][:300]))
    parts: list[RenderableType] = [grid]
    if recent:
        parts.append(Text("\n".join(recent), style="dim"))
    return Group(*parts)


def _progress(run: dict[str, Any]) -> tuple[int, int]:
    # A goal-only run counts its plan's steps; a plan run, its own.
    steps = run.get("plan") or run.get("steps", [])
    done = sum(1 for s in steps if s["status"] in ("completed", "skipped"))
    return done, len(steps)


def _line(event: dict[str, Any]) -> str:
    data = event.get("data", {})
    what = event["type"]
    if event.get("step"):
        what += f" {event['step']}"
    detail = (
        data.get("error")
        or data.get("action")
        or data.get("decision")
        or data.get("phase")
        or data.get("status")
        or ""
    )
    at = str(event.get("at", ""))[11:19]
    return f"{at} #{event['id']} {what} {detail}".rstrip()
