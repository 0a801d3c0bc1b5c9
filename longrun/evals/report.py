"""The eval's report: the scores and every attempt as JSON, a plot of each task's passes,
and the table the README shows."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from longrun.dev.revision import commit
from longrun.evals.runner import Outcome

SHOWN = (
    "pass^1",
    "pass^k",
    "cost_per_success_usd",
    "time_p50_s",
    "time_p95_s",
    "model_calls",
    "input_tokens_per_call",
)


def write_json(
    outcome: Outcome, found: dict[str, Any], path: Path, baseline: dict[str, Any] | None = None
) -> None:
    """The scores (and the baseline's), the commit they were measured at, the options and
    every attempt and fault."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scored = {"scores": found} | ({"baseline_scores": baseline} if baseline else {})
    kept = {**scored, "commit": commit(), **asdict(outcome)}
    path.write_text(json.dumps(kept, indent=1) + "\n")


def plot(outcome: Outcome, found: dict[str, Any], path: Path) -> bool:
    """Each task's share of passed attempts as a bar; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(found["per_task"])
    shares = []
    for name in names:
        passed, tried = (int(n) for n in found["per_task"][name].split("/"))
        shares.append(passed / tried)
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(names) + 1.5))
    ax.barh(names, shares, color="tab:green")
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    chaos = "with chaos" if outcome.options["chaos"] else "calm"
    model = outcome.options["model"] or "stand-in"
    ax.set_title(
        f"{model}, k={outcome.options['k']}, {chaos}: pass^1 {found['pass^1']}, "
        f"pass^k {found['pass^k']}, {found['applied_twice']} applied twice"
    )
    ax.set_xlabel("share of attempts that passed")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """A Markdown table of scores, one row per (label, scores)."""
    head = ["run", *SHOWN, "faults", "recovery p50/max s", "applied twice", "done, no effect"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, found in rows:
        recovery = f"{found['recovery_p50_s']}/{found['recovery_max_s']}"
        if not found["faults"]:
            recovery = "-"
        cells = [label, *(str(found[name]) for name in SHOWN)]
        cells += [str(found["faults"]), recovery, str(found["applied_twice"])]
        cells.append(str(found.get("completed_without_effect", "-")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
