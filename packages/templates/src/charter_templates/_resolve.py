"""Interpreting parsed templates: from (integration, tool name, args) to a Resolution."""

from __future__ import annotations

from collections.abc import Mapping

from ._model import (
    PropSpec,
    Resolution,
    Rule,
    Template,
    Vocabulary,
    default_effect,
)
from ._words import contains_any, find, split_words

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

GENERIC = "generic"

# Patterns re-resolve part of a name; a user pattern that matches its own output must not
# recurse forever, and no real name nests deeper than this.
_MAX_DEPTH = 8
# Tool names are a small vocabulary per agent; the bound only stops a hostile stream of
# random names from growing the memo without limit.
_MAX_REMEMBERED = 4096


class TemplateSet:
    """An immutable, validated set of templates, one per integration, plus the verb words.

    Built by `load_templates`; pass one to `resolve(..., overrides=...)` or call its own
    `resolve`. Every set holds a ``generic`` template, used for integrations without their own.
    """

    __slots__ = ("_chosen", "_decisions", "_templates", "_vocabulary")

    def __init__(self, templates: Mapping[str, Template], vocabulary: Vocabulary) -> None:
        self._templates = dict(templates)
        self._vocabulary = vocabulary
        # Which word rule a name matches depends on the name alone, never on the arguments,
        # and matching every rule's words is the costly part of a resolve: remember it, with
        # the property spec the rule gives (the template's merged with the rule's).
        self._decisions: dict[tuple[str, str], tuple[Rule, str | None, PropSpec] | None] = {}
        # The template each integration name given resolves with (a handful per process;
        # normalising the name cost as much as the rest of a remembered name's lookup).
        self._chosen: dict[str, Template] = {}

    @property
    def integrations(self) -> tuple[str, ...]:
        """The integrations with a template of their own, sorted."""
        return tuple(sorted(self._templates))

    @property
    def sources(self) -> tuple[str, ...]:
        """The files this set was read from, built-in files first."""
        seen: dict[str, None] = {}
        for template in self._templates.values():
            seen.update(dict.fromkeys(template.sources))
        return tuple(seen)

    def _template_for(self, integration: object) -> Template:
        """The template `integration` resolves with: its own, else the generic one."""
        if not isinstance(integration, str):
            return self._templates[GENERIC]
        found = self._chosen.get(integration)
        if found is None:
            key = _integration_key(integration)
            found = self._templates.get(key) or self._templates[GENERIC]
            if len(self._chosen) < _MAX_REMEMBERED:
                self._chosen[integration] = found
        return found

    def resolve(
        self, integration: str, name: str, args: Mapping[str, Any] | None = None
    ) -> Resolution:
        """See `charter_templates.resolve`; never raises, whatever `name` and `args` hold."""
        text = name if isinstance(name, str) else ""
        picked_args: Mapping[str, Any] = (
            args if type(args) is dict or isinstance(args, Mapping) else {}
        )
        return self._resolve(self._template_for(integration), text, picked_args, 0)

    def __repr__(self) -> str:
        return f"TemplateSet(integrations={list(self.integrations)!r})"

    def _resolve(
        self, template: Template, name: str, args: Mapping[str, Any], depth: int
    ) -> Resolution:
        current: Template | None = template
        last = template
        visited: set[str] = set()
        while current is not None and current.integration not in visited:
            visited.add(current.integration)
            last = current
            entry = current.tools.get(name)
            if entry is not None:
                spec = current.props.merged(entry.props)
                return _build(spec, entry.kind, entry.verb, entry.effect, name, args)
            if depth < _MAX_DEPTH:
                for pattern in current.patterns:
                    match = pattern.regex.fullmatch(name)
                    inner = match.group(pattern.resolve) if match else None
                    if not match or not inner:
                        continue
                    via = self._templates.get(pattern.via or current.extends or GENERIC)
                    found = self._resolve(via or self._templates[GENERIC], inner, args, depth + 1)
                    props = found.properties
                    _apply(pattern.props, props, args)
                    for path, group in pattern.groups.items():
                        value = match.group(group)
                        if value is not None:
                            _put(props, path, value)
                    _put(props, "tool.name", name)
                    _put(props, "tool.effect", found.effect)
                    return Resolution(found.kind, found.verb, props, found.effect)
            decision = self._rule_for(current, name)
            if decision is not None:
                rule, verb, spec = decision
                return _build(spec, rule.kind, verb, rule.effect, name, args)
            current = self._templates.get(current.extends) if current.extends else None
        return _build(last.props, "step.unknown", None, None, name, args)

    def _rule_for(self, template: Template, name: str) -> tuple[Rule, str | None, PropSpec] | None:
        """(the first word rule of `template` that `name` matches, its verb, the property
        spec it resolves with), or None."""
        key = (template.integration, name)
        try:
            return self._decisions[key]
        except KeyError:
            pass
        tokens = split_words(name)
        found: tuple[Rule, str | None, PropSpec] | None = None
        for rule in template.rules:
            matched, verb = _match(rule, tokens, self._vocabulary)
            if matched:
                found = (rule, verb, template.props.merged(rule.props))
                break
        if len(self._decisions) >= _MAX_REMEMBERED:
            self._decisions.clear()
        self._decisions[key] = found
        return found


def _integration_key(integration: object) -> str:
    if not isinstance(integration, str):
        return GENERIC
    return integration.strip().lower().replace("-", "_")


def name_verb(tokens: tuple[str, ...], vocabulary: Vocabulary) -> str | None:
    """The verb the name's verb words say, or None when it has none.

    Normally the first verb word decides (``get_post`` is GET); a name that chains actions with
    a chain word (``get_or_create``) takes its most consequential verb, the vocabulary's order.
    """
    hits: list[tuple[int, int, str]] = []
    for rank, (verb, phrases) in enumerate(vocabulary.verbs):
        for phrase in phrases:
            hits.extend((position, rank, verb) for position in find(tokens, phrase, plural=False))
    if not hits:
        return None
    if len({verb for _, _, verb in hits}) > 1 and contains_any(
        tokens, vocabulary.chain_words, plural=False
    ):
        return min(hits, key=lambda hit: hit[1])[2]
    return min(hits)[2]


def _match(rule: Rule, tokens: tuple[str, ...], vocabulary: Vocabulary) -> tuple[bool, str | None]:
    if rule.words and not contains_any(tokens, rule.words, plural=True):
        return False, None
    if not rule.from_name:
        return True, rule.verb
    verb = name_verb(tokens, vocabulary) or rule.default_verb
    if verb is None or verb not in rule.only_verbs:
        return False, None
    return True, verb


def _build(
    spec: PropSpec,
    kind: str,
    verb: str | None,
    effect: str | None,
    name: str,
    args: Mapping[str, Any],
) -> Resolution:
    final_effect = effect or default_effect(kind, verb)
    props: dict[str, Any] = {}
    _apply(spec, props, args)
    # `_put` of tool.name and tool.effect, without splitting the paths on every call.
    tool = props.get("tool")
    if not isinstance(tool, dict):
        tool = props["tool"] = {}
    tool["name"] = name
    tool["effect"] = final_effect
    return Resolution(kind, verb, props, final_effect)


def _apply(spec: PropSpec, props: dict[str, Any], args: Mapping[str, Any]) -> None:
    # Most calls hold none of the names the picks read (a weather tool's `city`): one set
    # check instead of asking for each of them. Only for a plain dict, whose keys are all
    # it answers for; another Mapping is asked name by name.
    if type(args) is not dict or not spec.arg_names.isdisjoint(args):
        _apply_args(spec, props, args)
    for path, fixed in spec.sets.items():
        _put(props, path, fixed)
    if spec.field_trust:
        _put(props, "data.field_trust", dict(spec.field_trust))


def _apply_args(spec: PropSpec, props: dict[str, Any], args: Mapping[str, Any]) -> None:
    for path, names in spec.picks.items():
        value = _pick(args, names)
        if value is not None:
            _put(props, path, value)
    for path, (function, names) in spec.derives.items():
        text = _pick(args, names)
        # Only host_of exists; `_load` rejects every other function name.
        derived = _host_of(text) if isinstance(text, str) and function == "host_of" else None
        if derived is not None:
            _put(props, path, derived)


def _pick(args: Mapping[str, Any], names: tuple[str, ...]) -> str | list[str] | None:
    """The first named arg that is a string or a list of strings, copied as plain str.

    Anything else (bytes, numbers, objects) is skipped so properties stay JSON-safe; str
    subclasses are copied with `str.__str__` because their own `__str__` may return anything.
    """
    # A plain dict is asked with `get`: most names are absent, and a KeyError raised and
    # caught for each (a tool call resolves about 25 of them) cost more than the rest.
    plain = type(args) is dict
    for key in names:
        if plain:
            value = args.get(key)
        else:
            try:
                value = args[key]
            except Exception:
                # Framework args may be any Mapping; one that fails to answer counts as absent.
                continue
        if value is None:
            # Most names are absent: an isinstance that fails costs a lookup of the value's
            # __class__, three of them for each absent name.
            continue
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return [str.__str__(v) for v in value]
    return None


def _host_of(url: str) -> str | None:
    # urllib.parse imported here: it imports ipaddress, and only a step with a URL needs it.
    from urllib.parse import urlsplit

    text = url.strip()
    try:
        parts = urlsplit(text)
        host = parts.hostname
        if host is None and not parts.netloc and (not parts.scheme or "." in parts.scheme):
            # A bare "example.com/page" (or "example.com:8080", read as a scheme) has no netloc
            # until given one; "mailto:" and other real schemes are left alone.
            host = urlsplit("//" + text).hostname
    except ValueError:
        return None
    return host.lower() if host else None


def _put(props: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = props
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
