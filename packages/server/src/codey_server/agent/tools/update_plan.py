"""``update_plan``: the model shares its plan (steps with their status)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.tools.base import BadToolCall, Display, Finish, ServerCall, ServerTool, obj

__all__ = ["UPDATE_PLAN", "PlanArgs"]


@dataclass(frozen=True, slots=True)
class PlanArgs:
    plan: list[ev.PlanStep] = field(default_factory=list)
    explanation: str = ""


class UpdatePlan(ServerTool[PlanArgs]):
    name = "update_plan"
    guide = "`update_plan` shows the user your plan and where you are in it."
    display = Display("Update plan", "plan", arguments=False, result="none")
    description = "Share your plan: steps with status pending, in_progress or done."
    parameters = obj({"explanation": {"type": "string"},
                      "plan": {"type": "array", "items": obj(
                          {"step": {"type": "string"},
                           "status": {"type": "string",
                                      "enum": ["pending", "in_progress", "done"]}},
                          ["step", "status"])}}, ["plan"])
    in_plan_mode = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> PlanArgs:
        plan = args.get("plan")
        if not isinstance(plan, list):
            raise BadToolCall("`plan` must be a list of {step, status}")
        steps = []
        for entry in plan:
            if (not isinstance(entry, dict) or not isinstance(entry.get("step"), str)
                    or entry.get("status") not in ("pending", "in_progress", "done")):
                raise BadToolCall("each plan entry needs `step` (string) and `status` "
                                  "(pending, in_progress or done)")
            steps.append(ev.PlanStep(step=entry["step"], status=entry["status"]))
        explanation = args.get("explanation")
        return PlanArgs(steps, explanation if isinstance(explanation, str) else "")

    def start(self, args: PlanArgs, call: ServerCall) -> Finish:
        return Finish("done", "plan updated", [(call.session.session_id, ev.PlanUpdated(
            steps=args.plan, explanation=args.explanation))])


UPDATE_PLAN = UpdatePlan()
