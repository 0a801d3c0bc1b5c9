"""Process tools run confined: what a command chosen by a hostile model tries, and what
stops it. Each attempt runs as the real `tool.shell`/`tool.python` activity; the last test
makes them from a run's step on a worker process of its own, which stays up."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from temporalio.exceptions import ApplicationError

from activities.mcp import McpHub
from api.app import create_app
from longrun.dev.stack import ServerThread
from longrun.mcp_servers import load_mcp_servers
from longrun.settings import Settings
from tests.activities.test_tools import Tools
from tests.helpers import REPO, Poll, start_worker, stop_processes, submit

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap is installed by `make test`"
)


@pytest.fixture
def cfg(tmp_path: Path) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path / "data",
        LONGRUN_SANDBOX_PROCESSES=32,
        LONGRUN_SANDBOX_FILE_MB=8,
        LONGRUN_SANDBOX_MEMORY_MB=512,
    )


@pytest.fixture
def tools(cfg: Settings) -> Tools:
    return Tools(cfg, "run-" + uuid.uuid4().hex)


@pytest.fixture
def listening() -> Iterator[int]:
    """A TCP port on the host's loopback with a server accepting on it."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


async def test_the_workers_environment_cannot_be_read(
    tools: Tools, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGRUN_SECRETS", '{"token": "sandbox-canary-value"}')
    script = f"cat /proc/{os.getpid()}/environ; cat /proc/*/environ; env; ps -ef"
    out = await tools.run("shell", argv=sh(script), check=False)
    assert "sandbox-canary-value" not in str(out)
    assert f"/proc/{os.getpid()}/environ: No such file" in out["stderr"]
    # The command sees only its own processes.
    listed = await tools.run("python", code="import os; print(*os.listdir('/proc'))")
    pids = [p for p in listed["stdout"].split() if p.isdigit()]
    assert len(pids) <= 4, pids


async def test_another_runs_workspace_and_the_data_directory_are_not_there(
    tools: Tools, cfg: Settings
) -> None:
    other = cfg.workspaces_dir / "run-other" / "workspace"
    other.mkdir(parents=True)
    (other / "report.txt").write_text("another run's work")
    (cfg.data_dir / "artifacts").mkdir(parents=True)
    worker_file = Path("worker.py").resolve()
    script = f"cat {other}/report.txt; ls {cfg.data_dir}; cat {worker_file}; cat /etc/shadow"
    out = await tools.run("shell", argv=sh(script), check=False)
    assert "another run's work" not in out["stdout"] and out["stdout"] == ""
    assert out["stderr"].count("No such file or directory") == 4, out["stderr"]


async def test_nothing_outside_the_workspace_can_be_written(tools: Tools, cfg: Settings) -> None:
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    targets = [cfg.data_dir / "planted", Path("/usr/planted"), Path("/planted")]
    script = "; ".join(f"echo x > {t}" for t in targets) + "; echo ok > inside.txt"
    out = await tools.run("shell", argv=sh(script), check=False)
    assert not [t for t in targets if t.exists()]
    refused = ("Read-only file system", "Directory nonexistent")
    assert sum(out["stderr"].count(r) for r in refused) == 3, out["stderr"]
    workspace = cfg.workspaces_dir / tools.run_id / "workspace"
    assert (workspace / "inside.txt").read_text() == "ok\n"
    # Backups of the run's own writes are the run's undo: a command cannot change them.
    await tools.run("write_file", path="a.txt", content="one")
    await tools.run("write_file", path="a.txt", content="two")
    out = await tools.run("shell", argv=sh("echo forged > .longrun/backups/s1.bak"), check=False)
    assert out["exit_code"] != 0 and "Read-only file system" in out["stderr"]


async def test_a_symlink_in_the_workspace_leads_nowhere_outside(
    tools: Tools, cfg: Settings
) -> None:
    kept = cfg.data_dir / "kept"
    kept.mkdir(parents=True)
    (kept / "key").write_text("outside-canary")
    # Inside, a symlink resolves in the sandbox's own tree: nothing of the worker's.
    script = f"ln -s {kept} k; cat k/key; rm -rf .longrun; ln -s {kept} .longrun"
    out = await tools.run("shell", argv=sh(script), check=False)
    assert "outside-canary" not in out["stdout"], out
    assert (await tools.run("shell", argv=sh("cat .longrun/key"), check=False))["exit_code"] != 0
    # A `.longrun` symlink planted by other means is not followed: the step is refused.
    workspace = cfg.workspaces_dir / tools.run_id / "workspace"
    (workspace / ".longrun").rmdir()
    (workspace / ".longrun").symlink_to(kept)
    err = await tools.fail("shell", argv=sh("cat .longrun/key"))
    assert err.type == "SandboxRefused" and "not a folder" in err.message


async def test_no_network_not_even_the_hosts_loopback(tools: Tools, listening: int) -> None:
    code = (
        "import socket\n"
        f"for host, port in [('127.0.0.1', {listening}), ('10.1.2.3', 7233)]:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2)\n"
        "        print('connected', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', host, exc.errno)\n"
    )
    out = await tools.run("python", code=code)
    assert "connected" not in out["stdout"], out
    assert out["stdout"].count("refused") == 2


async def test_a_fork_bomb_hits_the_process_limit(tools: Tools) -> None:
    code = (
        "import os, time\n"
        "started = 0\n"
        "try:\n"
        "    for _ in range(10_000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        started += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', started, exc.strerror)\n"
    )
    out = await tools.run("python", code=code, timeout_s=20)
    assert out["stdout"].startswith("refused after"), out
    assert int(out["stdout"].split()[2]) < 32
    # The step is over, its processes with it; the next one runs as usual.
    assert (await tools.run("shell", argv=["true"]))["exit_code"] == 0


async def test_a_huge_file_stops_at_the_file_size_limit(tools: Tools, cfg: Settings) -> None:
    out = await tools.run("shell", argv=sh("head -c 10G /dev/zero > big"), check=False)
    assert out["exit_code"] != 0
    big = cfg.workspaces_dir / tools.run_id / "workspace" / "big"
    assert big.stat().st_size <= 8 * 1024 * 1024


async def test_memory_is_limited(tools: Tools) -> None:
    out = await tools.run("python", code="x = bytearray(2 * 1024**3)", check=False)
    assert out["exit_code"] == 1 and "MemoryError" in out["stderr"]


async def test_an_endless_loop_ends_at_its_timeout(tools: Tools) -> None:
    err = await tools.fail("python", code="while True: pass", timeout_s=1)
    assert err.type == "Timeout" and err.non_retryable


async def test_without_bubblewrap_process_tools_are_refused(
    tools: Tools, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap
    err = await tools.fail("shell", argv=["true"])
    assert err.type == "SandboxUnavailable" and err.non_retryable
    assert "bubblewrap (bwrap) and sh are needed" in err.message
    assert "LONGRUN_SANDBOX=unconfined" in err.message


async def test_unconfined_is_an_explicit_choice(cfg: Settings) -> None:
    loose = Tools(cfg.model_copy(update={"sandbox": "unconfined"}), "run-" + uuid.uuid4().hex)
    out = await loose.run("shell", argv=["pwd"])
    assert out["stdout"].strip() == str(cfg.workspaces_dir / loose.run_id / "workspace")


async def test_escapes_from_a_runs_steps_fail_and_the_worker_stays_up(
    api: httpx.AsyncClient, settings: Settings, wait_run: Poll, tmp_path: Path
) -> None:
    worker = start_worker(settings, tmp_path, env={"LONGRUN_SECRETS": '{"t": "canary-7f3a"}'})
    try:
        connect = "import socket; socket.create_connection(('127.0.0.1', 7233))"
        attempts = {
            "environ": f"cat /proc/{worker.pid}/environ",
            "fork": "i=0; while [ $i -lt 5000 ]; do sleep 30 & i=$((i+1)); done",
            "network": f'exec python3 -c "{connect}"',
        }
        steps = [
            {
                "id": name,
                "tool": "shell",
                "args": {"argv": sh(script), "timeout_s": 20, "check": False},
                "requires_approval": False,
            }
            for name, script in attempts.items()
        ]
        run = await wait_run(await submit(api, steps), timeout_s=90)
        assert run["status"] == "completed", run
        assert "canary-7f3a" not in str(run)
        errors = {s["id"]: s["output"]["stderr"] for s in run["steps"]}
        assert "No such file or directory" in errors["environ"]
        assert "fork" in errors["fork"].lower()
        assert "ConnectionRefusedError" in errors["network"]
        # The worker is up and runs the next run.
        assert worker.poll() is None
        step = {"id": "ok", "tool": "shell", "args": {"argv": ["true"]}, "requires_approval": False}
        ok = await wait_run(await submit(api, [step]), timeout_s=60)
        assert ok["status"] == "completed", ok
    finally:
        stop_processes(worker)


async def test_readiness_and_the_tool_list_say_how_process_tools_run(
    settings: Settings, tmp_path: Path
) -> None:
    loose = settings.model_copy(update={"sandbox": "unconfined"})
    for each, mode in [(settings, "bwrap"), (loose, "unconfined")]:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(each)), base_url="http://localhost"
        ) as http:
            ready = (await http.get("/readyz")).json()
            listed = (await http.get("/v1/tools")).json()
        assert ready["process_tools"]["mode"] == listed["process_tools"]["mode"] == mode
        if mode == "bwrap":
            bounds = ready["process_tools"]["bounds"]
            assert "the step's processes together: cgroup v" in bounds["memory"], bounds
            assert set(bounds) == {"memory", "processes", "tmp", "file", "workspace"}
    assert "as the worker's user" in ready["process_tools"]["detail"]


async def test_a_memory_bound_that_cannot_be_enforced_refuses_process_tools(
    cfg: Settings, tmp_path: Path
) -> None:
    # A "delegated cgroup" that is no cgroup: per-step memory cannot be bounded here.
    unbounded = cfg.model_copy(update={"sandbox_cgroup": tmp_path})
    err = await Tools(unbounded, "run-" + uuid.uuid4().hex).fail("shell", argv=["true"])
    assert err.type == "SandboxUnavailable", err.message
    assert f"LONGRUN_SANDBOX_CGROUP={tmp_path} is not a cgroup v2 folder" in err.message
    assert "LONGRUN_SANDBOX_UNENFORCED=memory" in err.message
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(unbounded)), base_url="http://localhost"
    ) as http:
        listed = (await http.get("/v1/tools")).json()
    assert listed["process_tools"]["mode"] == "unavailable"
    assert "cannot be bounded" in listed["process_tools"]["detail"]


@pytest.fixture
def two_servers() -> Iterator[tuple[str, str]]:
    """Two local HTTP servers answering `ok`: one allowed, one not."""
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    with ServerThread(app) as allowed, ServerThread(app) as other:
        yield allowed.url, other.url


async def test_network_granted_by_policy_reaches_allowed_hosts_only(
    cfg: Settings, tmp_path: Path, two_servers: tuple[str, str]
) -> None:
    allowed, other = two_servers
    fetch = (
        "import sys, urllib.request\n"
        "for url in sys.argv[1:]:\n"
        "    try:\n"
        "        print(url, urllib.request.urlopen(url, timeout=5).read().decode())\n"
        "    except Exception as exc:\n"
        "        print(url, 'refused', exc)\n"
    )
    argv = ["python3", "-c", fetch, allowed, other]
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.shell]\nnetwork = true\n")
    allow = allowed.removeprefix("http://")
    granted = cfg.model_copy(update={"policy_file": policy, "http_allow_hosts": [allow]})
    out = await Tools(granted, "run-" + uuid.uuid4().hex).run("shell", argv=argv)
    lines = out["stdout"].splitlines()
    assert lines[0] == f"{allowed} ok", out
    assert lines[1].startswith(f"{other} refused") and "403" in lines[1], out
    # Around the proxy: nothing.
    bypass = fetch.replace(
        "urllib.request.urlopen(url",
        "urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url",
    )
    out = await Tools(granted, "run-" + uuid.uuid4().hex).run(
        "shell", argv=["python3", "-c", bypass, allowed]
    )
    assert "refused" in out["stdout"], out
    # Without the grant, no network at all.
    plain = cfg.model_copy(update={"http_allow_hosts": [allow]})
    out = await Tools(plain, "run-" + uuid.uuid4().hex).run("shell", argv=argv)
    lines = out["stdout"].splitlines()
    assert [line.split()[1] for line in lines] == ["refused", "refused"], out


async def test_a_stdio_mcp_server_in_a_sandbox_reaches_only_its_paths(
    tmp_path: Path, listening: int, two_servers: tuple[str, str]
) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for folder in (mine, theirs):
        folder.mkdir()
        (folder / "note.txt").write_text(f"note of {folder.name}")
    # Inside, the server sees only its paths: its own code goes there too.
    server = mine / "reader_mcp.py"
    shutil.copy(REPO / "tests" / "servers" / "reader_mcp.py", server)
    command = [sys.executable, str(server)]
    boxed = {"transport": "stdio", "command": command, "sandbox": True, "paths": [str(mine)]}
    config = {
        "servers": {
            "boxed": boxed,
            "networked": {**boxed, "network": True},
            "loose": {"transport": "stdio", "command": command},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    allowed, other = two_servers
    rules = Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_HTTP_ALLOW_HOSTS=allowed.removeprefix("http://"),
    )
    hub = McpHub(load_mcp_servers(path), {}, egress_settings=rules)
    try:
        read = {"path": str(mine / "note.txt")}
        assert (await hub.call("mcp.boxed.read", read, "k1"))["text"] == "note of mine"
        hidden = await hub.call("mcp.boxed.read", {"path": str(theirs / "note.txt")}, "k2")
        assert "No such file" in hidden["text"]
        blocked = await hub.call(
            "mcp.boxed.connect", {"host": "127.0.0.1", "port": listening}, "k3"
        )
        assert "Connection refused" in blocked["text"]
        # With network: the allowed destination through the worker's proxy, nothing else.
        fetched = await hub.call("mcp.networked.fetch", {"url": allowed}, "k6")
        assert fetched["text"] == "ok", fetched
        refused = await hub.call("mcp.networked.fetch", {"url": other}, "k7")
        assert "403" in refused["text"], refused
        port = int(allowed.rsplit(":", 1)[1])
        direct = await hub.call("mcp.networked.connect", {"host": "127.0.0.1", "port": port}, "k8")
        assert "Connection refused" in direct["text"], direct
        # The same server unconfined reads and connects where it is told.
        loose = await hub.call("mcp.loose.read", {"path": str(theirs / "note.txt")}, "k4")
        assert loose["text"] == "note of theirs"
        connected = await hub.call(
            "mcp.loose.connect", {"host": "127.0.0.1", "port": listening}, "k5"
        )
        assert connected["text"] == "connected"
    finally:
        await hub.aclose()


@pytest.fixture
def bounded(tmp_path: Path) -> Tools:
    """Tools under small bounds: 256 MB for a step's processes together, a 32 MB /tmp, a
    64 MB workspace, files up to 48 MB."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path / "data",
        LONGRUN_SANDBOX_MEMORY_MB=256,
        LONGRUN_SANDBOX_TMP_MB=32,
        LONGRUN_WORKSPACE_MB=64,
        LONGRUN_SANDBOX_FILE_MB=48,
    )
    return Tools(settings, "run-" + uuid.uuid4().hex)


FOUR_CHILDREN = """
import os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        held = b"\\x01" * (200 * 1024 * 1024)  # every page touched
        time.sleep(20)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("all four held 200 MB")
"""


async def test_a_steps_processes_together_stop_at_the_memory_bound(bounded: Tools) -> None:
    err = await bounded.fail("python", code=FOUR_CHILDREN, timeout_s=60)
    assert err.type == "SandboxBound" and err.non_retryable, err.message
    assert "memory bound of 256 MB (LONGRUN_SANDBOX_MEMORY_MB)" in err.message
    # One child alone fits: the bound is the step's, not a process's.
    one = FOUR_CHILDREN.replace("range(4)", "range(1)").replace("20)", "0)")
    assert (await bounded.run("python", code=one))["stdout"].strip() == "all four held 200 MB"


async def test_tmp_stops_at_its_size(bounded: Tools) -> None:
    script = "head -c 75M /dev/zero > /tmp/big; echo $?; stat -c %s /tmp/big; df -m /tmp"
    out = await bounded.run("shell", argv=sh(script), check=False)
    assert "No space left on device" in out["stderr"], out
    code, size, _, mount = out["stdout"].splitlines()
    assert code != "0" and int(size) <= 32 * 1024 * 1024, out
    assert mount.split()[:2] == ["tmpfs", "32"], out  # the whole of /tmp is 32 MB


async def test_the_workspace_stops_at_its_quota(bounded: Tools) -> None:
    workspace = bounded.settings.workspaces_dir / bounded.run_id / "workspace"
    # One file: the kernel stops it where the quota ends.
    out = await bounded.run("shell", argv=sh("head -c 75M /dev/zero > one"), check=False)
    assert out["exit_code"] != 0
    assert (workspace / "one").stat().st_size <= 48 * 1024 * 1024
    await bounded.run("shell", argv=sh("rm one"))
    # Many writers at once: the worker stops the step once the workspace passes the quota.
    many = "for i in 1 2 3 4 5; do head -c 15M /dev/zero > part$i & done; wait"
    err = await bounded.fail("shell", argv=sh(many + "; sleep 5"), timeout_s=30)
    assert err.type == "WorkspaceQuota" and err.non_retryable, err.message
    assert "quota of 64 MB (LONGRUN_WORKSPACE_MB)" in err.message
    # Full, the workspace takes no more bytes; files can still be removed to make room.
    err = await bounded.fail("write_file", path="more.txt", content="x" * 1024 * 1024)
    assert err.type == "WorkspaceQuota", err.message
    await bounded.run("shell", argv=sh("rm part*"))
    assert (await bounded.run("write_file", path="more.txt", content="room"))["bytes"] == 4


async def test_file_tools_are_never_raced_out_of_the_workspace(
    tools: Tools, cfg: Settings, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside-canary")
    # A step swaps the folder `d` for a link to the outside (the link's text is the
    # worker's path: harmless inside the sandbox, an escape for a tool that follows it).
    swap = (
        "end=$(($(date +%s) + 8)); while [ $(date +%s) -lt $end ]; do "
        "rm -rf d; mkdir d; echo inside > d/f; rm -rf d; "
        f"ln -s {outside} d; done; rm -rf d"
    )
    racing = asyncio.ensure_future(tools.run("shell", argv=sh(swap), timeout_s=30, check=False))
    seen: Counter[str] = Counter()
    while not racing.done():
        for name, args in (
            ("read_file", {"path": "d/f"}),
            ("write_file", {"path": "d/planted", "content": "x"}),
        ):
            try:
                out = await tools.run(name, **args)
                seen[out.get("content", "written").strip()] += 1
            except ApplicationError as err:
                seen[err.type] += 1
    await racing
    assert "outside-canary" not in seen, seen
    assert sorted(p.name for p in outside.iterdir()) == ["f"], seen
    assert seen["inside"] + seen["written"] > 0, seen  # the race was run, not avoided
