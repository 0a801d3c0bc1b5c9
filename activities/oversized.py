"""`artifacts.keep`: values too big to travel in one payload (a run's result, a hand-over,
a call's arguments), stored whole in the artifact store; the run moves references."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity

from activities.errors import reported_with_attempt
from longrun.artifacts import store_for
from longrun.contracts import KeepRequest
from longrun.settings import Settings


class KeepActivities:
    """Stores outputs whole for the runs of one worker."""

    def __init__(self, settings: Settings) -> None:
        self._store = store_for(settings)

    @activity.defn(name="artifacts.keep")
    async def keep(self, req: KeepRequest) -> dict[str, Any]:
        """Each output as JSON in the store; a reference to each, by the same names."""
        with reported_with_attempt():
            return await asyncio.to_thread(self._keep, req)

    def _keep(self, req: KeepRequest) -> dict[str, Any]:
        return {name: self._store.keep(req.run_id, output) for name, output in req.outputs.items()}
