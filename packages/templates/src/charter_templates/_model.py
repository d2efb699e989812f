"""The vocabulary (kinds, verbs, effect classes) and the parsed, immutable form of templates.

Nothing here reads YAML: `_load` builds these objects and `_resolve` walks them, so importing the
package stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

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


@dataclass(frozen=True, slots=True)
class Resolution:
    """How one framework event maps onto a behavior.

    `properties` is a fresh JSON-safe dict per call (only str, int, float, bool, None, dict and
    list inside); it always holds ``tool.name`` (the name as given) and ``tool.effect``.
    Unpacks as ``kind, verb, properties, effect = resolution``.
    """

    kind: str
    verb: str | None
    properties: dict[str, Any]
    effect: str

    def __iter__(self) -> Iterator[Any]:
        return iter((self.kind, self.verb, self.properties, self.effect))


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


@dataclass(frozen=True, slots=True)
class PropSpec:
    """Where values go in `properties`: picked from string args, derived from them, or fixed;
    plus `field_trust`, the trust level of parts of the tool's output by path relative to it
    (``emails[*].sender: internal``), put at ``properties.data.field_trust``.

    Keys are dotted paths; a path appears in at most one of the three maps.
    """

    picks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    derives: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    sets: Mapping[str, Scalar] = field(default_factory=dict)
    field_trust: Mapping[str, str] = field(default_factory=dict)

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


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """An exact tool name's behavior; `effect` None means the default for (kind, verb)."""

    kind: str
    verb: str | None
    effect: str | None
    props: PropSpec


@dataclass(frozen=True, slots=True)
class Rule:
    """A word rule: matches when one of `words` occurs in the name (no words: any name).

    With `from_name` the verb comes from the name's verb words (else `default_verb`); the rule
    does not match when that verb is missing or not in `only_verbs`, so later rules get a turn.
    """

    name: str
    words: Words
    kind: str
    verb: str | None
    from_name: bool
    default_verb: str | None
    only_verbs: frozenset[str]
    effect: str | None
    props: PropSpec


@dataclass(frozen=True, slots=True)
class Pattern:
    """A name pattern: the `resolve` group of `regex` is resolved again with template `via`."""

    name: str
    regex: re.Pattern[str]
    resolve: str
    via: str | None
    groups: Mapping[str, str]
    props: PropSpec


@dataclass(frozen=True, slots=True)
class Template:
    """One integration's parsed template; `extends` names the template tried when none matches."""

    integration: str
    extends: str | None
    props: PropSpec
    tools: Mapping[str, ToolEntry]
    patterns: tuple[Pattern, ...]
    rules: tuple[Rule, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The verb words shared by all templates, most consequential verb first."""

    verbs: tuple[tuple[str, Words], ...]
    chain_words: Words
