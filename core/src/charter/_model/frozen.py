"""`Frozen`: immutable value classes without the cost of creating a dataclass at import.

Creating a dataclass generates and compiles its methods when the module is imported, which
every short-lived process (a hook call) pays again. A subclass of `Frozen` lists its
fields in ``__slots__`` and sets them in its own ``__init__`` with ``object.__setattr__``;
it compares, hashes and prints by those fields, in that order, as a frozen dataclass does,
and refuses assignment after ``__init__``. Use it only where nothing needs
`dataclasses.replace`, `fields` or `asdict`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Frozen"]


class Frozen:
    """Base of an immutable slotted value class (see the module docstring)."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of {type(self).__name__}")

    # copy and pickle restore the fields through these, not through __setattr__.
    def __getstate__(self) -> tuple[Any, ...]:
        return self._values()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            object.__setattr__(self, name, value)
