"""``samples.sample`` builds a valid value of every protocol type it is given."""

from __future__ import annotations

import typing
from collections.abc import Callable

import msgspec
import pytest

from codey_protocol import events as ev
from codey_protocol import state as st
from codey_testkit.errors import SampleError, TestkitError
from codey_testkit.samples import sample, sample_struct


@pytest.mark.parametrize("cls", [*typing.get_args(ev.Item), *typing.get_args(ev.Event),
                                 st.State, st.SessionInfo])
def test_a_sampled_struct_survives_validation(cls: type[msgspec.Struct]) -> None:
    value = sample_struct(cls)
    assert msgspec.json.decode(msgspec.json.encode(value), type=cls) == value


def test_samples_follow_the_type_and_vary_with_n() -> None:
    assert sample(int | None, 2) == 42
    status = sample(ev.ToolStatus)
    assert status in typing.get_args(ev.ToolStatus) and status != "pending"  # not the default
    assert sample(bool) is True
    assert sample(str, 1) != sample(str, 2)
    files = sample(list[ev.FileChange] | None)
    assert isinstance(files, list) and isinstance(files[0], ev.FileChange)
    assert sample_struct(ev.ToolCall, id="x").id == "x"


@pytest.mark.parametrize("tp", [bytes, typing.Callable[[], None]])
def test_an_unknown_type_is_a_testkit_error(tp: Callable[[], None]) -> None:
    with pytest.raises(SampleError) as err:
        sample(tp)
    assert isinstance(err.value, TestkitError)
