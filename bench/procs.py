"""What a process has used so far, read from /proc: the benchmarks measure servers and
workers from outside."""

from __future__ import annotations

import os
from pathlib import Path


def rss_kb(pid: int) -> int:
    """The process's resident memory (VmRSS), in KB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
