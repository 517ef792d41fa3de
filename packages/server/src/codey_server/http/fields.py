"""Request fields that carry their rules in their types.

msgspec enforces a field's ``Meta`` constraints (pattern, length, bounds) when it decodes a
body, and the OpenAPI document at ``/schema`` shows the same constraints: a request that fits
the document is one the server takes, and one that does not is refused (400) before any
handler runs. ``tests/integration/test_schemathesis.py`` checks both ways.

- A constrained string is ``Annotated[str, msgspec.Meta(pattern=..., ...)]``. msgspec would
  answer a mismatch with "Expected `str` matching regex '\\\\S'"; a pattern made with
  :func:`pattern` keeps the words to answer instead (:mod:`.errors` asks :func:`words_for`).
  Patterns are searched, not matched (JSON Schema's rule, and msgspec's): anchor them.
  Write them in the subset of regular expressions that Python and ECMA-262 (JSON Schema's
  dialect) read alike: ``[0-9]``, not ``\\d``; white space as :data:`SPACE`, not ``\\s``
  (Python's, ECMA's and hypothesis's ``\\s`` are three different sets).
- A rule that joins two fields (a schedule's ``cron`` or ``at``, a prompt's text or files)
  is no type: the body struct states it as JSON Schema in a ``__schema_rules__`` class
  variable, which :class:`~.openapi.StructSchemas` adds to its schema, and the command's
  decision refuses exactly the requests it excludes.
- What depends on the server's state (an unknown id, a provider that takes no key) cannot
  be in the document: such a refusal is a documented 404 or 409, never a 400.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

__all__ = ["GOAL", "GOAL_COMMAND_OR_NONE", "LADDER_MAX_S", "NOT_BLANK", "SPACE", "AbsolutePath",
           "GoalText", "LadderSeconds", "NonBlank", "pattern", "words_for"]

_WORDS: dict[str, str] = {}


def pattern(regex: str, words: str) -> str:
    """``regex``, remembered with the ``words`` a request that does not match it is told."""
    # Litestar cuts msgspec's message at its first " - " (before "at `$.field`")
    assert " - " not in regex, regex
    assert _WORDS.setdefault(regex, words) == words, f"{regex!r} has other words already"
    return regex


def words_for(message: str) -> str:
    """msgspec's message about a value, or the words of the pattern it names."""
    prefix = "Expected `str` matching regex "
    if message.startswith(prefix):
        for regex, words in _WORDS.items():
            if message == prefix + repr(regex):
                return words
    return message


#: the characters ``str.strip()`` takes away (``str.isspace``), for a character class
SPACE = (r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f"
         r"\u205f\u3000")

#: at least one character that is not white space (what ``.strip()`` leaves)
NOT_BLANK = pattern(f"[^{SPACE}]", "must not be empty")
NonBlank = Annotated[str, msgspec.Meta(
    pattern=NOT_BLANK, description="Not empty: at least one character that is not white space.")]

#: a folder on the worker, from its root
AbsolutePath = Annotated[str, msgspec.Meta(
    pattern=pattern(r"^/", "must be an absolute path"),
    description="An absolute path on the worker.")]

#: the longest step of the attention ladder (``set_attention`` refuses more)
LADDER_MAX_S = 30 * 86400
LadderSeconds = Annotated[float, msgspec.Meta(
    ge=0, le=LADDER_MAX_S, description="Seconds, 0 to 30 days.")]

#: a session's goal (``/goal``): none (white space), a condition, or ``$`` and a command — not
#: a ``$`` alone
GOAL = pattern(f"^[{SPACE}]*([^{SPACE}$]|\\$[{SPACE}]*[^{SPACE}]|$)",
               "a command goal needs its command, e.g. $ pytest -q")
GoalText = Annotated[str, msgspec.Meta(
    pattern=GOAL, description="`$ argv`: a command that must exit 0 in the session's sandbox; "
                              "anything else: a condition the model proves with goal_met.")]
#: a goal that is a command, or none (what an external agent's session may have)
GOAL_COMMAND_OR_NONE = f"^[{SPACE}]*(\\$|$)"
