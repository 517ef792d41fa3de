"""``goal_met``: the model says the session's goal is met, with its evidence.

Offered only while the session has an active goal without a command (``/goal <condition>``).
The call records nothing besides its own item: when the turn ends, the goal runner
(``codey_server.agent.goals``) finds the last such call since the goal's last check and has a
model judge its evidence against the condition (:mod:`codey_server.core.goals`). The model
never decides the goal alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    BadToolCall,
    Display,
    Finish,
    ServerCall,
    ServerTool,
    obj,
    string,
)
from codey_server.core.goals import GOAL_TOOL

__all__ = ["EVIDENCE_MAX", "GOAL_MET", "GoalMetArgs"]

#: characters of evidence one call may give
EVIDENCE_MAX = 8000


@dataclass(frozen=True, slots=True)
class GoalMetArgs:
    evidence: str


class GoalMetTool(ServerTool[GoalMetArgs]):
    name = GOAL_TOOL
    guide = ("`goal_met` claims the session's goal is met: give your evidence (what you "
             "changed, what you ran and what it showed). A reviewer judges it after your "
             "turn; call it only once you have verified the goal, then end your turn.")
    display = Display("Goal met?", "plan")
    description = ("Claim that the session's goal is met. `evidence`: what you did and how you "
                   "verified it (commands run and their results, files changed). A reviewer "
                   "judges the evidence against the goal when your turn ends; if it is not "
                   "convinced, you are told why and a new turn starts.")
    parameters = obj({"evidence": {"type": "string"}}, ["evidence"])

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> GoalMetArgs:
        evidence = (string(args, "evidence") or "").strip()
        if not evidence:
            raise BadToolCall("`evidence` must say what you did and how you verified it")
        if len(evidence) > EVIDENCE_MAX:
            raise BadToolCall(f"`evidence` holds at most {EVIDENCE_MAX} characters")
        return GoalMetArgs(evidence)

    def start(self, args: GoalMetArgs, call: ServerCall) -> Finish:
        g = call.session.goal
        if g is None or g.status != "active" or g.command is not None:
            return Finish("failed", "error: this session has no goal that goal_met can "
                                    "claim", fields={"error": "no goal to claim"})
        return Finish("done", "noted: your evidence is judged when this turn ends. End your "
                              "turn now with a one-line summary.")


GOAL_MET = GoalMetTool()
