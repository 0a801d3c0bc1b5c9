"""`longrun dev` (what `make run` starts): the whole stack up, a run through it, one Ctrl-C
to stop all, and a clear refusal to start twice."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from longrun.dev.stack import STATE_DIR, DevStackError, _acquire_lock, free_port, run_dev
from longrun.settings import Settings


def test_second_lock_holder_is_told_who_runs(tmp_path: Path) -> None:
    lock = _acquire_lock(tmp_path / "dev.lock")
    try:
        with pytest.raises(DevStackError, match=rf"already running here \(pid {os.getpid()}\)"):
            _acquire_lock(tmp_path / "dev.lock")
    finally:
        lock.close()
    _acquire_lock(tmp_path / "dev.lock").close()  # free again once the holder is gone


async def test_a_taken_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        settings = Settings(_env_file=None, LONGRUN_API_PORT=port)  # type: ignore[call-arg]
        with pytest.raises(DevStackError, match=rf"port {port} for the API"):
            await run_dev(settings)
    assert not (tmp_path / STATE_DIR / "temporal.db").exists()


def test_dev_stack_runs_a_plan_and_stops_on_one_interrupt(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("TEMPORAL", "UI", "STANDIN", "API")}
    env = {
        "PATH": os.environ["PATH"],
        "LONGRUN_DEV_TEMPORAL_PORT": str(ports["TEMPORAL"]),
        "LONGRUN_DEV_UI_PORT": str(ports["UI"]),
        "LONGRUN_DEV_STANDIN_PORT": str(ports["STANDIN"]),
        "LONGRUN_API_PORT": str(ports["API"]),
    }
    out = (tmp_path / "dev.out").open("w+")
    stack = subprocess.Popen(
        [sys.executable, "-m", "longrun.cli", "dev"],
        cwd=tmp_path,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{ports['API']}"
    try:
        for _ in range(600):
            if "Press Ctrl-C" in (tmp_path / "dev.out").read_text() or stack.poll() is not None:
                break
            time.sleep(0.1)
        banner = (tmp_path / "dev.out").read_text()
        assert "OFFLINE STAND-IN" in banner, banner
        assert "longrun demo" in banner
        assert f"http://127.0.0.1:{ports['UI']}" in banner

        second = subprocess.run(
            [sys.executable, "-m", "longrun.cli", "dev"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "already running" in second.stderr

        assert httpx.get(f"{api}/readyz").json()["status"] == "ready"
        created = httpx.post(
            f"{api}/v1/runs",
            json={"goal": "g", "plan": {"steps": [{"id": "m", "model": {"prompt": "hi dev"}}]}},
        ).json()
        run = _ended(api, created["run_id"])
        assert run["status"] == "completed", run
        assert "stand-in" in run["steps"][0]["output"]["text"]
        assert (tmp_path / STATE_DIR / "temporal.db").exists()

        # A worker or API that dies is started again; Temporal and the rest stay up.
        for name, marker in (("worker", b"worker"), ("api", b"uvicorn")):
            os.kill(_child_of(stack.pid, marker), signal.SIGKILL)
            for _ in range(300):
                if f"{name} started again" in (tmp_path / "dev.out").read_text():
                    break
                time.sleep(0.1)
            assert (
                f"{name} exited with -9; starting it again in 1 s"
                in (tmp_path / "dev.out").read_text()
            )
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{api}/readyz").status_code == 200:
                    break
            time.sleep(0.1)
        run = _echo_run(api)
        assert run["status"] == "completed", run
        assert run["version"] == "dev"
        assert "worker:      version dev of deployment longrun" in banner

        # A second version beside the stack's, made current: new runs start on it; set back,
        # they start on the stack's own again (the demo below).
        beside_out = (tmp_path / "beside.out").open("w+")
        beside = subprocess.Popen(
            [sys.executable, "-m", "longrun.cli", "dev-worker", "v2", "--current"],
            cwd=tmp_path,
            env=env,
            stdout=beside_out,
            stderr=subprocess.STDOUT,
        )
        try:
            for _ in range(600):
                if "version v2 made current" in (tmp_path / "beside.out").read_text():
                    break
                assert beside.poll() is None, (tmp_path / "beside.out").read_text()
                time.sleep(0.1)
            # A worker that makes its version current at its start does not wait for the
            # routing to reach the task queue (only `longrun deployment current` does): a
            # busy machine may start a run or two on the old version first.
            for _ in range(30):
                run = _echo_run(api)
                if run["version"] == "v2":
                    break
                time.sleep(1)
            assert run["status"] == "completed" and run["version"] == "v2", run
            versions = {v["build_id"]: v for v in httpx.get(f"{api}/readyz").json()["versions"]}
            assert versions["v2"]["status"] == "current" and versions["v2"]["workers"] >= 1
            assert versions["dev"]["status"] != "current"
        finally:
            beside.terminate()
            beside.wait(60)
            beside_out.close()
        back = subprocess.run(
            [sys.executable, "-m", "longrun.cli", "deployment", "current", "dev"],
            env={**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{ports['TEMPORAL']}"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert back.returncode == 0, back.stdout + back.stderr

        # The demo goal, played by the stand-in, with no terminal: it says how to approve
        # and waits; the command it names approves, and the demo follows it to the end.
        with subprocess.Popen(
            [sys.executable, "-m", "longrun.cli", "demo", "--wait", "200"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as demo:
            assert demo.stdout is not None
            shown = []
            for line in demo.stdout:
                shown.append(line)
                if "longrun approve" in line:
                    break
            assert "waiting up to" in "".join(shown), shown
            command = shown[-1].split()  # .venv/bin/longrun approve RUN APPROVAL [--api-url]
            assert command[1:2] == ["approve"], shown
            approved = subprocess.run(
                [sys.executable, "-m", "longrun.cli", *command[1:]],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert approved.returncode == 0, approved.stdout + approved.stderr
            rest = demo.stdout.read()
            assert demo.wait(200) == 0, "".join(shown) + rest
        assert "status: completed" in rest and "prints: passed" in rest
    finally:
        stack.send_signal(signal.SIGINT)
        code = stack.wait(60)
        out.close()
    assert code == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{api}/healthz")
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", ports["TEMPORAL"])) != 0


def _child_of(parent: int, marker: bytes) -> int:
    """The pid of `parent`'s child process whose command line contains `marker`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and marker in cmdline:
            return int(entry.name)
    raise AssertionError(f"no child of {parent} runs {marker!r}")


def _echo_run(api: str) -> dict[str, Any]:
    """A one-step plan run through the stack, once it has completed."""
    created = httpx.post(
        f"{api}/v1/runs",
        json={"goal": "g", "plan": {"steps": [{"id": "e", "tool": "echo"}]}},
    ).json()
    return _ended(api, created["run_id"])


def _ended(api: str, run_id: str) -> dict[str, Any]:
    """The run once it has completed (or as it is after 30 s)."""
    run: dict[str, Any] = {}
    for _ in range(300):
        run = httpx.get(f"{api}/v1/runs/{run_id}").json()
        if run["status"] == "completed":
            break
        time.sleep(0.1)
    return run
