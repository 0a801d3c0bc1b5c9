"""The local stack as separate processes in one directory, each in its own session with
its output in a log: a Temporal dev server on a SQLite file (so it can be stopped and
started again on the same database and ports), the model stand-in, workers and the API,
on free ports. Chaos runs (bench/chaos.py) and `longrun eval --chaos` kill and restart
them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from longrun.dev.stack import TemporalDevServer, free_port, port_in_use
from longrun.dev.standin import STANDIN_MODEL
from longrun.settings import TEMPORAL_HTTP_API_OFFSET

READY_S = 90.0
_ROOT = str(Path(__file__).resolve().parents[2])  # the checkout: workers import from it


class Proc:
    """One process of the stack, started in its own session with its output in a log."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.log = cwd / "logs" / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process (returns at once)."""
        with self.log.open("ab") as sink:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        """The process id (0 before it started)."""
        return self.popen.pid if self.popen is not None else 0

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.popen is not None and self.popen.poll() is None

    def stop_with(self, sig: int) -> None:
        """Send a signal to the process and reap it (SIGKILL after 20 s)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def log_text(self) -> str:
        """What the process has logged so far."""
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Stack:
    """Temporal, the stand-in, the workers and the API, each its own process."""

    def __init__(
        self,
        tmp: Path,
        workers: int,
        *,
        model_url: str | None = None,
        model: str = STANDIN_MODEL,
        task_queue: str = "chaos",
        standin_port: int | None = None,
        allow: tuple[str, ...] = (),
    ) -> None:
        """`allow`: the host:port destinations its runs may reach (the servers a suite
        stands up for them)."""
        self.tmp = tmp
        (tmp / "logs").mkdir(parents=True, exist_ok=True)
        self.temporal_port = _port_with_http_api()
        self.api_port = free_port()
        self.standin_port = standin_port or free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.standin_url = f"http://127.0.0.1:{self.standin_port}"
        # Where workers ask the model: the stand-in, unless another server is given.
        self.model_url = model_url or f"{self.standin_url}/v1"
        self.temporal = TemporalDevServer(
            tmp / "temporal.db",
            port=self.temporal_port,
            http_port=self.temporal_port + TEMPORAL_HTTP_API_OFFSET,
            log_file=tmp / "logs" / "temporal.log",
        )
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "PYTHONPATH": _ROOT,
            "TEMPORAL_ADDRESS": self.temporal.address,
            "TEMPORAL_NAMESPACE": "default",
            "LONGRUN_TASK_QUEUE": task_queue,
            "OPENAI_BASE_URL": self.model_url,
            "OPENAI_API_KEY": "standin",
            "LONGRUN_MODEL": model,
            "LONGRUN_DATA_DIR": str(tmp / "data"),
            "LONGRUN_API_HOST": "127.0.0.1",
            "LONGRUN_API_PORT": str(self.api_port),
            "LONGRUN_WORKER_SHUTDOWN_S": "5",
            "LONGRUN_HTTP_ALLOW_HOSTS": ",".join(allow),
        }
        self.standin = Proc(
            "standin",
            [sys.executable, "-m", "longrun.dev.standin", "--port", str(self.standin_port)],
            self.env,
            tmp,
        )
        self.api = Proc(
            "api",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "api.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.api_port),
                "--log-level",
                "warning",
            ],
            self.env,
            tmp,
        )
        self.worker_count = workers
        self.workers: list[Proc] = []
        self._worker_serial = 0
        self.every: list[Proc] = [self.standin, self.api]

    async def start(self) -> None:
        """Start everything and wait until each answers."""
        await self.start_temporal()
        self.standin.start()
        await _wait_http(f"{self.standin_url}/v1/models", self.standin)
        await asyncio.gather(*(self.start_worker() for _ in range(self.worker_count)))
        await self.start_api()

    async def start_temporal(self) -> None:
        """Start Temporal on its database and wait until it answers."""
        self.temporal.start()
        await self.temporal.wait_ready(READY_S)

    async def start_api(self) -> None:
        """Start the API and wait until it answers."""
        self.api.start()
        await _wait_http(f"{self.api_url}/healthz", self.api)

    async def start_worker(self) -> Proc:
        """Start one more worker and wait until it polls."""
        self._worker_serial += 1
        proc = Proc(
            f"worker-{self._worker_serial}", [sys.executable, "-m", "worker"], self.env, self.tmp
        )
        self.workers.append(proc)
        self.every.append(proc)
        proc.start()
        deadline = time.monotonic() + READY_S
        while "worker polling" not in await asyncio.to_thread(proc.log_text):
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited: {proc.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name} did not poll within {READY_S:g} s")
            await asyncio.sleep(0.2)
        return proc

    def live_workers(self) -> list[Proc]:
        """The workers that run now."""
        return [w for w in self.workers if w.alive()]

    def stop(self) -> None:
        """Kill every process this stack started, newest first, and Temporal last."""
        for proc in reversed(self.every):
            if proc.alive():
                proc.stop_with(signal.SIGKILL)
        self.temporal.stop()


def _port_with_http_api() -> int:
    """A free port whose neighbour + TEMPORAL_HTTP_API_OFFSET is free too."""
    for _ in range(50):
        port = free_port()
        http = port + TEMPORAL_HTTP_API_OFFSET
        if http < 65536 and not port_in_use(http):
            return port
    raise RuntimeError("no free port pair for Temporal")


async def _wait_http(url: str, proc: Proc) -> None:
    deadline = time.monotonic() + READY_S
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited: {proc.log_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code < 500:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name} did not answer at {url}")
            await asyncio.sleep(0.2)
