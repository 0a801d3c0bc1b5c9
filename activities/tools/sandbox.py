"""Confinement of the processes tools start (`shell`, `python`, commands in checks).

A command chosen by a model that read untrusted text runs inside bubblewrap:

- its own user, PID, IPC, UTS, cgroup and network namespaces: it sees no process of the
  worker (its own `/proc`), and has no network (only loopback, empty) unless the policy
  grants the tool `network = true`: then allowed hosts only, through the worker's proxy
  (activities/tools/egress.py);
- a new root holding system directories and the worker's Python environment (its
  interpreter and packages, first on PATH) read-only, the run's workspace read-write at
  `/workspace` (its `.longrun/` of backups read-only), an empty `/tmp`: nothing of the
  worker's data directory, other runs' workspaces, configuration or environment variables;
- user 65534 inside, no capabilities, no further user namespaces, a new session (no
  terminal injection), killed with the step;
- bounds on the whole step, by the kernel: the memory of all its processes together and
  their number (a cgroup of its own per call, activities/tools/cgroups.py), its `/tmp` (a
  tmpfs of LONGRUN_SANDBOX_TMP_MB); per process, CPU time, address space, open files, and
  the size of a file (the smaller of LONGRUN_SANDBOX_FILE_MB and what the run's workspace
  quota has left: rlimits, set by the shell that starts bubblewrap). The workspace as a
  whole is watched by the worker (activities/tools/quota.py).

A worker that cannot confine, or cannot bound a step's memory, refuses process tools with
the reason, unless the operator says otherwise (`LONGRUN_SANDBOX=unconfined`,
`LONGRUN_SANDBOX_UNENFORCED=memory`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from activities.errors import fatal
from activities.tools import egress
from activities.tools.cgroups import CallGroups, Cgroups, find_cgroups
from longrun.settings import Settings

WORKSPACE = "/workspace"  # where the run's workspace is, seen from inside
# Commands find the worker's Python environment first: `python -m pytest` runs as it would
# for a person in the project's environment.
PATH = f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin"
# System files a command may need; none holds a secret. All of /etc would include
# /etc/shadow, readable inside when the worker runs as root (the files' owner).
ETC = (
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/mime.types",
)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
MB = 1024 * 1024

Mode = Literal["bwrap", "unconfined", "unavailable"]


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use."""

    cpu_s: int
    memory_bytes: int
    processes: int
    file_bytes: int
    tmp_bytes: int
    open_files: int = 1024


@dataclass(frozen=True)
class Confinement:
    """How this worker runs the processes tools start, and why."""

    mode: Mode
    detail: str
    cgroups: Cgroups | None = None
    bounds: tuple[tuple[str, str], ...] = ()

    @property
    def confined(self) -> bool:
        """Whether commands run inside the sandbox."""
        return self.mode == "bwrap"

    def describe(self) -> dict[str, Any]:
        """What `/readyz` and `GET /v1/tools` say about it: the mode, why, and how each
        bound is enforced."""
        return {"mode": self.mode, "detail": self.detail, "bounds": dict(self.bounds)}


def limits_of(settings: Settings, timeout_s: float, workspace_left: int | None = None) -> Limits:
    """The limits of one command from the worker's settings, the step's timeout and what
    the run's workspace quota has left (no file may grow past it)."""
    file_bytes = settings.sandbox_file_mb * MB
    if workspace_left is not None:
        file_bytes = max(0, min(file_bytes, workspace_left))
    return Limits(
        cpu_s=int(timeout_s) + 1,
        memory_bytes=settings.sandbox_memory_mb * MB,
        processes=settings.sandbox_processes,
        file_bytes=file_bytes,
        tmp_bytes=settings.sandbox_tmp_mb * MB,
    )


def _system(tmp_bytes: int) -> list[str]:
    """The new root's read-only part: system directories, the worker's Python; an empty
    `/tmp` of `tmp_bytes`."""
    # /tmp first: what is bound later may live under the host's /tmp (a venv, say).
    args: list[str] = ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC:
        args += ["--ro-bind-try", path, path]
    for prefix in dict.fromkeys(map(Path, (sys.base_prefix, sys.prefix))):
        if not any(prefix.is_relative_to(p) for p in SYSTEM):  # a venv, pyenv, a custom build
            args += ["--ro-bind", str(prefix), str(prefix)]
    return args


def _binds(workspace: Path, door: Path | None, tmp_bytes: int) -> list[str]:
    args = _system(tmp_bytes)
    if door is not None:
        args += ["--ro-bind", str(door), egress.INSIDE]
    return [
        *args,
        "--bind",
        str(workspace),
        WORKSPACE,
        "--ro-bind",
        str(_backups(workspace)),
        f"{WORKSPACE}/.longrun",
        *_FINISH,
    ]


# Its own /proc and a minimal /dev; then the root is made read-only (bound folders keep
# their own mode).
_FINISH = ("--proc", "/proc", "--dev", "/dev", "--remount-ro", "/")


def _backups(workspace: Path) -> Path:
    """The workspace's `.longrun` folder (write_file's backups), made before any sandbox of
    the run starts, so every sandbox holds it read-only and none can put a symlink in its
    place: bubblewrap would follow one on the worker's side and show what it names."""
    backups = workspace / ".longrun"
    with contextlib.suppress(FileExistsError):
        backups.mkdir()
    if backups.is_symlink() or not backups.is_dir():
        raise fatal(
            "the run's workspace has a '.longrun' that is not a folder (a symlink?): "
            "process tools will not start in it",
            type="SandboxRefused",
        )
    return backups


def bwrap_argv(
    argv: list[str], workspace: Path, tmp_bytes: int, door: Path | None = None
) -> list[str]:
    """`argv` wrapped in bubblewrap, confined to `workspace` with a `/tmp` of `tmp_bytes`;
    with a `door` (an egress folder), able to reach allowed destinations through it
    (activities/tools/egress.py)."""
    if door is not None:
        argv = egress.wrap(argv, sys.executable)
    return [*_bwrap(), *_binds(workspace, door, tmp_bytes), "--chdir", WORKSPACE, "--", *argv]


def server_argv(
    argv: list[str], paths: list[str], tmp_bytes: int, door: Path | None = None
) -> list[str]:
    """A long-lived server's `argv` (a stdio MCP server's) in bubblewrap: the new root's
    read-only part, `paths` read-write, a `/tmp` of `tmp_bytes`; with a `door` (an egress
    folder), able to reach allowed destinations through it, as process tools do; else no
    network."""
    binds = [arg for path in paths for arg in ("--bind", path, path)]
    if door is not None:
        binds += ["--ro-bind", str(door), egress.INSIDE]
        argv = egress.wrap(argv, sys.executable)
    return [*_bwrap(), *_system(tmp_bytes), *binds, *_FINISH, "--", *argv]


def _bwrap() -> list[str]:
    return [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--hostname",
        "sandbox",
        "--new-session",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
    ]


def _limits_script(limits: Limits, *, per_user: bool, groups: CallGroups | None) -> str:
    """A shell line that sets the rlimits (inherited by all the command starts), joins
    `groups` if given (before anything it starts exists: no process escapes them), then
    runs the rest of its arguments. One `sh` does it: cheaper than a `prlimit` process."""
    sets = [
        f"-t {limits.cpu_s}",
        f"-v {limits.memory_bytes // 1024}",
        f"-f {limits.file_bytes // 512}",
        f"-n {limits.open_files}",
        "-c 0",
    ]
    if per_user:  # counted per user: the worker's own processes count too
        sets.append(f"-p {limits.processes + _processes_of_user()}")
    join = groups.join_script() if groups is not None else ""
    limited = " && ".join(f"ulimit {each}" for each in sets)  # dash sets one per call
    return f'{limited} && {join}exec "$@"'


def _processes_of_user() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def exec_failure(stderr: str, name: str) -> str | None:
    """What went wrong when bubblewrap could not start the command `name`, or None (the
    command itself ran and failed)."""
    if not stderr.startswith("bwrap: execvp "):
        return None
    if "No such file or directory" in stderr:
        return f"command not found: {name}"
    if "Permission denied" in stderr:
        return f"command not executable: {name}"
    return f"the sandbox could not start {name}: {stderr.strip()[:300]}"


@dataclass(frozen=True)
class Call:
    """One command's line, and the cgroups that bound it (when the worker has them)."""

    argv: list[str]
    groups: CallGroups | None = None

    def bound_passed(self, limits: Limits) -> str | None:
        """Which bound the kernel enforced by killing a process of the call, or None."""
        if self.groups is not None and self.groups.oom_kills() > 0:
            return (
                f"the step's processes together passed their memory bound of "
                f"{limits.memory_bytes // MB} MB (LONGRUN_SANDBOX_MEMORY_MB) and the kernel "
                "killed one"
            )
        return None


@contextlib.contextmanager
def confined_argv(
    confinement: Confinement,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    door: Path | None = None,
) -> Iterator[Call]:
    """The command line that runs `argv` as `confinement` says, for the time of the block
    (its cgroups, when used, are removed after it)."""
    if not confinement.confined:
        yield Call(argv)
        return
    inner = bwrap_argv(argv, workspace, limits.tmp_bytes, door)
    groups = None
    if confinement.cgroups is not None:
        groups = confinement.cgroups.make(limits.memory_bytes, limits.processes)
    try:
        per_user = groups is None and os.geteuid() != 0
        script = _limits_script(limits, per_user=per_user, groups=groups)
        yield Call(["sh", "-c", script, "sh", *inner], groups)
    finally:
        if groups is not None:
            groups.remove()


@functools.cache
def _probe(mode: str, path: str, cgroup: Path | None, unenforced: frozenset[str]) -> Confinement:
    """How process tools run in `mode` with the commands on `path` (found once)."""
    if mode == "unconfined":
        return Confinement(
            "unconfined",
            "LONGRUN_SANDBOX=unconfined: process tools run as the worker's user, with its "
            "files, environment and network",
            bounds=(("workspace", "watched by the worker"),),
        )
    if shutil.which("bwrap", path=path) is None or shutil.which("sh", path=path) is None:
        return Confinement(
            "unavailable",
            "bubblewrap (bwrap) and sh are needed to confine process tools: install "
            "bubblewrap (Debian: bubblewrap), or set LONGRUN_SANDBOX=unconfined",
        )
    groups, why = find_cgroups(cgroup)
    if groups is None and "memory" not in unenforced:
        return Confinement(
            "unavailable",
            f"the memory of a step's processes together cannot be bounded: {why}. Run the "
            "worker as root, or name a delegated cgroup in LONGRUN_SANDBOX_CGROUP; or accept "
            "per-process limits only with LONGRUN_SANDBOX_UNENFORCED=memory",
        )
    if groups is None and os.geteuid() == 0:
        return Confinement(
            "unavailable",
            "the worker runs as root, where the kernel does not limit processes per user, "
            f"and {why}: run the worker as another user, or set LONGRUN_SANDBOX=unconfined",
        )
    with tempfile.TemporaryDirectory() as empty:
        check = subprocess.run(
            bwrap_argv(["true"], Path(empty), MB),
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    if check.returncode != 0:
        return Confinement(
            "unavailable",
            f"bubblewrap cannot start a sandbox here: {check.stderr.strip()[:300]} (user "
            "namespaces may be off, or a container's seccomp profile forbids them); or set "
            "LONGRUN_SANDBOX=unconfined",
        )
    if groups is not None:
        memory = f"the step's processes together: {groups.describe()}, swap off"
        processes = memory
    else:
        memory = "per process only (address space): LONGRUN_SANDBOX_UNENFORCED=memory"
        processes = "per user (RLIMIT_NPROC)"
    bounds = (
        ("memory", memory),
        ("processes", processes),
        ("tmp", "a sized tmpfs per step"),
        ("file", "per file (RLIMIT_FSIZE)"),
        ("workspace", "per file by the kernel, the whole watched by the worker"),
    )
    where = "memory bounded per step" if groups else "memory bounded per process only"
    return Confinement("bwrap", f"bubblewrap: no network, workspace only; {where}", groups, bounds)


def confinement(settings: Settings) -> Confinement:
    """How this process would run process tools (probed once per process)."""
    return confinement_of(
        settings.sandbox, settings.sandbox_cgroup, frozenset(settings.sandbox_unenforced)
    )


def confinement_of(
    mode: str, cgroup: Path | None = None, unenforced: frozenset[str] = frozenset()
) -> Confinement:
    """How this process would run processes in `mode` (LONGRUN_SANDBOX)."""
    return _probe(mode, os.environ.get("PATH", os.defpath), cgroup, unenforced)
