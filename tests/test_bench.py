"""The benchmark suite still does its work: every section at its smallest size
(`bench/suite.py --smoke`), for correctness only. A section that raises, or whose longrun
or baseline side measured nothing, fails it; the figures mean nothing at this size and are
not kept."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from tests.helpers import REPO


async def test_every_benchmark_section_does_its_work_at_its_smallest() -> None:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "bench/suite.py", "--smoke"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = done.stdout[-6000:] + done.stderr[-4000:]
    assert done.returncode == 0, said
    assert "(smoke suite)" in done.stdout and "FAILED" not in done.stdout, said
    shown = {line for line in done.stdout.splitlines() if line.startswith("[")}
    assert shown >= {
        "[per step]",
        "[API]",
        "[load]",
        "[watchers]",
        "[waiting runs]",
        "[context]",
        "[under faults]",
        "[sandbox]",
        "[billing]",
        "[quick steps]",
    }, said
