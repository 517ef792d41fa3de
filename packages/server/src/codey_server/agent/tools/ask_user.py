"""``ask_user``: ask the user a question; their answer is the call's result.

The session waits in ``waiting_user`` meanwhile; a pending question survives a restart (the
resumed turn finds it by the call's item and waits again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from codey_protocol import events as ev
from codey_protocol import worker as wk
from codey_server.agent.tools.base import (
    BadToolCall,
    Display,
    Finish,
    ForAnswer,
    ServerCall,
    ServerTool,
    Waiting,
    obj,
    string,
)

__all__ = ["ASK_USER", "AskArgs"]


@dataclass(frozen=True, slots=True)
class AskArgs:
    question: str
    choices: list[str] = field(default_factory=list)


class AskUser(ServerTool[AskArgs]):
    name = "ask_user"
    guide = ("`ask_user` asks the user a question and waits for the answer: only when you "
             "cannot reasonably go on without it.")
    display = Display("Question for you", "question", "question")
    description = ("Ask the user a question and wait for the answer. Use it when you "
                   "cannot go on without a decision only they can make; offer `choices` when "
                   "the answer is one of a few.")
    parameters = obj({"question": {"type": "string"},
                      "choices": {"type": "array", "items": {"type": "string"},
                                  "maxItems": 10}}, ["question"])
    in_plan_mode = True

    def parse(self, args: dict[str, Any], *, name: str,
              capabilities: wk.Capabilities | None) -> AskArgs:
        question = string(args, "question") or ""
        choices = args.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise BadToolCall("`choices` must be a list of strings")
        return AskArgs(question.strip(), [c for c in choices if c.strip()][:10])

    def start(self, args: AskArgs, call: ServerCall) -> Finish | Waiting:
        item = call.item
        asked = next((q for q in call.session.questions.values() if q.item_id == item.id), None)
        if asked is None:
            question_id = call.new_id("qst")
            return Waiting(ForAnswer(question_id), [
                (call.session.session_id, ev.QuestionAsked(
                    question_id=question_id, item_id=item.id, question=args.question,
                    choices=args.choices)),
                (call.session.session_id, ev.SessionItemUpdated(item_id=item.id,
                                                                status="waiting_user"))])
        if asked.status == "pending":
            return Waiting(ForAnswer(asked.question_id))
        return self.resume(args, call)

    def resume(self, args: AskArgs, call: ServerCall) -> Finish:
        q = next(q for q in call.session.questions.values() if q.item_id == call.item.id)
        if q.status == "cancelled":
            return Finish("cancelled", "the user did not answer (cancelled)")
        return Finish("done", f"the user answered: {q.answer}")


ASK_USER = AskUser()
