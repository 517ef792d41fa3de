"""One table from action type to executor (``actions._EXECUTORS``): every action the server
can send has an entry, and what Hello announces is read from it."""

from __future__ import annotations

import typing

import msgspec.inspect as mi

from codey_protocol.worker import ActionMessage, ListDir, ReadFile, RunCommand
from codey_worker import actions


def test_every_action_has_one_executor() -> None:
    assert set(actions._EXECUTORS) == set(typing.get_args(ActionMessage))


def test_hello_announces_the_tables_actions() -> None:
    tags = []
    for cls in typing.get_args(ActionMessage):
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        tags.append(info.tag)
    assert sorted(actions.EXECUTORS) == sorted(tags)


def test_what_the_table_says_of_a_few() -> None:
    read = actions._EXECUTORS[ReadFile]
    assert (read.recorded, read.changes_workdir, read.threaded) == (False, False, True)
    run = actions._EXECUTORS[RunCommand]
    assert (run.recorded, run.changes_workdir, run.threaded) == (True, True, False)
    assert not actions._EXECUTORS[ListDir].recorded
