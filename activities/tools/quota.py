"""The run's workspace quota (LONGRUN_WORKSPACE_MB): every step of a run together may keep
at most that much on disk in its workspace.

The kernel bounds each file a sandboxed process writes to what the quota has left (its
RLIMIT_FSIZE, activities/tools/sandbox.py); the worker bounds the whole: it measures the
workspace before a step, watches it while the step's processes run (stopping them once it
passes the quota) and measures it again after. A step that takes the workspace past its
quota fails saying so; the run goes on as after any failed step, and its next steps find
no room until files are removed. Project quotas or a filesystem per run would let the
kernel bound the whole, at the price of privileges and setup a worker does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from activities.errors import fatal
from longrun.settings import Settings

MB = 1024 * 1024
WATCH_EVERY_S = 0.2  # at least; a workspace that takes longer to measure is measured less often


def usage(workspace: Path) -> int:
    """What the files under `workspace` take on disk, in bytes (links are not followed)."""
    total = 0
    folders = [str(workspace)]
    while folders:
        with contextlib.suppress(OSError), os.scandir(folders.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
    return total


def passed(settings: Settings, used: int) -> str:
    """The error of a step that took the workspace past its quota."""
    return (
        f"the run's workspace passed its quota of {settings.workspace_mb} MB "
        f"(LONGRUN_WORKSPACE_MB): it holds {used / MB:.1f} MB; remove files to make room"
    )


def refuse_write(settings: Settings, workspace: Path, adding: int) -> None:
    """Fail (naming the quota) if writing `adding` more bytes would pass it."""
    used = usage(workspace)
    if used + adding > settings.workspace_mb * MB:
        raise fatal(
            f"writing {adding / MB:.1f} MB would take the run's workspace past its quota of "
            f"{settings.workspace_mb} MB (LONGRUN_WORKSPACE_MB): it holds {used / MB:.1f} MB",
            type="WorkspaceQuota",
        )


class Watch:
    """The quota of one step's workspace while its processes run."""

    def __init__(self, settings: Settings, workspace: Path) -> None:
        self.settings = settings
        self.workspace = workspace
        self.limit = settings.workspace_mb * MB
        self.used = 0
        self.start: int | None = None
        self.passed = False

    async def measure(self) -> int:
        """The workspace's use now (measured off the event loop). The first measure is the
        step's start: a step that finds the workspace past its quota may remove files, but
        not grow it."""
        self.used = await asyncio.to_thread(usage, self.workspace)
        if self.start is None:
            self.start = self.used
        self.passed = self.passed or self.used > max(self.limit, self.start)
        return self.used

    @property
    def left(self) -> int:
        """What the quota had left when last measured."""
        return max(0, self.limit - self.used)

    @contextlib.asynccontextmanager
    async def watching(self, stop: Callable[[], None]) -> AsyncIterator[None]:
        """While the block runs, measure now and then; past the quota, call `stop`."""

        async def watch() -> None:
            while True:
                started = time.monotonic()
                await self.measure()
                if self.passed:
                    stop()
                    return
                await asyncio.sleep(max(WATCH_EVERY_S, 10 * (time.monotonic() - started)))

        task = asyncio.ensure_future(watch())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.measure()

    def check(self) -> None:
        """Fail the step if the workspace passed its quota while it ran."""
        if self.passed:
            raise fatal(passed(self.settings, self.used), type="WorkspaceQuota")
