"""The `longrun` command: `dev`, `worker`, `api`, `standin`, `conformance` and `demo`."""

from __future__ import annotations

import argparse
import asyncio
import sys

from longrun.settings import get_settings


def main(argv: list[str] | None = None) -> None:
    """Dispatch a `longrun` subcommand."""
    parser = argparse.ArgumentParser(prog="longrun", description="Durable runs for AI agent jobs.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dev", help="run the whole local stack in the foreground (make run)")
    sub.add_parser("worker", help="run a worker against TEMPORAL_ADDRESS")
    sub.add_parser("api", help="serve the REST API on LONGRUN_API_HOST:LONGRUN_API_PORT")
    standin = sub.add_parser("standin", help="serve the offline model stand-in")
    standin.add_argument("--port", type=int, default=None)
    standin.add_argument("--scenario", action="append", default=[], help="a JSON file of rules")
    sub.add_parser("hash-key", help="print the SHA-256 digest of an API key read from stdin")
    conformance = sub.add_parser(
        "conformance", help="check what the model server in settings can do (a table)"
    )
    conformance.add_argument(
        "--runs", action="store_true", help="also run the README plan and the demo goal via the API"
    )
    demo = sub.add_parser("demo", help="run the demo goal against the running API")
    demo.add_argument("--approve", action="store_true", help="approve without asking")
    args = parser.parse_args(argv)

    if args.command == "dev":
        from longrun.dev.stack import DevStackError, run_dev

        try:
            sys.exit(asyncio.run(run_dev(get_settings())))
        except DevStackError as exc:
            sys.stderr.write(f"longrun dev: {exc}\n")
            sys.exit(1)
    elif args.command == "worker":
        import worker

        worker.main()
    elif args.command == "api":
        import uvicorn

        settings = get_settings()
        uvicorn.run("api.app:app", host=settings.api_host, port=settings.api_port)
    elif args.command == "standin":
        from longrun.dev import standin as standin_server

        port = args.port or get_settings().dev_standin_port
        scenarios = [item for path in args.scenario for item in ("--scenario", path)]
        standin_server.main(["--port", str(port), *scenarios])
    elif args.command == "hash-key":
        from longrun.settings import hash_key

        key = sys.stdin.readline().strip()
        if not key:
            sys.stderr.write("longrun hash-key: give the key on standard input\n")
            sys.exit(1)
        sys.stdout.write(hash_key(key) + "\n")
    elif args.command == "conformance":
        from longrun.dev import conformance as check

        sys.exit(check.main(get_settings(), runs=args.runs))
    elif args.command == "demo":
        from longrun.dev.demo import run_demo

        settings = get_settings()
        sys.exit(run_demo(f"http://{settings.api_host}:{settings.api_port}", approve=args.approve))


if __name__ == "__main__":
    main()
