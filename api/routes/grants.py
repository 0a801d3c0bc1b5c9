"""Standing approvals: grant ahead of time that calls of a tool, with arguments matching
so, may run without asking, in one run or in runs with a label, for so long or so many
uses; list them; revoke one at once."""

from __future__ import annotations

import re

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from api import access, standing
from api.access import Approver, Holder, Reader
from api.deps import SettingsDep, TemporalClient
from api.schemas import answers
from longrun.contracts import Grant, GrantSpec
from longrun.contracts.standing import GRANT_ID_PATTERN

router = APIRouter(
    prefix="/v1/approvals/grants", tags=["approvals"], responses=answers(401, 403, 503)
)


class Grants(BaseModel):
    """The standing approvals the caller sees, live and lately ended."""

    grants: list[Grant]


class Granted(BaseModel):
    """A grant made, or revoked."""

    grant_id: str
    detail: str


def _holder(grant: Grant) -> Holder:
    return Holder(owner=grant.granted_by, tenant=grant.tenant)


async def grant_for(
    spec: GrantSpec, client: TemporalClient, settings: SettingsDep, caller: Approver
) -> Grant:
    """The grant `caller` may give for `spec` (checked by the access layer), or 403/404."""
    four_eyes = access.four_eyes(settings)
    if spec.run_id is not None:
        _, _, run = await access.described_run(client, caller, "decide", spec.run_id)
        if four_eyes and run.holder.owner == caller.name:
            raise HTTPException(403, "four-eyes rule: grant approvals for runs you did not start")
    return standing.new_grant(spec, caller, four_eyes)


@router.post("", status_code=201, responses=answers(404))
async def create_grant(
    spec: GrantSpec, client: TemporalClient, settings: SettingsDep, caller: Approver
) -> Granted:
    """Grant that calls of `tool` whose arguments match `args` (each named argument exactly
    `equals`, or a string starting with `prefix`) run without asking, in run `run_id` or in
    runs labelled `label`, for `hours` or `uses`. Each use is in the run's audit."""
    grant = await grant_for(spec, client, settings, caller)
    outcome = await standing.add(client, settings, grant, caller.name)
    if not outcome.taken:
        raise HTTPException(409, outcome.message or "refused")
    return Granted(grant_id=grant.grant_id, detail=f"{grant.tool} granted ({grant.grant_id})")


@router.get("")
async def list_grants(client: TemporalClient, settings: SettingsDep, caller: Reader) -> Grants:
    """The standing approvals of the caller's tenant: live ones and those ended lately (see
    `revoked_at`, `expires_at`, `uses_left`)."""
    found = await standing.listed(client, settings)
    return Grants(grants=[g for g in found if access.sees(caller, _holder(g))])


@router.delete("/{grant_id}", responses=answers(404, 409))
async def revoke_grant(
    grant_id: str, client: TemporalClient, settings: SettingsDep, caller: Approver
) -> Granted:
    """Revoke a grant: calls it covered ask a person again, from now on."""
    if not re.fullmatch(GRANT_ID_PATTERN, grant_id):
        raise HTTPException(404, f"no grant '{grant_id}'")
    found = {g.grant_id: g for g in await standing.listed(client, settings)}
    grant = found.get(grant_id)
    if grant is None:
        raise HTTPException(404, f"no grant '{grant_id}'")
    access.check(caller, "decide", _holder(grant), f"grant '{grant_id}'")
    outcome = await standing.revoke(client, settings, grant, caller.name)
    if not outcome.taken:
        raise HTTPException(409, outcome.message or "refused")
    return Granted(grant_id=grant_id, detail=f"{grant_id} revoked")
