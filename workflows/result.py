"""A completed run's result within a bound: the outputs of its final steps travel whole
while they fit; the biggest beyond that are stored whole in the artifact store and listed
as references with previews (`GET /v1/runs/{id}/artifacts/{ref}` reads them)."""

from __future__ import annotations

from typing import Any

from workflows import stored
from workflows.changes import baseline_retired

# Well under Temporal's 2 MB payload limit, with room for the rest of the completion.
RESULT_MAX_BYTES = 512 * 1024


async def bounded(run_id: str, outputs: dict[str, Any]) -> dict[str, Any]:
    """`outputs`, the biggest replaced by references until the whole fits the bound."""
    total = sum(stored.size(value) for value in outputs.values())
    if total <= RESULT_MAX_BYTES:
        return outputs
    baseline_retired()
    return await stored.fit(run_id, outputs, RESULT_MAX_BYTES)
