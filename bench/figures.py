"""One figure of the benchmark suite: longrun's value beside its baseline measured in the
same run (bare Temporal, or a plain loop), and their ratio. Printed as one table and kept in
bench/results.json; nothing compares a figure with a threshold to pass or fail."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Figure:
    """longrun's value of one measure beside the baseline's."""

    section: str
    name: str
    unit: str
    longrun: float
    baseline: float
    baseline_name: str = "bare Temporal"
    target: str = ""  # what the ratio should be, in words ("<= 1.2"), when there is a goal

    @property
    def ratio(self) -> float | None:
        """longrun over baseline; None when the baseline is zero."""
        return self.longrun / self.baseline if self.baseline else None

    def measured(self) -> bool:
        """Whether both sides have a value (a side that completed nothing has none)."""
        return not any(math.isnan(v) or math.isinf(v) for v in (self.longrun, self.baseline))

    def as_json(self) -> dict[str, Any]:
        """The figure with its ratio, for results.json."""
        return asdict(self) | {"ratio": self.ratio}


def _cell(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


def table(figures: list[Figure]) -> str:
    """The figures as one plain-text table, grouped by section."""
    rows = [("figure", "unit", "longrun", "baseline", "ratio", "target")]
    section = None
    lines_before: list[int] = []
    for f in figures:
        if f.section != section:
            section = f.section
            lines_before.append(len(rows))
            rows.append((f"[{section}]", "", "", "", "", ""))
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}"
        baseline = f"{_cell(f.baseline)} ({f.baseline_name})"
        rows.append((f.name, f.unit, _cell(f.longrun), baseline, ratio, f.target))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        if n in lines_before and n > 1:
            out.append("")
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [c.rjust(w) for c, w in zip(row[2:5], widths[2:5], strict=True)]
        cells.append(row[5])
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("-" * len(out[0]))
    return "\n".join(out)
