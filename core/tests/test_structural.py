"""The run-time Protocol and NamedTuple answer as typing's do, without importing typing."""

from __future__ import annotations

import subprocess
import sys
import typing
from abc import ABC, abstractmethod

import pytest
from charter import AuditStore, HistoryIndex
from charter._model import structural


def _protocols(module: typing.Any) -> tuple[type, type, type]:
    @module.runtime_checkable
    class Store(module.Protocol):
        location: str

        def append(self, entries: list[int]) -> list[int]: ...

    class Plain(module.Protocol):
        def add(self, step: int) -> None: ...

    class Named(Store):  # a subclass that does not list Protocol: an ordinary class
        location = "x"

        def append(self, entries: list[int]) -> list[int]:
            return entries

    return Store, Plain, Named


class _Full:
    location = "here"

    def append(self, entries: list[int]) -> list[int]:
        return entries


class _NoAttribute:
    def append(self, entries: list[int]) -> list[int]:
        return entries


class _MethodIsNone:
    location = "here"
    append = None


class _Attribute:
    def __init__(self) -> None:
        self.location = "set on the instance"

    def append(self, entries: list[int]) -> list[int]:
        return entries


_CANDIDATES = [_Full(), _NoAttribute(), _MethodIsNone(), _Attribute(), object(), 3, "text"]


@pytest.mark.parametrize("candidate", _CANDIDATES, ids=lambda c: type(c).__name__)
def test_isinstance_is_typings_answer(candidate: object) -> None:
    ours, theirs = _protocols(structural), _protocols(typing)
    assert isinstance(candidate, ours[0]) == isinstance(candidate, theirs[0])
    assert isinstance(candidate, ours[2]) == isinstance(candidate, theirs[2])
    assert isinstance(ours[2](), ours[0]) and isinstance(theirs[2](), theirs[0])
    for plain in (ours[1], theirs[1]):
        with pytest.raises(TypeError, match="runtime_checkable"):
            isinstance(candidate, plain)


def test_runtime_checkable_refuses_a_class_that_is_not_a_protocol() -> None:
    with pytest.raises(TypeError, match="protocol"):
        structural.runtime_checkable(int)


def test_a_store_may_also_be_an_abc() -> None:
    class Closing(ABC):
        @abstractmethod
        def close(self) -> None: ...

    class Store(AuditStore, Closing):  # type: ignore[misc]
        location = "memory"

        def close(self) -> None:
            pass

    assert isinstance(Store(), AuditStore)
    assert issubclass(Store, Closing)
    with pytest.raises(TypeError):
        HistoryIndex()  # type: ignore[misc]  # as typing's, a protocol is not instantiated


class _Point(structural.NamedTuple):
    """A point."""

    x: int
    y: int = 0

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


class _TypingPoint(typing.NamedTuple):
    """A point."""

    x: int
    y: int = 0

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


def test_named_tuples_are_typings() -> None:
    ours, theirs = _Point(3, -4), _TypingPoint(3, -4)
    assert tuple(ours) == tuple(theirs) and ours._fields == theirs._fields == ("x", "y")
    assert ours.norm() == theirs.norm() == 7
    assert _Point(1) == (1, 0) and _Point._field_defaults == _TypingPoint._field_defaults
    assert repr(ours) == "_Point(x=3, y=-4)" and ours._replace(y=1) == (3, 1)
    assert _Point.__doc__ == "A point." and _Point.__module__ == __name__
    assert _Point.__qualname__ == "_Point"


def test_charter_does_not_import_typing() -> None:
    code = (
        "import sys, charter.integration, charter._audit.location, charter._runtime.writer\n"
        "print('typing' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
