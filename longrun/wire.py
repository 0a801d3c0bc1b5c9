"""The run workflow's wire names: what clients call it and its handlers by. The workflow
declares its handlers with these names, the API calls them by these names; a running run
answers to them, so they never change."""

RUN_WORKFLOW = "longrun.Run"

# Queries.
STATUS = "status"
STEP = "step"
EVENTS = "events"
AUDIT = "audit"
OUTCOME = "outcome"

# Signals: requests people send (each carries a request id the `outcome` query answers).
PAUSE = "pause"
RESUME = "resume"
SET_BUDGET = "set_budget"
CANCELLING = "cancelling"
DECIDE = "decide"
# Signal: a child run's report to its parent (longrun.contracts.ChildReport).
CHILD = "child"
# Signal: the grants workflow's answer to a run that asked it (longrun.contracts.GrantOutcome).
GRANT_ANSWER = "grant_answer"

# The grants workflow: standing approvals, one workflow per task queue.
GRANTS_WORKFLOW = "longrun.Grants"
GRANT = "grant"  # signal: longrun.contracts.GrantRequest
GRANTS = "grants"  # query: longrun.contracts.GrantList
GRANT_OUTCOME = "grant_outcome"  # query: request id -> GrantOutcome | None


def grants_workflow_id(task_queue: str) -> str:
    """The grants workflow of the runs of `task_queue`."""
    return f"longrun-grants-{task_queue}"


# Memo: the changes a run starts with, named by the API that starts it: the workflow takes
# them as recorded at its start, with no marker of their own (workflows/changes.py).
# Unversioned workers must be deployed before an API that names a new change.
STARTED_WITH_MEMO = "started_with"
BASELINE_CHANGE = "baseline-2026-12"  # every change up to it
# Every change after the baseline, as workflows/changes.py registers them (a test holds the
# two alike): what the API names at start.
STARTED_WITH = (
    BASELINE_CHANGE,
    "agent-watchdog",
    "continued-said-by-next-segment",
    "hand-over-to-current-version",
    "progress-at-start",
    "progress-by-count",
    "one-memo-at-end",
    "quick-tools-local",
    "standing-grants",
    "watchdog-coaches",
    "done-when-done",
    "invalid-answers-coached",
    "rejected-calls-not-asked-again",
    "stalled-steps-restart",
    "steps-need-evidence",
    "step-evidence-kept",
    "last-step-to-the-checks",
    "fix-steps-restate-the-goal",
    "criteria-in-prose",
    "answered-before-the-end",
    "unchanged-claims-not-rechecked",
    "recovery-not-counted",
)

# Memo: the artifact holding the record a run stored as it ended (workflows/final_record.py):
# {"status": RunState, "audit"?: AuditTrail, "steps"?: {step id: StepState}}.
FINAL_RECORD_MEMO = "final_record"
