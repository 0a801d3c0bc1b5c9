"""Confinement of file paths to a run's workspace."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from activities.errors import fatal


def check_relative(path: str) -> str:
    """Reject paths that name something outside the workspace on their face."""
    if not path or "\x00" in path:
        raise ValueError("path must be a non-empty string without NUL bytes")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise ValueError("path must be relative to the run's workspace, not absolute")
    if ".." in pure.parts:
        raise ValueError("path must not contain '..'")
    if not pure.parts:
        raise ValueError("path must name a file inside the workspace")
    return path


def confine(workspace: Path, path: str) -> Path:
    """The real path of `path` inside `workspace`; symlinks that lead out are rejected."""
    root = workspace.resolve()
    target = (root / check_relative(path)).resolve()
    if not target.is_relative_to(root):
        raise fatal(f"path '{path}' leads outside the run's workspace (through a symlink)")
    return target
