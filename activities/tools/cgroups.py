"""Kernel bounds on all of one step's processes together: a cgroup per call with a memory
limit (swap off) and a process limit, on cgroup v2 or on v1's `memory` and `pids`
hierarchies.

Where the groups are made: LONGRUN_SANDBOX_CGROUP (a cgroup delegated to the worker's user:
on v2 a folder it owns whose `cgroup.controllers` lists memory and pids; a non-root worker
needs one), else, for a root worker, `longrun-sandbox` under /sys/fs/cgroup (v2) or under
/sys/fs/cgroup/memory and /sys/fs/cgroup/pids (v1). The command's shell writes its own pid
into each group before it starts anything, so no process of the step is ever outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
GROUP = "longrun-sandbox"
CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class Cgroups:
    """Where this worker makes a call's groups: one folder per controller (v1) or one
    folder for both (v2)."""

    version: int
    bases: tuple[Path, ...]

    def describe(self) -> str:
        """Where, in a person's words."""
        return f"cgroup v{self.version} at {', '.join(map(str, self.bases))}"

    def make(self, memory_bytes: int, processes: int) -> CallGroups:
        """New groups for one call, their limits set."""
        name = f"call-{uuid.uuid4().hex}"
        folders = tuple(base / name for base in self.bases)
        made: list[Path] = []
        try:
            for folder in folders:
                folder.mkdir()
                made.append(folder)
            groups = CallGroups(self.version, folders)
            groups.limit(memory_bytes, processes)
        except OSError:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return groups


@dataclass(frozen=True)
class CallGroups:
    """The cgroup folders of one call."""

    version: int
    folders: tuple[Path, ...]

    def _file(self, name: str) -> Path:
        """The folder holding the controller file `name` (`memory.…`, `pids.…`)."""
        if self.version == 2:
            return self.folders[0] / name
        controller = name.split(".", 1)[0]
        return next(f for f in self.folders if f.parent.parent.name == controller) / name

    def limit(self, memory_bytes: int, processes: int) -> None:
        """Set the memory bound (no swap beyond it) and the process bound."""
        if self.version == 2:
            self._file("memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # a kernel without swap accounting
                self._file("memory.swap.max").write_text("0")
            self._file("pids.max").write_text(str(processes))
            return
        self._file("memory.limit_in_bytes").write_text(str(memory_bytes))
        with contextlib.suppress(FileNotFoundError):  # swap accounting off: no swap either
            self._file("memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
        with contextlib.suppress(OSError):
            self._file("memory.swappiness").write_text("0")
        self._file("pids.max").write_text(str(processes))

    def join_script(self) -> str:
        """Shell that moves the shell itself into every group."""
        return "".join(f'echo $$ > "{folder}/cgroup.procs" && ' for folder in self.folders)

    def oom_kills(self) -> int:
        """How many of the call's processes the kernel killed for passing the memory bound."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            lines = self._file(name).read_text().splitlines()
        except OSError:
            return 0
        counts = dict(line.split(" ", 1) for line in lines if " " in line)
        return int(counts.get("oom_kill", "0"))

    def remove(self, tries: int = 100) -> None:
        """Kill what is left in the groups and remove them. The kernel may still be tearing
        their last processes down: then it is tried again a little later on the event
        loop, which the step does not wait for."""
        left = []
        for folder in self.folders:
            try:
                pids = (folder / "cgroup.procs").read_text().split()
            except FileNotFoundError:
                continue
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            try:
                folder.rmdir()
            except OSError:
                left.append(folder)
        if left and tries > 0:
            later = CallGroups(self.version, tuple(left))
            asyncio.get_running_loop().call_later(0.05, later.remove, tries - 1)


def _v2_ready(folder: Path) -> bool:
    """Whether `folder` is a v2 cgroup whose children may use memory and pids."""
    try:
        offered = (folder / "cgroup.controllers").read_text().split()
    except OSError:
        return False
    if not all(c in offered for c in CONTROLLERS):
        return False
    with contextlib.suppress(OSError):
        (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    try:
        enabled = (folder / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
    return all(c in enabled for c in CONTROLLERS)


def _usable(bases: tuple[Path, ...], version: int) -> Cgroups | None:
    """`bases` if a call's groups can be made and limited there (tried once), else None."""
    found = Cgroups(version, bases)
    try:
        probe = found.make(64 * 1024 * 1024, 8)
    except (OSError, StopIteration):
        return None
    for folder in probe.folders:
        with contextlib.suppress(OSError):
            folder.rmdir()
    return found


def find_cgroups(delegated: Path | None) -> tuple[Cgroups | None, str]:
    """Where this worker can make bounded groups, or None with the reason."""
    if delegated is not None:
        if _v2_ready(delegated):
            found = _usable((delegated,), 2)
            if found is not None:
                return found, ""
        return None, (
            f"LONGRUN_SANDBOX_CGROUP={delegated} is not a cgroup v2 folder this worker may "
            "make groups in with the memory and pids controllers"
        )
    if os.geteuid() != 0:
        return None, (
            "the worker is not root and LONGRUN_SANDBOX_CGROUP names no cgroup delegated to it"
        )
    if (ROOT / "cgroup.controllers").exists():  # the unified (v2) hierarchy
        base = ROOT / GROUP
        with contextlib.suppress(OSError):
            base.mkdir(exist_ok=True)
        if _v2_ready(ROOT) and _v2_ready(base):
            found = _usable((base,), 2)
            if found is not None:
                return found, ""
    else:
        bases = tuple(ROOT / controller / GROUP for controller in CONTROLLERS)
        for base in bases:
            with contextlib.suppress(OSError):
                base.mkdir(exist_ok=True)
        found = _usable(bases, 1)
        if found is not None:
            return found, ""
    return None, f"no cgroup with the memory and pids controllers is writable under {ROOT}"
