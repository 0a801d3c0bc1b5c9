"""Records runs stored away in the artifact store: at a hand-over (workflows/handover.py)
earlier audit entries, which `GET /v1/runs/{id}/audit` reads in before the rest, and
earlier events, which `GET /v1/runs/{id}/events` sends before the rest; at the end
(workflows/final_record.py) the run's final record, which reads of an ended run answer from."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from temporalio.exceptions import ApplicationError

from longrun.artifacts import store_for
from longrun.settings import Settings

log = logging.getLogger("longrun.api")


def archived(
    settings: Settings, run_id: str, artifacts: list[str], kind: Literal["audit", "events"]
) -> list[dict[str, Any]]:
    """The records of one kind the run's archive artifacts hold, oldest first (blocking:
    store reads). An artifact pruned with the run's others is skipped, and logged."""
    store = store_for(settings)
    records: list[dict[str, Any]] = []
    for artifact in artifacts:
        try:
            chunk = json.loads(store.get(run_id, artifact))
        except ApplicationError as exc:
            log.warning("run %s: archive %s is gone: %s", run_id, artifact, exc)
            continue
        records.extend(chunk.get(kind, []))
    return records


def final_record(settings: Settings, run_id: str, artifact: str) -> dict[str, Any] | None:
    """The record a run stored as it ended (blocking: a store read); None if the store
    cannot give it (pruned, unreachable), logged."""
    try:
        record: dict[str, Any] = json.loads(store_for(settings).get(run_id, artifact))
    except (ApplicationError, OSError, ValueError) as exc:
        log.warning("run %s: final record %s is unreadable: %s", run_id, artifact, exc)
        return None
    return record
