"""`longrun demo`: a goal-only run end to end against a running stack (`make run`).

Offline, the stand-in model plays the agent from `scenarios/demo.json`: it plans two steps,
writes hello.py, asks to run it (an irreversible call, so a person approves), and finishes;
the acceptance check really runs hello.py.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx

from longrun.client import DEFAULT_API_URL, EXIT_RUNNING, EXIT_WAITING

DEMO_GOAL = "Demo: write hello.py that prints 'hello, longrun'"
DEMO_REQUEST: dict[str, Any] = {
    "goal": DEMO_GOAL,
    "acceptance": [
        {
            "id": "prints",
            "check": {
                "tool": "python",
                "args": {"code": "import runpy; runpy.run_path('hello.py')"},
                "expect": {"contains": "hello, longrun"},
            },
        },
        # Not a tool check alone: with one, the run would be done once hello.py is written
        # (the check itself runs it), and the demo shows the agent asking to run it.
        {"id": "ran", "check": {"judge": "the agent ran hello.py and saw what it printed"}},
    ],
    "tools": ["write_file", "read_file", "python"],
    "labels": {"demo": "hello"},
}
FINAL = ("completed", "failed", "cancelled")


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def run_demo(api_url: str, *, approve: bool = False, timeout_s: float = 300) -> int:
    """Submit the demo goal, follow it for up to `timeout_s`, and answer its approval:
    asking on a terminal, approving with `approve`; elsewhere it says how to decide and
    waits for someone to. The exit code is the CLI's: 0 completed, 4 still waiting."""
    with httpx.Client(base_url=api_url, timeout=30) as http:
        created = http.post("/v1/runs", json=DEMO_REQUEST)
        if created.status_code != 202:
            _say(f"could not start the demo: {created.status_code} {created.text}")
            return 1
        run_id = created.json()["run_id"]
        # The commands it suggests, as they reach this API.
        where = "" if api_url == DEFAULT_API_URL else f" --api-url {api_url}"
        _say(f"run {run_id}\n  Web UI: {created.json()['links']['temporal_ui']}")
        seen: set[str] = set()
        deadline = time.monotonic() + timeout_s
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            run = http.get(f"/v1/runs/{run_id}").json()
            steps = ", ".join(f"{p['id']} {p['status']}" for p in run.get("plan", []))
            line = f"  {run.get('phase')}" + (f": {steps}" if steps else "")
            if line not in seen:
                seen.add(line)
                _say(line)
            for pending in run.get("pending_approvals", []):
                approval_id = pending["approval_id"]
                if approval_id in seen:
                    continue
                seen.add(approval_id)
                _say(f"  approval needed: {pending['summary']}")
                if not approve and not sys.stdin.isatty():
                    # No one to ask here: say how to decide, and wait for someone to.
                    left = deadline - time.monotonic()
                    _say(
                        f"  waiting up to {left:.0f} s for a decision; approve with\n"
                        f"    .venv/bin/longrun approve {run_id} {approval_id}{where}\n"
                        f"  or in the inbox at {api_url}/ui/approvals"
                        " (`longrun demo --approve` approves as it asks)"
                    )
                    continue
                yes = approve or input("  approve? [y/N] ").strip().lower() == "y"
                decision = {"decision": "approve" if yes else "reject"}
                http.post(f"/v1/runs/{run_id}/approvals/{approval_id}", json=decision)
            if run.get("status") in FINAL:
                break
            time.sleep(0.5)
        status = run.get("status")
        if status not in FINAL:
            waits = [p["approval_id"] for p in run.get("pending_approvals", [])]
            why = f"waiting for approval of {', '.join(waits)}" if waits else str(status)
            _say(
                f"stopped following after {timeout_s:.0f} s: the run is still {why}.\n"
                f"  It keeps waiting; decide with `.venv/bin/longrun approve {run_id} "
                f"{waits[0] if waits else 'APPROVAL'}{where}` and follow it with "
                f"`.venv/bin/longrun watch {run_id}{where}`."
            )
            return EXIT_WAITING if waits else EXIT_RUNNING
        _say(f"status: {status}")
        for criterion in run.get("acceptance", []):
            _say(f"  {criterion['id']}: {criterion['status']} ({criterion['evidence']})")
        return 0 if status == "completed" else 1
