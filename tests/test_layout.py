"""The house rules of the code's layout: imports run one way and nothing imports in a
circle, type-checking imports included; the API loads only what it uses; workflow modules,
which every run of a worker shares, hold no mutable state."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("longrun", "api", "workflows", "activities")
# What of activities/ the API still shares with the worker, until it moves into the kernel
# (docs/architecture.md); nothing may join the list.
API_SHARES = {"activities.mcp", "activities.tools.sandbox"}


def _modules() -> dict[str, Path]:
    found = {"worker": ROOT / "worker.py"}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Application modules `path` imports, anywhere in it; `from pkg import sub` counts as
    importing `pkg.sub` when that is a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if sub in modules else node.module)
    return {n for n in names if n in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


# Tests of the whole house, not of one package: the README, the compose file, the benchmark
# suite, the deploy, this layout.
WHOLE_HOUSE_TESTS = {"test_bench", "test_compose", "test_deploy", "test_layout", "test_readme"}


def test_tests_mirror_the_tree() -> None:
    tests = ROOT / "tests"
    folders = {p.parent.relative_to(tests).as_posix() for p in tests.rglob("test_*.py")}
    assert folders == {".", *PACKAGES}, "a test lives in the folder of the package it tests"
    assert {p.stem for p in tests.glob("test_*.py")} == WHOLE_HOUSE_TESTS


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert cycles == []


def test_imports_run_one_way() -> None:
    graph = _graph()

    def layer(module: str) -> str:
        return module.split(".")[0]

    wrong = []
    for module, deps in graph.items():
        for dep in deps:
            if layer(dep) == "api" and layer(module) != "api":
                wrong.append(f"{module} -> {dep}: nothing imports api")
            if layer(dep) == "workflows" and layer(module) not in ("workflows", "worker"):
                wrong.append(f"{module} -> {dep}: only the worker hosts workflows")
            if layer(module) == "api" and layer(dep) == "activities" and dep not in API_SHARES:
                wrong.append(f"{module} -> {dep}: the API reads the catalogue, not activities")
            dev = dep == "longrun.dev" or dep.startswith("longrun.dev.")
            if dev and layer(module) in ("workflows", "activities", "api"):
                wrong.append(f"{module} -> {dep}: local tooling stays out of the service")
    assert wrong == []


def test_the_api_loads_neither_the_model_client_nor_the_workflows() -> None:
    # It calls runs by their wire names (longrun/wire.py) and lists tools from the
    # catalogue; the model client, the workflow code and the tools' code are the worker's.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, api.app; print(*sorted(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "openai" not in loaded
    assert [m for m in loaded if m == "workflows" or m.startswith("workflows.")] == []
    assert "activities.tools.builtin" not in loaded


MUTABLE = (list, dict, set, bytearray)


def _module_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_workflow_modules_hold_no_mutable_state() -> None:
    # The worker imports `workflows` once for all its runs (worker.SHARED_MODULES_SANDBOX):
    # a module-level list, dict or set, or an object of a workflows class, would be one
    # value shared and changed by every run.
    shared = []
    for name, path in _modules().items():
        if name != "workflows" and not name.startswith("workflows."):
            continue
        module = importlib.import_module(name)
        for var in sorted(_module_level_names(path)):
            value = getattr(module, var, None)
            if isinstance(value, MUTABLE) or (
                not isinstance(value, type) and type(value).__module__.startswith("workflows")
            ):
                shared.append(f"{name}.{var}: {type(value).__name__}")
    assert not shared, f"module-level mutable values in workflows/: {shared}"


def test_every_contract_is_complete_when_imported() -> None:
    # A model that names a class defined after it is only built on first use, which inside
    # the workflow sandbox cannot see the module's names: the run's input then fails to
    # decode ("TypeAdapter[RunInput] is not fully defined"). Checked in a fresh interpreter,
    # before anything has used them.
    script = (
        "import importlib, pkgutil, pydantic, longrun.contracts as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'longrun.contracts.'):\n"
        "    mod = importlib.import_module(m.name)\n"
        "    for name, value in vars(mod).items():\n"
        "        if isinstance(value, type) and issubclass(value, pydantic.BaseModel) \\\n"
        "                and value.__module__ == mod.__name__ \\\n"
        "                and not value.__pydantic_complete__:\n"
        "            print(f'{m.name}.{name}')\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert found.stdout == "", f"incomplete until first use: {found.stdout.split()}"
