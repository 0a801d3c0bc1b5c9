"""Local tooling, not part of a deployed worker or API: the local stack behind `make run` /
`longrun dev` and the Temporal dev server helpers tests and benchmarks use (`stack`), the
offline OpenAI-compatible model stand-in (`standin`), and `longrun demo` with its stand-in
scenario (`demo`, `scenarios/demo.json`).

Workflows, activities and the API never import this package; `longrun.cli` imports its modules
only inside the `dev`, `standin` and `demo` commands.
"""
