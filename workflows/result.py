"""A completed run's result within a bound: the outputs of its final steps travel whole
while they fit; the biggest beyond that are stored whole in the artifact store and listed
as references with previews (`GET /v1/runs/{id}/artifacts/{ref}` reads them)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

from workflows.common import retry_policy

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import KeepRequest

# Well under Temporal's 2 MB payload limit, with room for the rest of the completion.
RESULT_MAX_BYTES = 512 * 1024
# What one `artifacts.keep` call may carry: also well under the payload limit.
BATCH_MAX_BYTES = 1024 * 1024
REF_BYTES = 400  # about what a reference with its preview takes
KEEP_TIMEOUT = timedelta(minutes=2)
# Runs started before returned their result whole, and replay that way.
BOUNDED_RESULT_PATCH = "bounded-result"


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


async def bounded(run_id: str, outputs: dict[str, Any]) -> dict[str, Any]:
    """`outputs`, the biggest replaced by references until the whole fits the bound."""
    sizes = {name: _size(value) for name, value in outputs.items()}
    total = sum(sizes.values())
    if total <= RESULT_MAX_BYTES or not workflow.patched(BOUNDED_RESULT_PATCH):
        return outputs
    moved: list[str] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if total <= RESULT_MAX_BYTES:
            break
        moved.append(name)
        total -= sizes[name] - REF_BYTES
    kept = dict(outputs)
    batch: dict[str, Any] = {}
    batch_bytes = 0
    for name in moved:
        if batch and batch_bytes + sizes[name] > BATCH_MAX_BYTES:
            kept.update(await _keep(run_id, batch))
            batch, batch_bytes = {}, 0
        batch[name] = outputs[name]
        batch_bytes += sizes[name]
    if batch:
        kept.update(await _keep(run_id, batch))
    return kept


async def _keep(run_id: str, outputs: dict[str, Any]) -> dict[str, Any]:
    refs: dict[str, Any] = await workflow.execute_activity(
        "artifacts.keep",
        KeepRequest(run_id=run_id, outputs=outputs),
        result_type=dict,
        start_to_close_timeout=KEEP_TIMEOUT,
        retry_policy=retry_policy(None),
        summary=f"keep {len(outputs)} outputs in the artifact store",
    )
    return refs
