"""Paths a step names in its run's workspace: relative, and never up (longrun/beneath.py
opens them without leaving it)."""

from __future__ import annotations

from pathlib import PurePosixPath


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
