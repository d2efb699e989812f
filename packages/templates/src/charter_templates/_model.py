"""The vocabulary (kinds, verbs, effect classes) and the parsed, immutable form of templates.

Nothing here reads YAML: `_load` builds these objects and `_resolve` walks them, so importing the
package stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeAlias

KINDS: tuple[str, ...] = (
    "task.start",
    "task.end",
    "task.error",
    "task.idle",
    "step.model",
    "step.exec",
    "step.resource",
    "step.message",
    "step.credential",
    "step.self",
    "step.gate",
    "step.unknown",
)

VERBS: tuple[str, ...] = ("GET", "POST", "PATCH", "DELETE")

# Kind -> the verbs it takes; a kind missing here takes no verb at all (verb None).
VALID_VERBS: Mapping[str, frozenset[str]] = {
    "step.resource": frozenset(VERBS),
    "step.credential": frozenset(VERBS),
    "step.self": frozenset(VERBS),
    "step.message": frozenset({"GET", "POST"}),
}

EFFECT_CLASSES: tuple[str, ...] = ("none", "read_only", "idempotent", "non_idempotent")

# Kinds without a verb whose effect is not "none": running code and unknown tools are assumed to
# change the world in ways that cannot be repeated safely.
_DANGEROUS_VERBLESS = frozenset({"step.exec", "step.unknown"})

_EFFECT_BY_VERB: Mapping[str, str] = {
    "GET": "read_only",
    "POST": "non_idempotent",
    "PATCH": "idempotent",
    "DELETE": "idempotent",
}

Scalar: TypeAlias = str | int | float | bool | None
Words: TypeAlias = tuple[tuple[str, ...], ...]  # each entry is a phrase: a run of tokens


def is_valid_pair(kind: str, verb: str | None) -> bool:
    """True when `kind` is one of the 12 kinds and takes `verb` (None for verbless kinds)."""
    if kind not in KINDS:
        return False
    allowed = VALID_VERBS.get(kind)
    if allowed is None:
        return verb is None
    return verb in allowed


def default_effect(kind: str, verb: str | None) -> str:
    """The effect class of a behavior whose template names none; defined for every valid pair."""
    if verb is not None:
        return _EFFECT_BY_VERB[verb]
    return "non_idempotent" if kind in _DANGEROUS_VERBLESS else "none"


class TemplateError(ValueError):
    """A template file is malformed; the message names the file, the entry and the key at fault.

    `file` is the file as it was named to `load_templates`, `where` the dotted entry path inside
    it (``tools.Bash.kind``), or None for problems with the file as a whole.
    """

    def __init__(self, message: str, *, file: str, where: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.where = where


class _Frozen:
    """An immutable record: slots set once in ``__init__``, then equal, hashable, printable
    and picklable by value like a frozen dataclass.

    (Plain slotted classes, not dataclasses: creating a dataclass runs generated code at
    import, and the Claude Code hook imports this package in every fresh process.)
    """

    __slots__ = ()
    # The fields in `__init__`'s order (the slots are sorted): equality, hashing, printing
    # and pickling follow it, as a dataclass's would.
    _fields: ClassVar[tuple[str, ...]] = ()

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__ or not isinstance(other, _Frozen):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._values())


_set = object.__setattr__


class Resolution(_Frozen):
    """How one framework event maps onto a behavior.

    `properties` is a fresh JSON-safe dict per call (only str, int, float, bool, None, dict and
    list inside); it always holds ``tool.name`` (the name as given) and ``tool.effect``.
    Unpacks as ``kind, verb, properties, effect = resolution``. Immutable.
    """

    __slots__ = ("effect", "kind", "properties", "verb")
    _fields = ("kind", "verb", "properties", "effect")
    kind: str
    verb: str | None
    properties: dict[str, Any]
    effect: str

    def __init__(self, kind: str, verb: str | None, properties: dict[str, Any], effect: str):
        _put_kind(self, kind)
        _put_verb(self, verb)
        _put_properties(self, properties)
        _put_effect(self, effect)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.kind, self.verb, self.properties, self.effect))


# Each slot's own setter: one is built per tool call, and `object.__setattr__` looks the
# slot's descriptor up on every call (about a third of building one).
_put_kind, _put_verb, _put_properties, _put_effect = (
    vars(Resolution)[name].__set__ for name in ("kind", "verb", "properties", "effect")
)


# Trust levels of output content (charter's `Trust`; the template package does not import
# charter). ``trusted`` reads as internal and ``untrusted`` as external.
TRUST_WORDS: tuple[str, ...] = (
    "user",
    "operator",
    "internal",
    "external",
    "trusted",
    "untrusted",
)


class PropSpec(_Frozen):
    """Where values go in `properties`: picked from string args, derived from them, or fixed;
    plus `field_trust`, the trust level of parts of the tool's output by path relative to it
    (``emails[*].sender: internal``), put at ``properties.data.field_trust``.

    Keys are dotted paths; a path appears in at most one of the three maps.
    """

    __slots__ = ("arg_names", "derives", "field_trust", "picks", "sets")
    _fields = ("picks", "derives", "sets", "field_trust")
    picks: Mapping[str, tuple[str, ...]]
    derives: Mapping[str, tuple[str, tuple[str, ...]]]
    sets: Mapping[str, Scalar]
    field_trust: Mapping[str, str]
    #: Every argument name a pick or a derive reads (derived from them, not a field).
    arg_names: frozenset[str]

    def __init__(
        self,
        picks: Mapping[str, tuple[str, ...]] | None = None,
        derives: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
        sets: Mapping[str, Scalar] | None = None,
        field_trust: Mapping[str, str] | None = None,
    ) -> None:
        _set(self, "picks", {} if picks is None else picks)
        _set(self, "derives", {} if derives is None else derives)
        _set(self, "sets", {} if sets is None else sets)
        _set(self, "field_trust", {} if field_trust is None else field_trust)
        read = [name for names in self.picks.values() for name in names]
        read += [name for _, names in self.derives.values() for name in names]
        _set(self, "arg_names", frozenset(read))

    def paths(self) -> set[str]:
        return set(self.picks) | set(self.derives) | set(self.sets)

    def merged(self, over: PropSpec) -> PropSpec:
        """`self` with every path of `over` replaced by `over`'s definition of it (output
        paths of `field_trust` too)."""
        taken = over.paths()
        return PropSpec(
            picks={**{k: v for k, v in self.picks.items() if k not in taken}, **over.picks},
            derives={**{k: v for k, v in self.derives.items() if k not in taken}, **over.derives},
            sets={**{k: v for k, v in self.sets.items() if k not in taken}, **over.sets},
            field_trust={**self.field_trust, **over.field_trust},
        )


class ToolEntry(_Frozen):
    """An exact tool name's behavior; `effect` None means the default for (kind, verb)."""

    __slots__ = ("effect", "kind", "props", "verb")
    _fields = ("kind", "verb", "effect", "props")
    kind: str
    verb: str | None
    effect: str | None
    props: PropSpec

    def __init__(self, kind: str, verb: str | None, effect: str | None, props: PropSpec):
        _set(self, "kind", kind)
        _set(self, "verb", verb)
        _set(self, "effect", effect)
        _set(self, "props", props)


class Rule(_Frozen):
    """A word rule: matches when one of `words` occurs in the name (no words: any name).

    With `from_name` the verb comes from the name's verb words (else `default_verb`); the rule
    does not match when that verb is missing or not in `only_verbs`, so later rules get a turn.
    """

    __slots__ = (
        "default_verb",
        "effect",
        "from_name",
        "kind",
        "name",
        "only_verbs",
        "props",
        "verb",
        "words",
    )
    _fields = (
        "name",
        "words",
        "kind",
        "verb",
        "from_name",
        "default_verb",
        "only_verbs",
        "effect",
        "props",
    )
    name: str
    words: Words
    kind: str
    verb: str | None
    from_name: bool
    default_verb: str | None
    only_verbs: frozenset[str]
    effect: str | None
    props: PropSpec

    def __init__(
        self,
        name: str,
        words: Words,
        kind: str,
        verb: str | None,
        from_name: bool,
        default_verb: str | None,
        only_verbs: frozenset[str],
        effect: str | None,
        props: PropSpec,
    ) -> None:
        _set(self, "name", name)
        _set(self, "words", words)
        _set(self, "kind", kind)
        _set(self, "verb", verb)
        _set(self, "from_name", from_name)
        _set(self, "default_verb", default_verb)
        _set(self, "only_verbs", only_verbs)
        _set(self, "effect", effect)
        _set(self, "props", props)


class Pattern(_Frozen):
    """A name pattern: the `resolve` group of `regex` is resolved again with template `via`."""

    __slots__ = ("groups", "name", "props", "regex", "resolve", "via")
    _fields = ("name", "regex", "resolve", "via", "groups", "props")
    name: str
    regex: re.Pattern[str]
    resolve: str
    via: str | None
    groups: Mapping[str, str]
    props: PropSpec

    def __init__(
        self,
        name: str,
        regex: re.Pattern[str],
        resolve: str,
        via: str | None,
        groups: Mapping[str, str],
        props: PropSpec,
    ) -> None:
        _set(self, "name", name)
        _set(self, "regex", regex)
        _set(self, "resolve", resolve)
        _set(self, "via", via)
        _set(self, "groups", groups)
        _set(self, "props", props)


class Template(_Frozen):
    """One integration's parsed template; `extends` names the template tried when none matches."""

    __slots__ = ("extends", "integration", "patterns", "props", "rules", "sources", "tools")
    _fields = ("integration", "extends", "props", "tools", "patterns", "rules", "sources")
    integration: str
    extends: str | None
    props: PropSpec
    tools: Mapping[str, ToolEntry]
    patterns: tuple[Pattern, ...]
    rules: tuple[Rule, ...]
    sources: tuple[str, ...]

    def __init__(
        self,
        integration: str,
        extends: str | None,
        props: PropSpec,
        tools: Mapping[str, ToolEntry],
        patterns: tuple[Pattern, ...],
        rules: tuple[Rule, ...],
        sources: tuple[str, ...],
    ) -> None:
        _set(self, "integration", integration)
        _set(self, "extends", extends)
        _set(self, "props", props)
        _set(self, "tools", tools)
        _set(self, "patterns", patterns)
        _set(self, "rules", rules)
        _set(self, "sources", sources)


class Vocabulary(_Frozen):
    """The verb words shared by all templates, most consequential verb first."""

    __slots__ = ("chain_words", "verbs")
    _fields = ("verbs", "chain_words")
    verbs: tuple[tuple[str, Words], ...]
    chain_words: Words

    def __init__(self, verbs: tuple[tuple[str, Words], ...], chain_words: Words) -> None:
        _set(self, "verbs", verbs)
        _set(self, "chain_words", chain_words)
