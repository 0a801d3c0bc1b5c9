"""The plan scheduler: a plan's steps run as activities as soon as their dependencies are
done, behind their approval gates, with a hand-over between segments of long plans."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.changes import baseline_retired
from workflows.common import (
    TIMEOUT_ACTOR,
    StepFailed,
    failure_of,
    preview,
    secret_approval,
)
from workflows.fanout import ForEach
from workflows.handover import HandOver
from workflows.parts import RunParts
from workflows.steps import DONE

with workflow.unsafe.imports_passed_through():
    from longrun import plans
    from longrun.contracts import ModelRequest, Plan, RetrySpec, Step, StepState


class PlanScheduler:
    """Runs an explicit plan to its end, or to the first step that fails it."""

    def __init__(self, parts: RunParts, handover: HandOver, plan: Plan) -> None:
        self._parts = parts
        self._handover = handover
        self._plan = plan
        self._settled_here = 0  # steps that ended in this history segment

    async def run(self) -> dict[str, Any]:
        """Run every step; the outputs of the final steps (those nothing depends on)."""
        await self._execute()
        steps = self._parts.steps.by_id
        depended_on = {d for s in self._plan.steps for d in (s.depends_on or [])}
        return {
            s.id: steps[s.id].output
            for s in self._plan.steps
            if s.id not in depended_on and steps[s.id].status == "completed"
        }

    async def _execute(self) -> None:
        steps = {s.id: s for s in self._plan.steps}
        book = self._parts.steps.by_id
        # Count unmet dependencies instead of rescanning every step on each wake-up, so a
        # run of a thousand steps costs O(edges), not O(steps²). Steps an earlier history
        # segment finished count as met.
        unmet = {
            s.id: sum(1 for d in s.depends_on or [] if book[d].status not in DONE)
            for s in steps.values()
        }
        dependents: dict[str, list[str]] = {step_id: [] for step_id in steps}
        for step in steps.values():
            for dep in step.depends_on or []:
                dependents[dep].append(step.id)
        ready = [
            step_id
            for step_id, count in unmet.items()
            if count == 0 and book[step_id].status not in DONE
        ]
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while ready or running:
                for step_id in ready:
                    running[step_id] = asyncio.create_task(self._run_step(steps[step_id]))
                ready = []
                self._parts.refresh()
                await workflow.wait(list(running.values()), return_when=asyncio.FIRST_COMPLETED)
                # Iterate in start order, not set order, so replay sees the same sequence.
                for step_id, task in list(running.items()):
                    if task.done():
                        del running[step_id]
                        task.result()
                        self._settled_here += 1
                        for dependent in dependents[step_id]:
                            unmet[dependent] -= 1
                            if unmet[dependent] == 0:
                                ready.append(dependent)
                # Hand over at a quiet moment: nothing running but waits for a person.
                quiet = all(book[s].status == "waiting_approval" for s in running)
                if (ready or running) and quiet and self._handover.due(self._settled_here):
                    ready = []
                    await self._handover.hand_over(running)
        # Not BaseException: other exceptions (eviction's among them) pass through.
        except (StepFailed, asyncio.CancelledError) as exc:
            # A cancellation may say why (the time budget); Temporal's says nothing.
            reason = str(exc) or "run cancelled"
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            self._parts.steps.cancel_pending(reason)
            raise

    async def _run_step(self, step: Step) -> None:
        book = self._parts.steps
        state = book.by_id[step.id]
        try:
            output = await self._perform(step, state)
        except asyncio.CancelledError:
            if not self._handover.underway:  # a hand-over keeps the step waiting
                book.settle(state, "cancelled")
            raise
        except StepFailed as exc:
            book.settle(state, "failed", error=str(exc))
            message = f"step '{step.id}' failed: {exc}"
            raise StepFailed(message, compensate=exc.compensate) from None
        except _Skipped as exc:
            book.settle(state, "skipped", error=str(exc))
            return
        if output is None:
            book.settle(state, "skipped")
        else:
            book.settle(state, "completed", output=output)

    async def _perform(self, step: Step, state: StepState) -> dict[str, Any] | None:
        """Run one step; None means it was skipped after a rejection."""
        p = self._parts
        tool = step.for_each.tool if step.for_each is not None else step.tool
        if tool is not None and tool not in p.tools:
            # The API knew the tool; this worker does not (workers older than the API?).
            raise StepFailed(
                f"no tool '{tool}' on the worker that ran this step: run workers of the "
                "same version as the API"
            )
        try:
            resolved = self._resolve(step)
        except plans.ReferenceError_ as exc:
            raise StepFailed(str(exc)) from None

        binding = None
        # A call a counterfactual fork answers from its recording runs nothing: no policy
        # approval, no budget.
        replayed = step.tool is not None and p.calls.counterfactual.has(step.tool, resolved)
        if step.tool is not None and not replayed:
            baseline_retired()
            binding = p.inp.config.policy.binding_approval(step.tool, resolved)
            if binding is None and p.tools[step.tool].exposes_secrets:
                binding = secret_approval(p.inp.config.policy, step.tool, resolved)
        gated = bool(step.approval is not None or step.requires_approval or binding)
        if gated and step.tool is not None and step.approval is None:
            # A call a standing approval covers runs without asking.
            gated = await p.standing.covering(step.id, step.tool, resolved) is None
        if gated:
            summary = (
                resolved.get("message")
                or f"{step.tool or step.kind} step '{step.id}': {preview(resolved)}"
            )
            if binding:
                summary += f" ({binding})"
            config = p.inp.config
            on_timeout = step.on_timeout or config.on_timeout
            record = await p.approvals.decision(
                p.approvals.ask(step.id, summary, arguments=resolved, tool=step.tool),
                step.approval_timeout_s or config.approval_timeout_s,
                on_timeout,
                step.escalate_to or config.escalate_to,
            )
            if record.decided_by == TIMEOUT_ACTOR and on_timeout == "skip":
                return None
            if record.decided_by == TIMEOUT_ACTOR and on_timeout == "fail":
                raise StepFailed(f"approval '{record.approval_id}': {record.comment}")
            if record.decision == "reject":
                if step.on_reject == "skip":
                    return None
                reason = f": {record.comment}" if record.comment else ""
                raise StepFailed(
                    f"rejected by {record.decided_by}{reason}",
                    compensate=step.on_reject == "compensate",
                )
            if step.approval is not None:
                state.started_at = state.finished_at = workflow.now()
                return {"approved_by": record.decided_by, "comment": record.comment}

        if step.model is not None or (step.tool is not None and not replayed):
            # A model or tool call: not while paused or over budget.
            await p.ledger.checkpoint("model" if step.model is not None else "tool")
        p.steps.start(state)
        try:
            if step.wait is not None:
                await workflow.sleep(timedelta(seconds=step.wait.seconds))
                return {"waited_s": step.wait.seconds}
            if step.run is not None or step.for_each is not None:
                return await self._children(step, resolved)
            if step.model is not None:
                return await self._call_model(step, state, resolved)
            return await self._call_tool(step, state, resolved)
        except ActivityError as exc:
            message, attempts = failure_of(exc)
            state.attempts = attempts or state.attempts
            raise StepFailed(message) from None

    async def _children(self, step: Step, resolved: dict[str, Any]) -> dict[str, Any]:
        """A run step's child run, or a for_each's items; a failure as `on_failure` says."""
        try:
            if step.run is not None:
                spec = step.run.model_copy(update={"goal": resolved["goal"]})
                return await self._parts.children.run(step.id, spec)
            return await ForEach(self._parts, step, resolved["items"], self._output_of).run()
        except StepFailed as exc:
            if step.on_failure == "skip" and step.run is not None:
                raise _Skipped(str(exc)) from None
            raise StepFailed(str(exc), compensate=step.on_failure == "compensate") from None

    def _output_of(self, step_id: str) -> Any:
        dep = self._parts.steps.by_id.get(step_id)
        if dep is None:
            raise plans.ReferenceError_(f"no step '{step_id}'")
        if dep.status != "completed":
            raise plans.ReferenceError_(f"step '{step_id}' has no output (it is {dep.status})")
        return dep.output

    def _resolve(self, step: Step) -> dict[str, Any]:
        """The step's inputs with references replaced: tool args as values, texts as text."""
        output_of = self._output_of

        if step.tool is not None:
            return dict(plans.resolve(step.args, output_of))
        if step.model is not None:
            system = step.model.system
            return {
                **step.model.model_dump(),
                "prompt": plans.resolve_text(step.model.prompt, output_of),
                "system": plans.resolve_text(system, output_of) if system else None,
            }
        if step.approval is not None:
            return {"message": plans.resolve_text(step.approval.message, output_of)}
        if step.run is not None:
            return {"goal": plans.resolve_text(step.run.goal, output_of)}
        if step.for_each is not None:
            items = step.for_each.items  # a literal list is taken as it is
            return {"items": items if isinstance(items, list) else plans.resolve(items, output_of)}
        return {}

    async def _call_tool(
        self, step: Step, state: StepState, args: dict[str, Any]
    ) -> dict[str, Any]:
        assert step.tool is not None
        p = self._parts
        result = await p.calls.tool(
            step.id, step.tool, args, retry=step.retry, timeout_s=step.timeout_s
        )
        if not result.replayed:
            p.undo.remember(step.id, step.tool, args, result.output)
        state.attempts = result.attempt
        return result.output

    async def _call_model(
        self, step: Step, state: StepState, spec: dict[str, Any]
    ) -> dict[str, Any]:
        p = self._parts
        model = spec.get("model") or p.inp.config.default_model
        request = ModelRequest(
            run_id=p.inp.run_id,
            step_id=step.id,
            model=model,
            prompt=spec["prompt"],
            system=spec.get("system"),
            json_schema=spec.get("json_schema"),
            max_tokens=spec.get("max_tokens"),
        )
        # An answer that is not the JSON asked for comes back (its tokens counted) and is
        # asked again, up to the step's attempts; transport failures retry in Temporal.
        answers = (step.retry or RetrySpec()).max_attempts
        problem: str | None = None
        for answer in range(1, answers + 1):
            if answer > 1:
                await p.ledger.checkpoint("model")
                # Say what was wrong, rather than ask the same question again.
                request = request.model_copy(update={"previous_error": problem})
            result = await p.calls.complete(request, retry=step.retry, timeout_s=step.timeout_s)
            state.attempts += result.attempt
            # Priced by the name asked for: providers answer with dated model names.
            p.ledger.add_usage(model, result.input_tokens, result.output_tokens)
            p.ledger.recovered(result.recovering_s)
            problem = result.json_error
            if problem is None:
                break
        else:
            raise StepFailed(f"no valid JSON in {answers} answers: {problem}")
        output: dict[str, Any] = {
            "text": result.text,
            "model": result.model,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
        }
        if result.json_value is not None:
            output["json"] = result.json_value
        return output


class _Skipped(Exception):
    """A step skipped after its child run failed (`on_failure: skip`), saying why."""
