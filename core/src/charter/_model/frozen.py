"""`Frozen`: immutable value classes without the cost of creating a dataclass at import.

Creating a dataclass generates and compiles its methods when the module is imported (about
0.7 ms a class), and importing `dataclasses` imports `inspect`: every short-lived process (a
hook call) pays that again. A subclass of `Frozen` lists its fields in ``__slots__`` and
sets them in its own ``__init__`` with ``object.__setattr__`` (or, for a class built on
every step, with `slot_setters`); it compares, hashes and prints
by those fields, as a frozen dataclass does (printed in ``__init__``'s parameter order), and
refuses assignment after ``__init__`` with `dataclasses.FrozenInstanceError`. Names in a
class's ``_UNCOMPARED`` are fields that equality, hashing and printing leave out (a
dataclass's ``compare=False, repr=False``).

`replace(**changes)` does what `dataclasses.replace` does, and a Frozen class is still a
dataclass to the `dataclasses` module: `dataclasses.fields`, `replace`, `asdict` and
`is_dataclass` work on it, through a ``__dataclass_fields__`` built on first
use from ``__init__``'s parameters (so only code that asks imports `dataclasses`). Every
``__init__`` parameter is a field and keeps its default; a slot that is not a parameter is a
field with ``init=False`` (`replace` keeps what ``__init__`` computes for it).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from dataclasses import Field
    from typing import Any, ClassVar, Self

__all__ = ["Frozen", "slot_setters"]

_PARAMETERS: dict[type, tuple[str, ...]] = {}
_ORDER: dict[type, tuple[str, ...]] = {}
_COMPARED: dict[type, tuple[str, ...]] = {}
_FIELDS: dict[type, dict[str, Any]] = {}


def _parameters(cls: type) -> tuple[str, ...]:
    """The names of ``cls.__init__``'s parameters after ``self`` (positional, then keyword)."""
    names = _PARAMETERS.get(cls)
    if names is None:
        code = getattr(getattr(cls, "__init__", None), "__code__", None)
        count = 0 if code is None else code.co_argcount + code.co_kwonlyargcount
        names = _PARAMETERS[cls] = () if code is None else tuple(code.co_varnames[1:count])
    return names


def _order(cls: type) -> tuple[str, ...]:
    """`cls`'s slots, ``__init__``'s parameters first and in their order."""
    order = _ORDER.get(cls)
    if order is None:
        slots = [
            name for klass in reversed(cls.__mro__) for name in klass.__dict__.get("__slots__", ())
        ]
        params = [name for name in _parameters(cls) if name in slots]
        order = _ORDER[cls] = (*params, *(name for name in slots if name not in params))
    return order


def _compared(cls: type) -> tuple[str, ...]:
    """`_order` without the class's ``_UNCOMPARED`` names."""
    names = _COMPARED.get(cls)
    if names is None:
        hidden = getattr(cls, "_UNCOMPARED", ())
        names = _COMPARED[cls] = tuple(name for name in _order(cls) if name not in hidden)
    return names


class _DataclassFields:
    """``__dataclass_fields__`` of a Frozen subclass, built on first access."""

    def __get__(self, instance: object, owner: type) -> dict[str, Any]:
        fields = _FIELDS.get(owner)
        if fields is None:
            if owner is Frozen:
                raise AttributeError("__dataclass_fields__")
            fields = _FIELDS[owner] = _build_fields(owner)
        return fields


def _build_fields(cls: type) -> dict[str, Any]:
    # A shadow dataclass with the same fields makes the Field objects through the public
    # API; `replace` then builds the real class from them.
    import dataclasses
    import inspect

    params = inspect.signature(getattr(cls, "__init__")).parameters  # noqa: B009
    spec: list[tuple[str, type, Any]] = []
    for name in _order(cls):
        param = params.get(name)
        if param is None:
            spec.append((name, object, dataclasses.field(init=False, default=None)))
        elif param.default is param.empty:
            spec.append((name, object, dataclasses.field()))
        else:
            # A factory: dataclasses refuses a mutable plain default; reported plain below.
            spec.append((name, object, dataclasses.field(default_factory=_constant(param.default))))
    shadow = dataclasses.make_dataclass(cls.__name__, spec, frozen=True, kw_only=True)
    fields: dict[str, Any] = getattr(shadow, "__dataclass_fields__")  # noqa: B009
    for field in fields.values():
        if field.default_factory is not dataclasses.MISSING:
            # Report the plain default, as the class's own signature has it.
            field.default, field.default_factory = field.default_factory(), dataclasses.MISSING
    return fields


def _constant(value: object) -> Callable[[], object]:
    return lambda: value


class Frozen:
    """Base of an immutable slotted value class (see the module docstring)."""

    __slots__: tuple[str, ...] = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]] = _DataclassFields()  # type: ignore[assignment]

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` (field name -> value) applied, built by ``__init__`` (so
        checked as a new value is). Raises TypeError for a name that is not a field."""
        cls = type(self)
        values = {name: getattr(self, name) for name in _parameters(cls)}
        if not changes.keys() <= values.keys():
            unknown = sorted(changes.keys() - values.keys())[0]
            raise TypeError(f"{cls.__name__} has no field {unknown!r}")
        values.update(changes)
        return cls(**values)

    __replace__ = replace  # copy.replace (Python 3.13)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _order(type(self)))

    def _compared_values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _compared(type(self)))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self._compared_values() == other._compared_values()

    def __hash__(self) -> int:
        return hash(self._compared_values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _compared(type(self)))
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r} of {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r} of {type(self).__name__}")

    # copy and pickle restore the fields through these, not through __setattr__.
    def __getstate__(self) -> tuple[Any, ...]:
        return self._values()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(_order(type(self)), state, strict=True):
            object.__setattr__(self, name, value)


def slot_setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of `names`, slots of `cls` itself, for its ``__init__`` to fill them with.

    ``object.__setattr__`` finds the slot's descriptor on every call; its own ``__set__``
    stores at once, which makes building a value class with a handful of fields about a
    third cheaper (measured on the step descriptions built for every gated step). Raises
    KeyError for a name that is not a slot of `cls` itself.
    """
    return tuple(vars(cls)[name].__set__ for name in names)
