"""Who may do what to which run, schedule, approval or artifact: the one place that decides.

A resource belongs to the key that created it (its owner) and to that key's tenant, if it has
one. A caller sees only resources of its own tenant (a key without a tenant: those without
one); an admin key of no tenant sees all. Among what it sees, what it may do depends on its
roles, and for some actions on being the owner:

| action          | any visible resource | only its own |
|-----------------|----------------------|--------------|
| read            | viewer, submitter, approver | |
| submit          | submitter            |              |
| decide          | approver             |              |
| budget          | approver             |              |
| pause (resume)  | approver             | submitter    |
| cancel          | -                    | submitter    |
| start_again     | -                    | submitter    |  (retry, fork)
| change_schedule | -                    | submitter    |  (pause, resume, delete)
| delete          | -                    | -            |  (stored outputs: admin only)

Admin may do everything. What a caller may not see is answered 404, as if it did not exist;
what it sees but may not do, 403 naming the rule.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle

from api.auth import Caller, Principal
from api.reading import describe_run
from longrun.attributes import TENANT_ATTRIBUTE
from longrun.contracts import Role
from longrun.settings import Settings

Action = Literal[
    "read",
    "submit",
    "decide",
    "budget",
    "pause",
    "cancel",
    "start_again",
    "change_schedule",
    "delete",
]


@dataclass(frozen=True)
class Rule:
    """The roles that may take an action on any resource they see, and on their own."""

    any: tuple[Role, ...] = ()
    own: tuple[Role, ...] = ()


RULES: dict[Action, Rule] = {
    "read": Rule(any=("viewer", "submitter", "approver")),
    "submit": Rule(any=("submitter",)),
    "decide": Rule(any=("approver",)),
    "budget": Rule(any=("approver",)),
    "pause": Rule(any=("approver",), own=("submitter",)),
    "cancel": Rule(own=("submitter",)),
    "start_again": Rule(own=("submitter",)),
    "change_schedule": Rule(own=("submitter",)),
    "delete": Rule(),
}
WORDS: dict[Action, str] = {
    "read": "read",
    "submit": "start runs",
    "decide": "decide approvals of",
    "budget": "change the budget of",
    "pause": "pause or resume",
    "cancel": "cancel",
    "start_again": "retry or fork",
    "change_schedule": "pause, resume or delete",
    "delete": "delete the stored outputs of",
}


@dataclass(frozen=True)
class Holder:
    """Whom a resource belongs to."""

    owner: str
    tenant: str | None


def _roles(rule: Rule) -> set[Role]:
    return {"admin", *rule.any, *rule.own}


def requires(action: Action) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency: 403 unless the caller holds a role that may take `action` on some
    resource (whose resource it is, is checked once the route knows it)."""

    async def check(caller: Caller) -> Principal:
        roles = sorted(_roles(RULES[action]) - {"admin"})
        if not caller.roles & _roles(RULES[action]):
            needs = " or ".join(roles) + " (or admin)" if roles else "admin"
            raise HTTPException(403, f"this needs the role {needs}")
        return caller

    return check


Reader = Annotated[Principal, Depends(requires("read"))]
Submitter = Annotated[Principal, Depends(requires("submit"))]
Approver = Annotated[Principal, Depends(requires("decide"))]
Operator = Annotated[Principal, Depends(requires("pause"))]
Canceller = Annotated[Principal, Depends(requires("cancel"))]
ScheduleChanger = Annotated[Principal, Depends(requires("change_schedule"))]
Admin = Annotated[Principal, Depends(requires("delete"))]


def four_eyes(settings: Settings) -> bool:
    """Whether a run's owner may not decide its approvals (nor grant them): the setting,
    where keys tell callers apart (without keys everyone is the same local caller)."""
    return settings.four_eyes and bool(settings.api_keys)


def sees(caller: Principal, holder: Holder) -> bool:
    """Whether `caller` may know the resource exists."""
    return caller.tenant == holder.tenant or _server_admin(caller)


def _server_admin(caller: Principal) -> bool:
    """An admin key of no tenant: the server's own admin, who sees every tenant."""
    return "admin" in caller.roles and caller.tenant is None


def check(caller: Principal, action: Action, holder: Holder, what: str) -> None:
    """404 unless `caller` sees the resource (`what`, in words), 403 unless it may take
    `action` on it."""
    if not sees(caller, holder):
        raise HTTPException(404, f"no {what}")
    rule = RULES[action]
    if "admin" in caller.roles or caller.roles & set(rule.any):
        return
    if caller.roles & set(rule.own) and holder.owner == caller.name:
        return
    kinds = what.split(" ", 1)[0] + "s"
    if rule.own and caller.roles & set(rule.own):
        raise HTTPException(
            403, f"{' and '.join(rule.own)}s may {WORDS[action]} only the {kinds} they started"
        )
    roles = " or ".join([*rule.any, *rule.own]) or "admin"
    raise HTTPException(403, f"to {WORDS[action]} {kinds} needs the role {roles} (or admin)")


def holder_in(memo: Mapping[str, Any], unowned: str = "local") -> Holder:
    """Whom a run or schedule belongs to, from its memo (`unowned`: of one from before
    owners were kept)."""
    tenant = memo.get("tenant")
    return Holder(
        owner=str(memo.get("owner") or unowned), tenant=tenant if isinstance(tenant, str) else None
    )


@dataclass(frozen=True)
class Known:
    """What never changes about a run: whom it belongs to (its id is never used again; a
    reset keeps its memo), and the schedule that started it."""

    holder: Holder
    schedule_id: str | None = None


# What this process knows of the runs it started or described, the latest KNOWN_KEPT: a
# request about a run seen before is checked without asking Temporal first.
KNOWN_KEPT = 100_000
_known: OrderedDict[str, Known] = OrderedDict()


def remember(run_id: str, memo: Mapping[str, Any]) -> Known:
    """Keep what never changes about `run_id`, from its memo."""
    schedule_id = memo.get("schedule_id")
    known = _known[run_id] = Known(
        holder_in(memo), schedule_id if isinstance(schedule_id, str) else None
    )
    _known.move_to_end(run_id)
    if len(_known) > KNOWN_KEPT:
        _known.popitem(last=False)
    return known


async def described_run(
    client: Client, caller: Principal, action: Action, run_id: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription, Known]:
    """The run `run_id`, which `caller` may `action`: its handle, its description and
    what never changes about it (now remembered)."""
    handle, desc = await describe_run(client, run_id)
    known = remember(run_id, await desc.memo())
    check(caller, action, known.holder, f"run '{run_id}'")
    return handle, desc, known


async def run_for(
    client: Client, caller: Principal, action: Action, run_id: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription]:
    """The run `run_id`, which `caller` may `action`: its handle and description."""
    handle, desc, _ = await described_run(client, caller, action, run_id)
    return handle, desc


def known_run(caller: Principal, action: Action, run_id: str) -> Known | None:
    """What never changes about the run `run_id`, which `caller` may `action`, if this
    process knows it without asking Temporal (whether the run is still open, it does not
    know); None if it does not."""
    known = _known.get(run_id)
    if known is not None:
        check(caller, action, known.holder, f"run '{run_id}'")
    return known


def server_wide(caller: Principal) -> None:
    """403 unless `caller` may see what concerns every tenant (the server's own metrics):
    a key of no tenant."""
    if caller.tenant is not None:
        raise HTTPException(403, "a key of a tenant sees only its tenant's runs and figures")


def visible_clause(caller: Principal) -> str | None:
    """The visibility filter for the runs `caller` may see; None: all of them."""
    if _server_admin(caller):
        return None
    if caller.tenant is None:
        return f"{TENANT_ATTRIBUTE.name} IS NULL"
    return f"{TENANT_ATTRIBUTE.name} = '{caller.tenant}'"


def with_visible(caller: Principal, query: str) -> str:
    """`query` narrowed to the runs `caller` may see."""
    clause = visible_clause(caller)
    return query if clause is None else f"{query} AND {clause}"
