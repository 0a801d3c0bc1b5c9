"""Keep what a process made at start-up out of the garbage collector's full passes."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now (modules, classes, schemas: about
    200,000 once the worker's imports are done) to the collector's permanent generation,
    so a full pass walks only what the process made since (130 ms less a pass on 2 cores).
    A full pass runs on whichever thread allocates: on a workflow thread it counts against
    the SDK's 2 s limit before it calls a workflow task deadlocked and fails it. Call it
    once, before work starts: what is frozen is never collected."""
    gc.collect()
    gc.freeze()
