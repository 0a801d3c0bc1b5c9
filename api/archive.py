"""Audit entries a long run stored away in the artifact store when its hand-over grew too
big (workflows/handover.py); `GET /v1/runs/{id}/audit` reads them in before the rest."""

from __future__ import annotations

import json
import logging

from temporalio.exceptions import ApplicationError

from activities.artifacts import store_for
from longrun.contracts import AuditEntry
from longrun.settings import Settings

log = logging.getLogger("longrun.api")


def archived_entries(settings: Settings, run_id: str, artifacts: list[str]) -> list[AuditEntry]:
    """The entries the run's archive artifacts hold, oldest first."""
    store = store_for(settings)
    entries: list[AuditEntry] = []
    for artifact in artifacts:
        try:
            chunk = json.loads(store.get(run_id, artifact))
        except ApplicationError as exc:  # pruned with the run's other artifacts
            log.warning("run %s: audit archive %s is gone: %s", run_id, artifact, exc)
            continue
        entries.extend(AuditEntry.model_validate(e) for e in chunk.get("audit", []))
    return entries
