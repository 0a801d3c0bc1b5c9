"""Every change to what runs do, in one place, and the one question workflow code asks of
them: `changed(name)`, true where the run does the new thing.

A running run must replay as it ran, so a change to the commands a run gives Temporal is
taken only by runs that can take it. Each change here says what runs with it do, what runs
started before it do, and when it can be retired (its old branch removed). Names are
recorded in histories and memos: never rename one.

How a run comes to have a change:
- `BASELINE`: one of the changes made before `baseline-2026-12`. A run started on code that
  has them all records one marker (or is named at start) for all of them; a run started
  before replays the markers it recorded, one per change.
- `MARKED`: named at start by the API that starts the run (longrun/wire.py: STARTED_WITH);
  else `workflow.patched(name)`, so a run started before records a marker where it first
  meets the new code.
- `AT_START`: named at start, or not at all: it changes what a run does where no marker
  can be recorded (a query, the run's first task), so only runs started with it take it.

A change can be retired once no open run started without it, on any worker version: as
Temporal's patching guidance goes, its call becomes `workflow.deprecate_patch(name)` and
its old branch is removed, and the call goes once no open history holds its marker.
`longrun check-replay --changes` counts the open runs that still hold each one back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from longrun import wire


class How(Enum):
    """How a run comes to have a change (see the module's docstring)."""

    BASELINE = "baseline"
    MARKED = "marked"
    AT_START = "at start"


@dataclass(frozen=True)
class Change:
    """One change: what runs with it do, and what runs started before it do."""

    name: str
    how: How
    now: str
    before: str


BASELINE = wire.BASELINE_CHANGE
RETIRES_WHEN = "no open run, on any worker version, started without it"

# Read-only: the worker imports workflows/ once for all its runs.
CHANGES = MappingProxyType(
    {
        c.name: c
        for c in (
            Change(
                "activity-ids",
                How.BASELINE,
                "activity ids say what a call is for (`step fetch: tool http #3`), so the API "
                "shows a step's live attempts from the run's pending activities",
                "the SDK's numbers",
            ),
            Change(
                "agent-context",
                How.BASELINE,
                "the agent keeps its context small: briefs, compaction, continue-as-new",
                "the whole conversation, one history",
            ),
            Change(
                "agent-memory",
                How.BASELINE,
                "the agent keeps notes in its journal (memory activities)",
                "no journal",
            ),
            Change(
                "bounded-calls",
                How.BASELINE,
                "a call's arguments (or a model step's prompt) over 256 KB are stored whole and "
                "travel as references",
                "sent whole",
            ),
            Change(
                "bounded-carry",
                How.BASELINE,
                "a hand-over carries at most 512 KB; the rest is stored",
                "carried everything whole",
            ),
            Change(
                "bounded-result",
                How.BASELINE,
                "a run's result over 512 KB is stored and returned as references",
                "returned whole",
            ),
            Change(
                "events-archive",
                How.BASELINE,
                "a hand-over archives the event log's older entries",
                "no event log to archive",
            ),
            Change(
                "figures-memo",
                How.BASELINE,
                "an ended run keeps its figures in its memo, where task metrics read them",
                "ended without",
            ),
            Change(
                "final-record",
                How.BASELINE,
                "an ended run stores a record of itself (status, audit, steps), read with no "
                "worker",
                "stored none: reading it replays its history",
            ),
            Change(
                "model-heartbeat-retry-window",
                How.BASELINE,
                "model calls heartbeat and retry transient failures for a window of time",
                "a count of attempts, no heartbeat",
            ),
            Change(
                "model-unavailable-pause",
                How.BASELINE,
                "a model call whose retry window runs out pauses the run (model_unavailable) "
                "until a person resumes it, then asks again",
                "the call failed",
            ),
            Change(
                "policy-urls-whole",
                How.BASELINE,
                "policy rules compare URL arguments as written",
                "compared them as paths (URL prefixes never matched)",
            ),
            Change(
                "progress-attributes",
                How.BASELINE,
                "runs publish their progress as search attributes",
                "published none",
            ),
            Change(
                "replan-needs-help",
                How.BASELINE,
                "a replan that fails asks a person",
                "failed the run",
            ),
            Change(
                "secret-approval",
                How.BASELINE,
                "a call that hands secrets to a command needs approval",
                "a step could opt out of it",
            ),
            Change(
                "time-budget-while-waiting",
                How.BASELINE,
                "a time budget that fails the run fails it while it waits too",
                "failed only at its next call",
            ),
            Change(
                "tool-cancel-waits",
                How.BASELINE,
                "a cancelled tool call is waited for until it has stopped (or finished too late, "
                "and is undone), so compensation never races it",
                "let it go on its own",
            ),
            Change(
                "verify-retry-window",
                How.BASELINE,
                "verification retries for the model's window and pauses the run when it runs out",
                "gave up after five attempts",
            ),
            Change(
                "agent-watchdog",
                How.MARKED,
                "a watchdog holds an agent that repeats itself or spends a phase's share of time",
                "no watchdog",
            ),
            Change(
                "continued-said-by-next-segment",
                How.MARKED,
                "`run.continued` is said by the segment a hand-over starts",
                "said by the segment handing over",
            ),
            Change(
                "hand-over-to-current-version",
                How.MARKED,
                "a run hands over early when a new worker version becomes current",
                "handed over only at its step count",
            ),
            Change(
                "progress-at-start",
                How.AT_START,
                "progress attributes are set at start",
                "not set at start",
            ),
            Change(
                "progress-by-count",
                How.AT_START,
                "progress is published by changes, not by time",
                "published by time",
            ),
            Change(
                "one-memo-at-end",
                How.AT_START,
                "the figures and the final record go in one memo upsert",
                "two upserts",
            ),
            Change(
                "quick-tools-local",
                How.AT_START,
                "quick read-only tools run as local activities",
                "every tool an activity",
            ),
            Change(
                "standing-grants",
                How.MARKED,
                "a call a standing grant covers runs without asking",
                "every gated call asks",
            ),
            Change(
                "watchdog-coaches",
                How.MARKED,
                "an agent is told of a repetition before it is held for it",
                "held at once",
            ),
            Change(
                "done-when-done",
                How.MARKED,
                "acceptance checks run as soon as an effect could satisfy them; the run "
                "completes when they pass",
                "acted on until a judge, the budget or the watchdog stopped it",
            ),
            Change(
                "invalid-answers-coached",
                How.MARKED,
                "an agent is also told of answers in a row that call no tool rightly, before "
                "such answers hold it",
                "held at once",
            ),
            Change(
                "rejected-calls-not-asked-again",
                How.MARKED,
                "a person is not asked again for a call they rejected",
                "asked again",
            ),
            Change(
                "stalled-steps-restart",
                How.MARKED,
                "a stalled step's conversation is set aside and the step starts afresh (told "
                "why) before the run is held, up to `Watchdog.restarts` times a step",
                "held at once",
            ),
            Change(
                "steps-need-evidence",
                How.MARKED,
                "a step that asks for a tool's work in which no tool ran fails, without the judge",
                "the judge decided",
            ),
            Change(
                "step-evidence-kept",
                How.MARKED,
                "what a step's first attempt wrote is still its evidence when a failed "
                "verification sends it back",
                "only the last attempt's",
            ),
            Change(
                "last-step-to-the-checks",
                How.MARKED,
                "a last step claimed done is left to the acceptance criteria, without the judge, "
                "when every criterion is a tool's",
                "the judge decided",
            ),
            Change(
                "fix-steps-restate-the-goal",
                How.MARKED,
                "the step added when a criterion fails works on the goal itself again, its "
                "failures as the expected evidence",
                "'Make the failing acceptance criteria pass', which a small model took for a tool",
            ),
            Change(
                "criteria-in-prose",
                How.MARKED,
                "tool checks are told to the model in words (briefs.describe_criterion)",
                "as JSON",
            ),
            Change(
                "answered-before-the-end",
                How.MARKED,
                "a run that has taken a person's request ends in a workflow task of its own (a "
                "1 ms timer first), so the request's outcome is answered from a worker's memory "
                "rather than by replaying the closed run",
                "ended in the task that took the request",
            ),
            Change(
                "unchanged-claims-not-rechecked",
                How.MARKED,
                "a claim of the goal met, with nothing changed since the criteria last failed, "
                "gets those failures back without checking again",
                "checked again (on Qwen, a test run and a judge's call each time)",
            ),
            Change(
                "recovery-not-counted",
                How.MARKED,
                "time model calls waited on recovery (ModelUsage.recovering_s) is not counted "
                "against the time budget",
                "the run's whole age counted",
            ),
        )
    }
)


def changed(name: str) -> bool:
    """Whether this run does what `name` changed (see the module's docstring); a name not
    in CHANGES is a KeyError, so a misspelt change fails the tests, not a run."""
    how = CHANGES[name].how
    if how is How.AT_START:
        return started_with(name)
    if how is How.MARKED:
        return started_with(name) or workflow.patched(name)
    return started_with(BASELINE) or workflow.patched(BASELINE) or workflow.patched(name)


def started_with(name: str) -> bool:
    """Whether the run was started with `name` (named in its memo by the API that started
    it; a hand-over's next segment keeps its memo)."""
    named = workflow.memo_value(wire.STARTED_WITH_MEMO, default=[], type_hint=list[str])
    return name in named
