"""Reading LlamaIndex objects: what the translation sees is what getattr would give."""

from __future__ import annotations

from typing import Any

import pytest
from charter_llamaindex import _translate as tr
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.tools import ToolOutput
from llama_index.core.workflow import Event
from pydantic import BaseModel, ConfigDict, PrivateAttr


class _Reply(BaseModel):
    text: str = "hi"
    _secret_note: str = PrivateAttr(default="kept")

    @property
    def shout(self) -> str:
        return self.text.upper()


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Plain:
    def __init__(self) -> None:
        self.anything = 1


def _objects() -> list[Any]:
    return [
        _Reply(),
        _Open(extra_field=3),
        _Plain(),
        Event(tool_id="call-1"),  # a workflow event answers its own names from its data
        TextBlock(text="hello"),
        ToolCallBlock(tool_call_id="c", tool_name="t", tool_kwargs={"a": 1}),
        ChatMessage(role="assistant", content="x"),
        ToolOutput(content="c", tool_name="t", raw_input={}, raw_output="c"),
        None,
    ]


_NAMES = [
    "text",
    "shout",
    "_secret_note",
    "extra_field",
    "anything",
    "tool_id",
    "tool_name",
    "tool_kwargs",
    "content",
    "blocks",
    "exception",
    "missing",
]


@pytest.mark.parametrize("index", range(len(_objects())))
def test_attribute_answers_what_getattr_answers(index: int) -> None:
    obj = _objects()[index]
    for name in _NAMES:
        assert tr.attribute(obj, name) == getattr(obj, name, None), (type(obj).__name__, name)


@pytest.mark.parametrize(
    ("obj", "name", "expected"),
    [
        (_Reply(), "shout", "HI"),
        (_Reply(), "_secret_note", "kept"),
        (_Open(extra_field=3), "extra_field", 3),
        (Event(tool_id="call-1"), "tool_id", "call-1"),
    ],
)
def test_attribute_reads_properties_private_and_extra_fields(
    obj: Any, name: str, expected: Any
) -> None:
    assert tr.attribute(obj, name) == expected


def test_a_message_of_blocks_is_read_whole() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="looking it up"),
            ToolCallBlock(tool_call_id="c1", tool_name="get_weather", tool_kwargs={"city": "x"}),
        ],
    )
    got = tr.message(message)
    assert got["content"] == "looking it up"
    assert got["tool_calls"] == [{"id": "c1", "name": "get_weather", "args": {"city": "x"}}]
