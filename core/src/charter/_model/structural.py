"""`Protocol`, `runtime_checkable` and `NamedTuple` for run time, without importing typing.

Importing `typing` costs a fresh process about 5 ms (it builds its special forms and compiles
regular expressions), and a process that lives for one decision (a hook call, whose lifetime
is the user's wait) needs none of it: annotations are never evaluated. Charter's modules
import typing only for the type checker::

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import Any, Protocol, runtime_checkable
    else:
        from charter._model.structural import Protocol, runtime_checkable

To the type checker these are typing's own. At run time:

- a class with `Protocol` among its bases is a protocol; a `runtime_checkable` one answers
  isinstance structurally, as typing's does: an object is an instance when it has every
  member the protocol declares (its methods, and its annotated attributes), and no method
  member of it is None. isinstance against a protocol that is not runtime checkable raises
  TypeError, and so does instantiating a protocol. Subclasses that do not list `Protocol`
  are ordinary classes (nominal checks).
- a class with `NamedTuple` as its base is a `collections.namedtuple` of its annotated
  fields (in order, with the defaults given in the body) and keeps the body's methods.
"""

from __future__ import annotations

from abc import ABCMeta

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["NamedTuple", "Protocol", "runtime_checkable"]

# Names a class body always has, which are no protocol member.
_NOT_MEMBERS = frozenset(
    {
        "__abstractmethods__",
        "__annotations__",
        "__dict__",
        "__doc__",
        "__init__",
        "__module__",
        "__new__",
        "__qualname__",
        "__slots__",
        "__subclasshook__",
        "__weakref__",
        "_is_protocol",
        "_is_runtime_protocol",
        "_members",
    }
)


_BASE: list[type] = []  # Protocol, once made


class _ProtocolMeta(ABCMeta):
    # ABCMeta, as typing's protocols have: a store may also derive from an ABC.
    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> None:
        super().__init__(name, bases, namespace)
        if not _BASE:
            _BASE.append(cls)
        base = _BASE[0]
        cls._is_protocol = cls is base or base in bases
        cls._is_runtime_protocol = False
        members: set[str] = set()
        if cls._is_protocol:
            for klass in cls.__mro__:
                if klass is not base and vars(klass).get("_is_protocol", False):
                    members.update(
                        name
                        for name in (*vars(klass), *vars(klass).get("__annotations__", {}))
                        if name not in _NOT_MEMBERS and not name.startswith("_abc_")
                    )
        cls._members = frozenset(members)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls._is_protocol:
            raise TypeError("Protocols cannot be instantiated")
        return super().__call__(*args, **kwargs)

    def __instancecheck__(cls, instance: object) -> bool:
        if not cls._is_protocol:
            return super().__instancecheck__(instance)
        if not cls._is_runtime_protocol:
            raise TypeError(
                "Instance and class checks can only be used with @runtime_checkable protocols"
            )
        if super().__instancecheck__(instance):
            return True
        for name in cls._members:
            if not hasattr(instance, name):
                return False
            if callable(getattr(cls, name, None)) and getattr(instance, name) is None:
                return False
        return True


class Protocol(metaclass=_ProtocolMeta):
    """Base of a protocol class (see the module docstring)."""

    __slots__ = ()
    _is_protocol: bool
    _is_runtime_protocol: bool
    _members: frozenset[str]


def runtime_checkable(cls: type) -> type:
    """Let isinstance check `cls`, a protocol, structurally. Raises TypeError otherwise."""
    if not getattr(cls, "_is_protocol", False):
        raise TypeError(f"@runtime_checkable can only be applied to protocol classes, not {cls!r}")
    cls._is_runtime_protocol = True  # type: ignore[attr-defined]
    return cls


class _NamedTupleMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not bases:  # NamedTuple itself
            return super().__new__(mcs, name, bases, namespace)
        from collections import namedtuple

        fields = list(namespace.get("__annotations__", {}))
        defaults = [namespace[field] for field in fields if field in namespace]
        make: Any = namedtuple  # its fields are only known here, not to the type checker
        made = make(name, fields, defaults=defaults, module=namespace.get("__module__"))
        for key, value in namespace.items():
            if key not in fields and key not in ("__annotations__", "__module__", "__qualname__"):
                setattr(made, key, value)
        made.__qualname__ = namespace.get("__qualname__", name)
        return made


class NamedTuple(metaclass=_NamedTupleMeta):
    """Base of a named tuple class (see the module docstring)."""
