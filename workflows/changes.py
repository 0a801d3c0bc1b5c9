"""Every change to what runs do, in one place, and the one question workflow code asks of
them: `changed(name)`, true where the run does the new thing.

A running run must replay as it ran, so a change to the commands a run gives Temporal is
taken only by runs that can take it. Each change here says what runs with it do, what runs
started before it do, and when it can be retired (its old branch removed). Names are
recorded in histories and memos: never rename one.

How a run comes to have a change:
- `MARKED`: named at start by the API that starts the run (longrun/wire.py: STARTED_WITH);
  else `workflow.patched(name)`, so a run started before records a marker where it first
  meets the new code.
- `AT_START`: named at start, or not at all: it changes what a run does where no marker
  can be recorded (a query, the run's first task), so only runs started with it take it.

A change can be retired once no open run started without it: its old branch is removed and
it leaves this registry; where it was asked, a `workflow.deprecate_patch(name)` stays until
no history holds its marker (a marker nothing reads is nondeterminism on replay). Runs are
pinned to the worker version they started on (longrun/versions.py) and move to new code only
at a hand-over, which starts a fresh history, so new code never replays an older run's
history; on unversioned workers, retire only what `longrun check-replay --changes` shows no
open run holds back. Retired: the eighteen changes `baseline-2026-12` stood for (activity
ids, agent context and memory, bounded calls, carries and results, the events archive, the
figures memo, the final record, model calls' heartbeat, retry window and pause, whole URLs
in policy rules, progress attributes, a failed replan asking for help, secret approval, the
time budget while waiting, tool cancellation that waits, the verification retry window):
each place that asked about one calls `baseline_retired()`, which reads the baseline's
marker in histories that hold one. The baseline's name stays in the memo the API writes.
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

# Read-only: the worker imports workflows/ once for all its runs.
CHANGES = MappingProxyType(
    {
        c.name: c
        for c in (
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
    if CHANGES[name].how is How.AT_START:
        return started_with(name)
    return started_with(name) or workflow.patched(name)


def baseline_retired() -> None:
    """Where a run asked about a change of the retired baseline. A run started without the
    baseline named in its memo recorded the baseline's marker at the first such place; the
    deprecated patch reads that marker on replay (and records one, deprecated, for workers
    that still ask), so every such place keeps this call."""
    if not started_with(BASELINE):
        workflow.deprecate_patch(BASELINE)


def started_with(name: str) -> bool:
    """Whether the run was started with `name` (named in its memo by the API that started
    it; a hand-over's next segment keeps its memo)."""
    named = workflow.memo_value(wire.STARTED_WITH_MEMO, default=[], type_hint=list[str])
    return name in named
