"""Attacks on a real `longrun dev` stack (what `make run` starts), as a tenant's run would
make them: eight keys in two tenants, four-eyes on, and a policy that gives `python` and
`shell` network (the documented way to let pip, git or curl work). Each attack is a run
submitted over REST; what it reached is read from its steps' outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from longrun.dev.listening import listening, owner_of
from longrun.dev.stack import free_port
from longrun.settings import hash_key

pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="bubblewrap: make test"),
]

TENANTS = {
    "acme": ["acme-submit", "acme-approve", "acme-approve-2", "acme-admin"],
    "beta": ["beta-submit", "beta-approve", "beta-approve-2", "beta-admin"],
}
ROLES = {"submit": ["submitter", "viewer"], "approve": ["approver", "viewer"], "admin": ["admin"]}
MARKER = "beta-private-marker-5c1e"


@dataclass
class Stack:
    """The running stack: its API, its Temporal's pid and gRPC port, the data folder."""

    api: str
    temporal_port: int
    temporal_pid: int
    outside: Path

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def submit(self, key: str, steps: list[dict[str, Any]], goal: str = "attack") -> str:
        response = httpx.post(
            f"{self.api}/v1/runs",
            json={"goal": goal, "plan": {"steps": steps}},
            headers=self.headers(key),
            timeout=30,
        )
        assert response.status_code == 202, response.text
        return str(response.json()["run_id"])

    def run(self, key: str, run_id: str) -> httpx.Response:
        return httpx.get(f"{self.api}/v1/runs/{run_id}", headers=self.headers(key), timeout=30)

    def ended(self, key: str, run_id: str, timeout_s: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            run = self.run(key, run_id).json()
            if run.get("status") in ("completed", "failed", "cancelled"):
                return run
            time.sleep(0.5)
        raise AssertionError(f"run {run_id} did not end: {run}")

    def step(self, key: str, run_id: str, step_id: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.api}/v1/runs/{run_id}/steps/{step_id}", headers=self.headers(key), timeout=30
        )
        assert response.status_code == 200, response.text
        return dict(response.json())


def _keys() -> list[dict[str, Any]]:
    return [
        {
            "name": key,
            "sha256": hash_key(key),
            "roles": ROLES[key.split("-")[1]],
            "tenant": tenant,
        }
        for tenant, keys in TENANTS.items()
        for key in keys
    ]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("stack")
    policy = home / "policy.toml"
    policy.write_text("[tools.python]\nnetwork = true\n\n[tools.shell]\nnetwork = true\n")
    outside = home / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside-canary")
    # Ports chosen now may be taken by the time the stack binds them (Temporal's dev server
    # opens several of its own choosing): then the stack says so, and starts on others.
    for _ in range(3):
        ports = {name: free_port() for name in ("TEMPORAL", "UI", "STANDIN", "API", "METRICS")}
        process, log = _start_stack(home, ports, policy)
        said = (home / "dev.out").read_text()
        if "is taken by another program" not in said:
            break
        process.kill()
        process.wait(60)
        log.close()
    try:
        assert "Press Ctrl-C" in said, said
        pid = owner_of(ports["TEMPORAL"])
        assert pid is not None
        yield Stack(f"http://127.0.0.1:{ports['API']}", ports["TEMPORAL"], pid, outside)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _start_stack(
    home: Path, ports: dict[str, int], policy: Path
) -> tuple[subprocess.Popen[bytes], IO[str]]:
    """`longrun dev` on these ports, once it says it is up (or has stopped)."""
    env = {
        "PATH": os.environ["PATH"],
        "LONGRUN_DEV_TEMPORAL_PORT": str(ports["TEMPORAL"]),
        "LONGRUN_DEV_UI_PORT": str(ports["UI"]),
        "LONGRUN_DEV_STANDIN_PORT": str(ports["STANDIN"]),
        "LONGRUN_API_PORT": str(ports["API"]),
        "LONGRUN_DEV_WORKER_METRICS_PORT": str(ports["METRICS"]),
        "LONGRUN_API_KEYS": json.dumps(_keys()),
        "LONGRUN_FOUR_EYES": "true",
        "LONGRUN_POLICY_FILE": str(policy),
        "LONGRUN_SANDBOX_MEMORY_MB": "256",
        "LONGRUN_SANDBOX_TMP_MB": "32",
        "LONGRUN_WORKSPACE_MB": "64",
        "LONGRUN_SANDBOX_FILE_MB": "48",
    }
    log = (home / "dev.out").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "longrun.cli", "dev"],
        cwd=home,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(900):
        if "Press Ctrl-C" in (home / "dev.out").read_text() or process.poll() is not None:
            break
        time.sleep(0.1)
    return process, log


def _temporal_ports(stack: Stack) -> list[int]:
    """Every port the stack's Temporal server listens on, read from the process."""
    ports = sorted({port for _, port in listening(stack.temporal_pid)})
    # Frontend gRPC and HTTP, history, matching, worker service, membership, metrics, UI:
    # the dev server opens several on ports of its choosing.
    assert stack.temporal_port in ports and len(ports) >= 4, ports
    return ports


THROUGH_PROXY = """
import os, socket, sys, urllib.request
proxy = os.environ["HTTPS_PROXY"]
for port in map(int, sys.argv[1:]):
    # CONNECT, as gRPC and TLS clients use a proxy
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n".encode())
    print(port, "connect", s.recv(200).split(b"\\r\\n")[0].decode())
    s.close()
    # a plain HTTP request, as for metrics
    try:
        body = urllib.request.urlopen(f"http://localhost:{port}/metrics", timeout=10).read()
        print(port, "http", "200", len(body))
    except Exception as exc:
        print(port, "http", getattr(exc, "code", type(exc).__name__))
"""


def test_temporals_ports_are_refused_through_the_proxy_and_http_request(stack: Stack) -> None:
    ports = _temporal_ports(stack)
    steps: list[dict[str, Any]] = [
        {
            "id": "proxy",
            "tool": "python",
            "args": {
                "code": f"import sys; sys.argv[1:] = {[str(p) for p in ports]!r}\n" + THROUGH_PROXY,
                "timeout_s": 60,
            },
            "requires_approval": False,
        }
    ]
    steps += [
        {
            "id": f"http-{port}",
            "tool": "http_request",
            "args": {"url": f"http://127.0.0.1:{port}/metrics"},
        }
        for port in ports
    ]
    run_id = stack.submit("acme-submit", steps)
    run = stack.ended("acme-submit", run_id)
    output = stack.step("acme-submit", run_id, "proxy")["output"]
    lines = output["stdout"].splitlines()
    assert len(lines) == 2 * len(ports), output
    for line in lines:  # "PORT connect HTTP/1.1 403 Forbidden", "PORT http 403"
        assert line.split()[2:4] in (["HTTP/1.1", "403"], ["403"]), line
    errors = {s["id"]: s["error"] for s in run["steps"] if s["id"].startswith("http-")}
    for port in ports:
        error = errors[f"http-{port}"]
        reasons = ("is not an allowed destination", "which runs never reach", "loopback")
        assert error and any(reason in error for reason in reasons), error


GRPC_AT_TEMPORAL = """
import socket, sys
# What a stolen gRPC client would send first: the HTTP/2 preface, through the proxy.
results = []
for port in map(int, sys.argv[1:]):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n".encode())
    answer = s.recv(200)
    if b" 200 " in answer.split(b"\\r\\n")[0]:
        s.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n")
        results.append(f"{port} OPEN")
    else:
        results.append(f"{port} refused")
print(" ".join(results))
"""


def test_another_tenants_run_is_neither_read_nor_ended(stack: Stack) -> None:
    theirs = stack.submit(
        "beta-submit",
        [{"id": "gate", "approval": {"message": "wait"}}, {"id": "after", "tool": "echo"}],
        goal=f"beta's work {MARKER}",
    )
    deadline = time.monotonic() + 60
    while stack.run("beta-submit", theirs).json()["status"] != "waiting_approval":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    ports = [str(p) for p in _temporal_ports(stack)]
    code = f"import sys; sys.argv[1:] = {ports!r}\n" + GRPC_AT_TEMPORAL
    step = {
        "id": "grpc",
        "tool": "python",
        "args": {"code": code, "timeout_s": 60},
        "requires_approval": False,
    }
    mine = stack.submit("acme-submit", [step])
    stack.ended("acme-submit", mine)
    out = stack.step("acme-submit", mine, "grpc")["output"]["stdout"]
    assert "OPEN" not in out and out.count("refused") == len(ports), out
    # Nor through the API: another tenant's run is not there for acme's keys.
    for key in ("acme-submit", "acme-admin"):
        assert stack.run(key, theirs).status_code == 404
        cancel = httpx.post(
            f"{stack.api}/v1/runs/{theirs}/cancel", headers=stack.headers(key), timeout=30
        )
        assert cancel.status_code == 404, cancel.text
    # beta's run waits as it did, its goal unread by acme.
    run = stack.run("beta-submit", theirs).json()
    assert run["status"] == "waiting_approval" and MARKER in run["goal"]
    assert MARKER not in json.dumps(stack.step("acme-submit", mine, "grpc"))


FOUR_CHILDREN = """
import os, time
for _ in range(4):
    if os.fork() == 0:
        held = b"\\x01" * (200 * 1024 * 1024)
        time.sleep(30)
        os._exit(0)
os.wait(); os.wait(); os.wait(); os.wait()
print("held 800 MB")
"""


def test_bounds_hold_for_a_steps_processes_its_tmp_and_the_runs_workspace(
    stack: Stack,
) -> None:
    steps = [
        {
            "id": "memory",
            "tool": "python",
            "args": {"code": FOUR_CHILDREN, "timeout_s": 60},
            "requires_approval": False,
        },
        {
            "id": "tmp",
            "tool": "shell",
            "args": {"argv": ["sh", "-c", "head -c 75M /dev/zero > /tmp/big"], "check": False},
            "requires_approval": False,
        },
        {
            "id": "workspace",
            "tool": "shell",
            "args": {
                "argv": [
                    "sh",
                    "-c",
                    "for i in 1 2 3 4 5; do head -c 15M /dev/zero > p$i & done; wait; sleep 3",
                ],
                "timeout_s": 60,
            },
            "requires_approval": False,
        },
    ]
    # One run each: a failed step ends its run.
    runs = {step["id"]: stack.submit("acme-submit", [step]) for step in steps}
    ended = {name: stack.ended("acme-submit", run_id) for name, run_id in runs.items()}
    memory = ended["memory"]["steps"][0]
    assert memory["status"] == "failed", memory
    assert "memory bound of 256 MB (LONGRUN_SANDBOX_MEMORY_MB)" in memory["error"], memory
    tmp = stack.step("acme-submit", runs["tmp"], "tmp")["output"]
    assert tmp["exit_code"] != 0 and "No space left on device" in tmp["stderr"], tmp
    workspace = ended["workspace"]["steps"][0]
    assert workspace["status"] == "failed", workspace
    assert "quota of 64 MB (LONGRUN_WORKSPACE_MB)" in workspace["error"], workspace


def test_file_steps_racing_a_link_swap_never_read_outside(stack: Stack) -> None:
    swap = (
        "end=$(($(date +%s) + 6)); while [ $(date +%s) -lt $end ]; do "
        "rm -rf d; mkdir d; echo inside > d/f; rm -rf d; "
        f"ln -s {stack.outside} d; done"
    )
    steps: list[dict[str, Any]] = [
        {
            "id": "swap",
            "tool": "shell",
            "args": {"argv": ["sh", "-c", swap], "check": False, "timeout_s": 60},
            "requires_approval": False,
        }
    ]
    steps += [{"id": f"read{i}", "tool": "read_file", "args": {"path": "d/f"}} for i in range(40)]
    run_id = stack.submit("acme-submit", steps)
    run = stack.ended("acme-submit", run_id)
    assert "outside-canary" not in json.dumps(run)
    for i in range(40):
        step = next(s for s in run["steps"] if s["id"] == f"read{i}")
        if step["status"] == "completed":
            output = stack.step("acme-submit", run_id, f"read{i}")["output"]
            assert "outside-canary" not in output["content"]


def test_an_upper_case_content_type_gets_no_5xx_and_no_bypass(stack: Stack) -> None:
    nested: Any = "leaf"
    for _ in range(240):
        nested = {"a": nested}
    bodies = [
        '{"goal": "\\ud800", "plan": {"steps": [{"id": "a", "tool": "echo"}]}}',
        '{"goal": "g", "plan": {"steps": [{"id": "w", "wait": {"seconds": NaN}}]}}',
        json.dumps({"goal": "g", "plan": {"steps": [{"id": "a", "tool": "echo", "args": nested}]}}),
    ]
    for media in ("APPLICATION/JSON", "Application/Json; Charset=UTF-8", "text/plain"):
        for body in bodies:
            response = httpx.post(
                f"{stack.api}/v1/runs",
                content=body,
                headers={**stack.headers("acme-submit"), "Content-Type": media},
                timeout=30,
            )
            assert response.status_code == 422, (media, body[:80], response.text)
    listed = httpx.get(
        f"{stack.api}/v1/runs", headers=stack.headers("acme-submit"), timeout=30
    ).json()
    assert all(run["goal"] != "g" for run in listed["runs"]), listed
