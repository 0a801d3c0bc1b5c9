"""A suite of agent tasks and its scorer: `longrun eval evals/ --k 4 [--chaos]` submits each
task through the API k times, checks each run's outcome deterministically, and reports
pass^1, pass^k, cost per success, time, recovery and side effects applied twice."""
