"""Request fields with their rules in their types (codey_server.http.fields): the patterns mean
what the server's own checks mean, character for character."""

from __future__ import annotations

import re
import sys

from hypothesis import given
from hypothesis import strategies as st

from codey_server.http.fields import NOT_BLANK, SPACE, pattern, words_for


def test_space_is_what_strip_takes_away() -> None:
    # spelt out because Python's, ECMA-262's and hypothesis's \s are three different sets
    # (hypothesis generated "\x1d" for \S, which Python's re and str.strip call white space)
    everything = (chr(c) for c in range(sys.maxunicode + 1))
    spaces = {c for c in everything if c.isspace()}
    assert {c for c in spaces if re.fullmatch(f"[{SPACE}]", c)} == spaces
    assert not re.fullmatch(f"[{SPACE}]", "\ufeff")  # ECMA's \s has it, strip() keeps it


@given(st.text(alphabet=st.sampled_from(" \t\n\x1c\x1d\x85\xa0\u3000\ufeffa.")))
def test_not_blank_is_what_strip_leaves_something_of(text: str) -> None:
    assert bool(re.search(NOT_BLANK, text)) == bool(text.strip())


def test_a_pattern_keeps_its_words() -> None:
    regex = pattern("^x+$", "only x, please")
    assert words_for(f"Expected `str` matching regex {regex!r}") == "only x, please"
    assert words_for("Expected `str` of length >= 1") == "Expected `str` of length >= 1"
