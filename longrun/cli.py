"""The `longrun` command: the local stack and its processes (`dev`, `worker`, `api`,
`standin`, `conformance`, `demo`, `hash-key`), the deploy's (`check-replay`, `deployment`),
a run's records (`cassette`), the task suite (`eval`), and the commands that talk to a
running API (longrun.commands)."""

from __future__ import annotations

import asyncio
import enum
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from longrun.client import DEFAULT_API_URL
from longrun.commands import COMMANDS, ApiKey, ApiUrl
from longrun.settings import BUILD_ID_PATTERN, get_settings

if TYPE_CHECKING:
    from longrun.versions import VersionState


class Baseline(enum.Enum):
    """What `longrun eval --baseline` runs beside longrun."""

    PLAIN = "plain"


class AgentStrategy(enum.Enum):
    """How `longrun eval --strategy` has every goal-only run work (a run's `strategy`)."""

    AUTO = "auto"
    PLAN = "plan"
    DIRECT = "direct"


app = typer.Typer(
    name="longrun",
    help="Durable runs for long AI agent jobs, on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@app.command()
def dev() -> None:
    """Run the whole local stack in the foreground: Temporal with its Web UI, the model
    stand-in, a worker and the API (what `make run` does).

    Example: longrun dev
    """
    from longrun.dev.stack import DevStackError, run_dev

    try:
        sys.exit(asyncio.run(run_dev(get_settings())))
    except DevStackError as exc:
        sys.stderr.write(f"longrun dev: {exc}\n")
        sys.exit(1)


@app.command("dev-worker")
def dev_worker(
    build_id: Annotated[str, typer.Argument(help="the version's build id, e.g. v2")],
    current: Annotated[
        bool, typer.Option(help="take new runs at once, not at `longrun deployment current`")
    ] = False,
) -> None:
    """Run a worker of another version beside the stack `longrun dev` runs, with the code of
    this checkout (from another checkout, point LONGRUN_DATA_DIR at the stack's data): a
    rolling deploy tried on one machine.

    Example: longrun dev-worker v2   (then: longrun deployment current v2)
    """
    from longrun.dev.stack import DevStackError, run_worker_beside

    if not re.fullmatch(BUILD_ID_PATTERN, build_id):
        raise typer.BadParameter("letters, digits and . _ + - only", param_hint="BUILD_ID")
    try:
        run_worker_beside(get_settings(), build_id, current)
    except DevStackError as exc:
        sys.stderr.write(f"longrun dev-worker: {exc}\n")
        sys.exit(1)


@app.command()
def worker() -> None:
    """Run a worker against TEMPORAL_ADDRESS.

    Example: TEMPORAL_ADDRESS=temporal:7233 longrun worker
    """
    import worker as worker_process

    worker_process.main()


def _exit_without_teardown(code: int) -> None:
    """Exit a command that used a Temporal client (see longrun.temporal)."""
    from longrun.temporal import exit_without_teardown

    exit_without_teardown(code)


@app.command("check-replay")
def check_replay(
    limit: Annotated[int, typer.Option(min=1, help="open runs, and ended ones, to look at")] = 200,
    per_set: Annotated[
        int, typer.Option(min=1, help="runs replayed per version and patch set")
    ] = 10,
    where: Annotated[
        str | None, typer.Option(help="a visibility query that narrows the runs")
    ] = None,
    changes: Annotated[
        bool,
        typer.Option(
            "--changes",
            help="instead, list each change (workflows/changes.py) with the open runs "
            "started without it; one with none can be retired",
        ),
    ] = False,
) -> None:
    """Replay the histories of open and recent runs in TEMPORAL_NAMESPACE against this
    code, a sample per worker version and patch set; exits 1 naming each run that does not
    replay and where it diverged (the step before a deploy).

    Example: longrun check-replay --limit 500
    """
    import worker as worker_process
    from longrun.temporal import connect

    if changes:

        async def holding() -> dict[str, int]:
            return await worker_process.held_back(await connect(get_settings()), limit, where)

        for name, runs in asyncio.run(holding()).items():
            typer.echo(
                f"{name:40} {runs:6} open runs started without it"
                if runs
                else f"{name:40}      0 open runs started without it: can be retired"
            )
        _exit_without_teardown(0)

    async def check() -> worker_process.ReplayCheck:
        client = await connect(get_settings())
        return await worker_process.check_replay(client, limit, where, per_set=per_set)

    found = asyncio.run(check())
    for failure in found.failures:
        typer.echo(f"does not replay: {failure}", err=True)
    typer.echo(
        f"{found.replayed} runs replayed, {len(found.failures)} do not replay"
        f" ({found.alike} more like them not replayed)"
    )
    _exit_without_teardown(1 if found.failures else 0)


@app.command()
def cassette(
    run_id: Annotated[str, typer.Argument(help="the run whose calls to export")],
    out: Annotated[Path | None, typer.Option(help="write here (default: standard output)")] = None,
    profile: Annotated[
        str, typer.Option(help="the stand-in profile of the server it was recorded on")
    ] = "openai",
) -> None:
    """Export a run's model calls (recorded by a worker with LONGRUN_RECORD_MODEL_CALLS)
    and tool calls as a cassette, which the stand-in plays back (`longrun standin
    --cassette FILE`): a real model's answers in tests, without the server.

    Example: longrun cassette run-1f2e... --profile llama-cpp --out tests/cassettes/primes.json
    """
    from longrun.dev.standin import PROFILES
    from longrun.recording import cassette as export
    from longrun.temporal import connect

    if profile not in PROFILES:
        raise typer.BadParameter(f"one of {', '.join(PROFILES)}", param_hint="--profile")

    async def collect() -> str:
        settings = get_settings()
        found = await export(await connect(settings), settings, run_id, profile)
        if not found.entries:
            raise LookupError(
                f"run {run_id} has no recorded model calls: its worker records them with "
                "LONGRUN_RECORD_MODEL_CALLS=true"
            )
        return found.model_dump_json(indent=1)

    try:
        text = asyncio.run(collect())
    except LookupError as exc:
        typer.echo(f"longrun cassette: {exc}", err=True)
        _exit_without_teardown(1)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}")
    _exit_without_teardown(0)


deployment = typer.Typer(
    help="The workers' versions (a Temporal Worker Deployment): see them, choose the current."
    "\n\nExample: longrun deployment status",
    no_args_is_help=True,
)
app.add_typer(deployment, name="deployment")


@deployment.command("status")
def deployment_status() -> None:
    """Each version of LONGRUN_DEPLOYMENT, newest first: Temporal's status, its workers
    and the runs on it (a version with none may stop).

    Example: longrun deployment status
    """
    from longrun.temporal import connect
    from longrun.versions import versions

    async def look() -> list[VersionState]:
        settings = get_settings()
        return await versions(await connect(settings), settings)

    found = asyncio.run(look())
    if not found:
        typer.echo(f"no versions of deployment {get_settings().deployment!r} yet")
    else:
        typer.echo(f"{'VERSION':<28} {'STATUS':<9} {'WORKERS':>7} {'OPEN RUNS':>9}")
    for v in found:
        note = "  stranded: no worker serves its runs" if v.stranded else ""
        if not v.open_runs and v.status != "current":
            note = "  drained: its workers may stop"
        typer.echo(f"{v.build_id:<28} {v.status:<9} {v.workers:>7} {v.open_runs:>9}{note}")
    _exit_without_teardown(0)


@deployment.command("current")
def deployment_current(
    build_id: Annotated[str, typer.Argument(help="the version's build id")],
) -> None:
    """Start new runs on version BUILD_ID (a deploy, or taking a bad version back): runs on
    other versions stay on them until their next hand-over. Its workers must be polling.

    Example: longrun deployment current 0.1.0-3f2a9c1b7e44
    """
    from longrun.temporal import connect
    from longrun.versions import VersionRefused, make_current, routed

    async def choose() -> bool:
        settings = get_settings()
        client = await connect(settings)
        await make_current(client, settings, build_id)
        return await routed(client, settings)

    try:
        told = asyncio.run(choose())
    except VersionRefused as exc:
        typer.echo(f"longrun deployment current: Temporal refused {build_id}: {exc}", err=True)
        _exit_without_teardown(1)
    if told:
        typer.echo(f"new runs start on version {build_id}")
    else:
        typer.echo(
            f"version {build_id} is current; Temporal is still telling its task queues, so "
            "a new run may start on the version before for a while"
        )
    _exit_without_teardown(0)


@app.command()
def api() -> None:
    """Serve the REST API on LONGRUN_API_HOST:LONGRUN_API_PORT.

    Example: LONGRUN_API_PORT=8000 longrun api
    """
    import uvicorn

    settings = get_settings()
    uvicorn.run("api.app:app", host=settings.api_host, port=settings.api_port)


@app.command()
def standin(
    port: Annotated[int | None, typer.Option(help="default: LONGRUN_DEV_STANDIN_PORT")] = None,
    scenario: Annotated[
        list[Path] | None, typer.Option(help="a JSON file of rules; repeat for several")
    ] = None,
    cassette: Annotated[
        Path | None, typer.Option(help="answer from a run's calls (`longrun cassette`)")
    ] = None,
) -> None:
    """Serve the offline model stand-in (an OpenAI-compatible server that plays scripts,
    or a recorded run's calls).

    Example: longrun standin --port 8100 --scenario rules.json
    """
    from longrun.dev import standin as standin_server

    chosen = port or get_settings().dev_standin_port
    scenarios = [item for path in scenario or [] for item in ("--scenario", str(path))]
    played = ["--cassette", str(cassette)] if cassette is not None else []
    standin_server.main(["--port", str(chosen), *scenarios, *played])


@app.command("hash-key")
def hash_key() -> None:
    """Print the SHA-256 digest of an API key read from standard input, for
    LONGRUN_API_KEYS.

    Example: echo "$KEY" | longrun hash-key
    """
    from longrun.settings import hash_key as digest

    key = sys.stdin.readline().strip()
    if not key:
        sys.stderr.write("longrun hash-key: give the key on standard input\n")
        sys.exit(1)
    sys.stdout.write(digest(key) + "\n")


@app.command()
def conformance(
    runs: Annotated[
        bool, typer.Option("--runs", help="also run the guide's plan and the demo goal")
    ] = False,
) -> None:
    """Check what the model server in settings can do, as a table.

    Example: OPENAI_BASE_URL=http://127.0.0.1:8180/v1 LONGRUN_MODEL=smollm2-135m longrun conformance
    """
    from longrun.dev import conformance as check

    sys.exit(check.main(get_settings(), runs=runs))


@app.command()
def demo(
    approve: Annotated[bool, typer.Option("--approve", help="approve without asking")] = False,
    wait: Annotated[
        float, typer.Option("--wait", min=1, help="follow the run this many seconds at most")
    ] = 300,
) -> None:
    """Run the demo goal against the API that `make run` started; without a terminal it
    says how to approve and waits up to --wait seconds for someone to (exit 4 if no one).

    Example: longrun demo --approve
    """
    from longrun.dev.demo import run_demo

    settings = get_settings()
    api_url = f"http://{settings.api_host}:{settings.api_port}"
    sys.exit(run_demo(api_url, approve=approve, timeout_s=wait))


@app.command("eval")
def eval_suite(
    folder: Annotated[Path, typer.Argument(help="the suite: a folder of task files")],
    k: Annotated[int, typer.Option("--k", min=1, max=50, help="attempts per task")] = 4,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="kill workers, restart Temporal, cut the model")
    ] = False,
    only: Annotated[
        list[str] | None, typer.Option("--task", help="only this task; repeat for several")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="attempts at once")] = 4,
    timeout: Annotated[
        float, typer.Option(min=10, help="cancel an attempt that has not ended in this many s")
    ] = 900,
    model_url: Annotated[
        str | None,
        typer.Option(help="an OpenAI-compatible server (default: the stand-in, scripted)"),
    ] = None,
    model: Annotated[str | None, typer.Option(help="the model to ask on --model-url")] = None,
    seed: Annotated[int, typer.Option(help="of the faults' moments and kinds")] = 0,
    max_duration: Annotated[
        float | None,
        typer.Option(min=10, help="a time budget for every run: it fails once used up"),
    ] = None,
    baseline: Annotated[
        Baseline | None,
        typer.Option(
            help="also run each attempt with this baseline, scored alike: plain, "
            "a plain tool loop without durability, plan or verification"
        ),
    ] = None,
    strategy: Annotated[
        AgentStrategy | None,
        typer.Option(
            help="every goal-only run's strategy (auto, plan, direct); default: the "
            "server's, LONGRUN_AGENT_STRATEGY"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="where the JSON and the plot go")] = Path(
        "eval-results"
    ),
) -> None:
    """Run the task suite, k attempts per task, on a local stack of its own, and score it:
    pass^1, pass^k, cost per success, time p50/p95, recovery time after faults, and side
    effects applied twice (counted at the fixture server). Writes OUT/<name>.json and a
    plot; exits 0 (the scores are the answer, not the exit code).

    Example: longrun eval evals/ --k 2 --chaos --model-url http://127.0.0.1:8180/v1
    --model smollm2-135m
    """
    from longrun.evals import report
    from longrun.evals.runner import Options, run_suite, scores
    from longrun.evals.tasks import load_tasks

    if (model_url is None) != (model is None):
        raise typer.BadParameter("give --model-url and --model together", param_hint="--model")
    tasks = load_tasks(folder)
    if only:
        unknown = sorted(set(only) - {t.name for t in tasks})
        if unknown:
            raise typer.BadParameter(f"no task {', '.join(unknown)}", param_hint="--task")
        tasks = [t for t in tasks if t.name in only]
    options = Options(
        k=k,
        chaos=chaos,
        concurrency=concurrency,
        timeout_s=timeout,
        model_url=model_url,
        model=model,
        seed=seed,
        max_duration_s=max_duration,
        baseline=baseline.value if baseline else None,
        strategy=strategy.value if strategy else None,
    )
    try:
        outcome = run_suite(tasks, options, typer.echo)
    except asyncio.CancelledError:  # SIGTERM: the stack is stopped, nothing is scored
        typer.echo("longrun eval: stopped", err=True)
        raise typer.Exit(143) from None
    found = scores(outcome)
    name = f"{model or 'standin'}-k{k}{'-chaos' if chaos else ''}"
    if strategy is not None:
        name += f"-{strategy.value}"
    rows = [(name, found)]
    against = None
    if baseline is not None:
        against = scores(outcome, baseline=True)
        rows = [(f"longrun, {name}", found), (f"{baseline.value} loop, {name}", against)]
        name += f"-vs-{baseline.value}"
    report.write_json(outcome, found, out / f"{name}.json", against)
    plotted = report.plot(outcome, found, out / f"{name}.png")
    typer.echo(report.table(rows))
    typer.echo(f"wrote {out / name}.json" + (" and .png" if plotted else ""))


@app.command()
def mcp(api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None) -> None:
    """Serve longrun's MCP tools over stdio (submit a run, follow it, decide approvals), each
    a call of the API with your key; an MCP client starts it as {"command": "longrun",
    "args": ["mcp"]}.

    Example: LONGRUN_API_KEY=... longrun mcp --api-url http://127.0.0.1:8000
    """
    from longrun.mcp_server import serve_stdio

    serve_stdio(api_url, api_key)


for name, command in COMMANDS.items():
    app.command(name)(command)


def main() -> None:
    """Run the `longrun` command."""
    app()


if __name__ == "__main__":
    main()
