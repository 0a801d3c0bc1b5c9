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
- limits on CPU time, address space, file size and open files (rlimits, set by the shell
  that starts bubblewrap), and on processes: RLIMIT_NPROC where the worker is not root (the
  kernel does not apply it to root), else a `pids` cgroup of its own per call (moving a
  process into a cgroup costs milliseconds: run workers as another user, as the compose
  image does).

A worker that cannot confine refuses process tools with the reason, unless the operator
sets `LONGRUN_SANDBOX=unconfined`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from activities.errors import fatal
from activities.tools import egress
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
CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
CGROUP_GROUP = "longrun-sandbox"

Mode = Literal["bwrap", "unconfined", "unavailable"]


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use."""

    cpu_s: int
    memory_bytes: int
    processes: int
    file_bytes: int
    open_files: int = 1024


@dataclass(frozen=True)
class Confinement:
    """How this worker runs the processes tools start, and why."""

    mode: Mode
    detail: str
    pids_cgroup: Path | None = None

    @property
    def confined(self) -> bool:
        """Whether commands run inside the sandbox."""
        return self.mode == "bwrap"

    def describe(self) -> dict[str, str]:
        """What `/readyz` and `GET /v1/tools` say about it."""
        return {"mode": self.mode, "detail": self.detail}


def limits_of(settings: Settings, timeout_s: float) -> Limits:
    """The limits of one command from the worker's settings and the step's timeout."""
    return Limits(
        cpu_s=int(timeout_s) + 1,
        memory_bytes=settings.sandbox_memory_mb * 1024 * 1024,
        processes=settings.sandbox_processes,
        file_bytes=settings.sandbox_file_mb * 1024 * 1024,
    )


def _system() -> list[str]:
    """The new root's read-only part: system directories, the worker's Python."""
    # /tmp first: what is bound later may live under the host's /tmp (a venv, say).
    args: list[str] = ["--tmpfs", "/tmp"]
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


def _binds(workspace: Path, door: Path | None) -> list[str]:
    args = _system()
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


def bwrap_argv(argv: list[str], workspace: Path, door: Path | None = None) -> list[str]:
    """`argv` wrapped in bubblewrap, confined to `workspace`; with a `door` (an egress
    folder), able to reach allowed hosts through it (activities/tools/egress.py)."""
    if door is not None:
        argv = egress.wrap(argv, sys.executable)
    return [*_bwrap(), *_binds(workspace, door), "--chdir", WORKSPACE, "--", *argv]


def server_argv(argv: list[str], paths: list[str], door: Path | None = None) -> list[str]:
    """A long-lived server's `argv` (a stdio MCP server's) in bubblewrap: the new root's
    read-only part, `paths` read-write; with a `door` (an egress folder), able to reach
    allowed destinations through it, as process tools do; else no network."""
    binds = [arg for path in paths for arg in ("--bind", path, path)]
    if door is not None:
        binds += ["--ro-bind", str(door), egress.INSIDE]
        argv = egress.wrap(argv, sys.executable)
    return [*_bwrap(), *_system(), *binds, *_FINISH, "--", *argv]


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


def _limits_script(limits: Limits, *, root: bool, group: Path | None) -> str:
    """A shell line that sets the rlimits (inherited by all the command starts), joins
    `group` if given (before anything it starts exists: no process escapes it), then runs
    the rest of its arguments. One `sh` does it: cheaper than a `prlimit` process."""
    sets = [
        f"-t {limits.cpu_s}",
        f"-v {limits.memory_bytes // 1024}",
        f"-f {limits.file_bytes // 512}",
        f"-n {limits.open_files}",
        "-c 0",
    ]
    if not root:  # counted per user: the worker's own processes count too
        sets.append(f"-p {limits.processes + _processes_of_user()}")
    join = 'echo $$ > "$0/cgroup.procs" && ' if group is not None else ""
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


@contextlib.contextmanager
def confined_argv(
    confinement: Confinement,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    door: Path | None = None,
) -> Iterator[list[str]]:
    """The command line that runs `argv` as `confinement` says, for the time of the block
    (a `pids` cgroup, when one is used, is removed after it)."""
    if not confinement.confined:
        yield argv
        return
    inner = bwrap_argv(argv, workspace, door)
    group = None
    if confinement.pids_cgroup is not None:
        group = confinement.pids_cgroup / f"call-{uuid.uuid4().hex}"
        group.mkdir()
    try:
        if group is not None:
            (group / "pids.max").write_text(str(limits.processes))
        script = _limits_script(limits, root=os.geteuid() == 0, group=group)
        # The script's $0 names the group it joins.
        yield ["sh", "-c", script, str(group or "sh"), *inner]
    finally:
        if group is not None:
            _remove_group(group)


def _remove_group(group: Path, tries: int = 100) -> None:
    """Kill what is left in a call's cgroup (the sandbox dies with its parent; this is in
    case) and remove it. The kernel may still be tearing its last processes down: then it
    is tried again a little later on the event loop, which the step does not wait for."""
    try:
        pids = (group / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    try:
        group.rmdir()
    except OSError:
        if tries > 0:
            asyncio.get_running_loop().call_later(0.05, _remove_group, group, tries - 1)


def _pids_cgroup() -> Path | None:
    """A `pids` cgroup this worker may create groups under, or None."""
    for root in CGROUP_ROOTS:
        base = root / CGROUP_GROUP
        try:
            base.mkdir(exist_ok=True)
            probe = base / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            ok = (probe / "pids.max").exists()
            probe.rmdir()
        except OSError:
            continue
        if ok:
            if root == Path("/sys/fs/cgroup"):  # cgroup v2: its children need the controller
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+pids")
            return base
    return None


@functools.cache
def _probe(mode: str, path: str) -> Confinement:
    """How process tools run in `mode` with the commands on `path` (found once)."""
    if mode == "unconfined":
        return Confinement(
            "unconfined",
            "LONGRUN_SANDBOX=unconfined: process tools run as the worker's user, with its "
            "files, environment and network",
        )
    if shutil.which("bwrap", path=path) is None or shutil.which("sh", path=path) is None:
        return Confinement(
            "unavailable",
            "bubblewrap (bwrap) and sh are needed to confine process tools: install "
            "bubblewrap (Debian: bubblewrap), or set LONGRUN_SANDBOX=unconfined",
        )
    pids = None
    if os.geteuid() == 0:
        pids = _pids_cgroup()
        if pids is None:
            return Confinement(
                "unavailable",
                "the worker runs as root, where the kernel does not limit processes per "
                "user, and no pids cgroup is writable: run the worker as another user, or "
                "set LONGRUN_SANDBOX=unconfined",
            )
    with tempfile.TemporaryDirectory() as empty:
        check = subprocess.run(
            bwrap_argv(["true"], Path(empty)),
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
    where = f"processes limited by the cgroup {pids}" if pids else "processes limited per user"
    return Confinement("bwrap", f"bubblewrap: no network, workspace only; {where}", pids)


def confinement(settings: Settings) -> Confinement:
    """How this process would run process tools (probed once per process)."""
    return confinement_of(settings.sandbox)


def confinement_of(mode: str) -> Confinement:
    """How this process would run processes in `mode` (LONGRUN_SANDBOX)."""
    return _probe(mode, os.environ.get("PATH", os.defpath))
