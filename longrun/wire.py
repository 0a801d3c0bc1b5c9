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

# Memo: the artifact holding the record a run stored as it ended (workflows/final.py):
# {"status": RunState, "audit"?: AuditTrail, "steps"?: {step id: StepState}}.
FINAL_RECORD_MEMO = "final_record"
