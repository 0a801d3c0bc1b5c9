"""Values too big to travel in one payload (outputs, a call's arguments, a prompt), stored
whole in the artifact store: the run moves references to them (longrun.refs), which
activities read back."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

from workflows.common import retry_policy

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import KeepRequest

# What one `artifacts.keep` call may carry: well under Temporal's 2 MB payload limit.
BATCH_MAX_BYTES = 1024 * 1024
REF_BYTES = 400  # about what a reference with its preview takes
KEEP_TIMEOUT = timedelta(minutes=2)


def size(value: Any) -> int:
    """The bytes of `value` as JSON."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


async def fit(run_id: str, outputs: dict[str, Any], limit: int) -> dict[str, Any]:
    """`outputs` (named values), the biggest replaced by references until the whole fits
    `limit` bytes."""
    sizes = {name: size(value) for name, value in outputs.items()}
    total = sum(sizes.values())
    if total <= limit:
        return outputs
    moved: list[str] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if total <= limit:
            break
        if sizes[name] <= REF_BYTES:
            break  # smaller than its reference would be
        moved.append(name)
        total -= sizes[name] - REF_BYTES
    kept = dict(outputs)
    batch: dict[str, Any] = {}
    batch_bytes = 0
    for name in moved:
        if batch and batch_bytes + sizes[name] > BATCH_MAX_BYTES:
            kept.update(await keep(run_id, batch))
            batch, batch_bytes = {}, 0
        batch[name] = outputs[name]
        batch_bytes += sizes[name]
    if batch:
        kept.update(await keep(run_id, batch))
    return kept


async def keep(run_id: str, outputs: dict[str, Any]) -> dict[str, Any]:
    """Store each output whole; a reference to each, by the same names."""
    refs: dict[str, Any] = await workflow.execute_activity(
        "artifacts.keep",
        KeepRequest(run_id=run_id, outputs=outputs),
        result_type=dict,
        start_to_close_timeout=KEEP_TIMEOUT,
        retry_policy=retry_policy(None),
        summary=f"keep {len(outputs)} outputs in the artifact store",
    )
    return refs
