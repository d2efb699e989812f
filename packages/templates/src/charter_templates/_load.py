"""Reading template YAML: validation with fix-it messages, and merging user files over defaults.

PyYAML is imported only when a file is read, so `import charter_templates` stays cheap.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence

from ._model import (
    EFFECT_CLASSES,
    KINDS,
    TRUST_WORDS,
    VALID_VERBS,
    VERBS,
    Pattern,
    PropSpec,
    Rule,
    Scalar,
    Template,
    TemplateError,
    ToolEntry,
    Vocabulary,
    Words,
    is_valid_pair,
)
from ._resolve import GENERIC, TemplateSet
from ._words import split_words

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    import yaml

_FILE_KEYS = (
    "integration",
    "description",
    "extends",
    "properties",
    "derive",
    "set",
    "field_trust",
    "tools",
    "patterns",
    "rules",
    "verbs",
    "chain_words",
)
_PROP_KEYS = ("properties", "derive", "set", "field_trust")
_TOOL_KEYS = ("kind", "verb", "effect", "description", *_PROP_KEYS)
_RULE_KEYS = (
    "name",
    "description",
    "words",
    "kind",
    "verb",
    "default_verb",
    "only_verbs",
    "effect",
    *_PROP_KEYS,
)
_PATTERN_KEYS = ("name", "description", "match", "resolve", "via", "groups", "set")
_GENERIC_ONLY = ("verbs", "chain_words")
_DERIVE_FUNCTIONS = ("host_of",)
# Always written by the resolver itself, so a template setting them would be silently ignored.
_RESERVED_PATHS = ("tool.name", "tool.effect")
_FROM_NAME = "from_name"


# The names and paths below are checked with string methods, not regular expressions:
# compiling those cost every fresh process that builds a template set (the Claude Code hook)
# about half a millisecond. Each check states the expression it stands for; the package's
# tests hold each to it.


def _is_path(text: str) -> bool:
    """A dotted property path: ``[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*``."""
    # For ASCII text, isidentifier() is exactly [A-Za-z_][A-Za-z0-9_]*.
    return text.isascii() and all(part.isidentifier() for part in text.split("."))


def _is_plain_key(text: str) -> bool:
    """A key that reads well after a dot: ``[A-Za-z0-9_-]+``."""
    return text.isascii() and text.replace("_", "a").replace("-", "a").isalnum()


def _is_integration(text: str) -> bool:
    """An integration name: ``[a-z][a-z0-9_]*``."""
    # The first character is a lower-case letter, so islower() is False only for upper case.
    return (
        text.isascii()
        and "a" <= text[:1] <= "z"
        and text.islower()
        and text.replace("_", "a").isalnum()
    )


def _is_output_path(text: str) -> bool:
    """A path into a tool's output, keys and ``[n]`` / ``[*]`` steps (``emails[*].sender``,
    ``[*].from``): ``(?:K|I)I*(?:\\.KI*)*`` with K ``[^.\\[\\]]+`` and I
    ``\\[(?:\\d+|\\*)\\]``."""
    for number, segment in enumerate(text.split(".")):
        cut = segment.find("[")
        key, steps = (segment, "") if cut < 0 else (segment[:cut], segment[cut:])
        if "]" in key or not (key or (number == 0 and steps)):
            return False
        while steps:
            end = steps.find("]")
            inner = steps[1:end]
            if steps[0] != "[" or end < 0 or not (inner == "*" or inner.isdecimal()):
                return False
            steps = steps[end + 1 :]
    return True


class _Doc:
    """One parsed YAML document: a template plus what only the generic one may carry."""

    __slots__ = ("chain_words", "extends_given", "template", "verbs")

    def __init__(
        self,
        template: Template,
        extends_given: bool,
        verbs: tuple[tuple[str, Words], ...],
        chain_words: Words,
    ) -> None:
        self.template = template
        self.extends_given = extends_given
        self.verbs = verbs
        self.chain_words = chain_words


class _Check:
    """Raises TemplateError in the one format: ``file: where: problem; fix``."""

    def __init__(self, file: str, prefix: str = "") -> None:
        self.file = file
        self.prefix = prefix

    def fail(self, where: str, problem: str, fix: str) -> NoReturn:
        full = f"{self.prefix}{where}" if where else self.prefix.rstrip(", ")
        location = f"{full}: " if full else ""
        raise TemplateError(f"{self.file}: {location}{problem}; {fix}", file=self.file, where=full)


def _key(where: str, name: str) -> str:
    """`where.name`, or `where['odd name']` for names that would read badly after a dot."""
    if _is_plain_key(name):
        return f"{where}.{name}" if where else name
    return f"{where}[{name!r}]"


def _one_of(options: Iterable[str]) -> str:
    return "use one of " + ", ".join(options)


def _mapping(check: _Check, value: object, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        check.fail(where, f"{what} must be a mapping, not {_describe(value)}", "write `key: value`")
    for key in value:
        if not isinstance(key, str):
            check.fail(
                where,
                f"key {key!r} is not a string",
                "quote it (YAML reads yes/no/on/off and numbers as non-strings)",
            )
    return value


def _known_keys(
    check: _Check, entry: Mapping[str, Any], where: str, allowed: tuple[str, ...]
) -> None:
    for key in entry:
        if key not in allowed:
            import difflib  # only to suggest a fix for a misspelled key

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            check.fail(_key(where, key), f"unknown key {key!r}", _one_of(allowed) + hint)


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


def _text(check: _Check, value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        check.fail(where, f"{_describe(value)} is not a non-empty string", "write a name in quotes")
    return value


def _strings(check: _Check, value: object, where: str) -> tuple[str, ...]:
    """A string or a non-empty list of strings, as a tuple."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        check.fail(where, f"{_describe(value)} is not a name or a list of names", "write [a, b]")
    for item in items:
        _text(check, item, where)
    return tuple(items)


def _kind(check: _Check, value: object, where: str) -> str:
    if value not in KINDS:
        check.fail(where, f"{_describe(value)} is not a kind", _one_of(KINDS))
    assert isinstance(value, str)
    return value


def _verb(check: _Check, value: object, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.upper() in VERBS:
        return value.upper()
    check.fail(where, f"{_describe(value)} is not a verb", _one_of(VERBS) + ", or null for none")


def _pair_fix(kind: str) -> str:
    allowed = VALID_VERBS.get(kind)
    if allowed is None:
        return f"{kind} takes no verb: remove verb"
    return f"{kind} takes " + ", ".join(v for v in VERBS if v in allowed)


def _effect(check: _Check, value: object, where: str) -> str | None:
    if value is None:
        return None
    if value not in EFFECT_CLASSES:
        check.fail(where, f"{_describe(value)} is not an effect class", _one_of(EFFECT_CLASSES))
    assert isinstance(value, str)
    return value


def _path(check: _Check, path: str, where: str) -> str:
    if not _is_path(path):
        check.fail(where, f"{path!r} is not a dotted property path", "write e.g. target.path")
    if path in _RESERVED_PATHS:
        check.fail(where, f"{path} is always set by the resolver", "remove it")
    return path


def _props(check: _Check, entry: Mapping[str, Any], where: str) -> PropSpec:
    if not any(key in entry for key in _PROP_KEYS):
        return PropSpec()
    picks: dict[str, tuple[str, ...]] = {}
    derives: dict[str, tuple[str, tuple[str, ...]]] = {}
    sets: dict[str, Scalar] = {}
    seen: dict[str, str] = {}

    def claim(path: str, section: str) -> str:
        # Property paths are dotted already, so they read best joined with a dot.
        here = f"{where}.{section}.{path}" if where else f"{section}.{path}"
        _path(check, path, here)
        if path in seen:
            check.fail(here, f"{path} is also under {seen[path]}", "keep one")
        for other in seen:
            if other.startswith(path + ".") or path.startswith(other + "."):
                check.fail(here, f"{path} and {other} overlap", "put values only at leaves")
        seen[path] = section
        return here

    section_where = f"{where}.properties" if where else "properties"
    for path, names in _mapping(
        check, entry.get("properties", {}), section_where, "properties"
    ).items():
        here = claim(path, "properties")
        picks[path] = _strings(check, names, here)
    section_where = f"{where}.derive" if where else "derive"
    for path, spec in _mapping(check, entry.get("derive", {}), section_where, "derive").items():
        here = claim(path, "derive")
        spec_map = _mapping(check, spec, here, "a derive entry")
        if len(spec_map) != 1 or next(iter(spec_map)) not in _DERIVE_FUNCTIONS:
            check.fail(
                here,
                f"{_describe(spec)} is not a derivation",
                "write {host_of: url} (" + _one_of(_DERIVE_FUNCTIONS) + ")",
            )
        ((function, names),) = spec_map.items()
        derives[path] = (function, _strings(check, names, _key(here, function)))
    section_where = f"{where}.set" if where else "set"
    for path, value in _mapping(check, entry.get("set", {}), section_where, "set").items():
        here = claim(path, "set")
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            check.fail(here, f"{_describe(value)} is not a plain value", "use a string or number")
        sets[path] = value
    section_where = f"{where}.field_trust" if where else "field_trust"
    field_trust: dict[str, str] = {}
    for path, level in _mapping(
        check, entry.get("field_trust", {}), section_where, "field_trust"
    ).items():
        here = f"{section_where}.{path}"
        if not _is_output_path(path):
            check.fail(here, f"{path!r} is not an output path", "write e.g. emails[*].sender")
        if level not in TRUST_WORDS:
            check.fail(here, f"{_describe(level)} is not a trust level", _one_of(TRUST_WORDS))
        field_trust[path] = level
    return PropSpec(picks=picks, derives=derives, sets=sets, field_trust=field_trust)


def _words(check: _Check, value: object, where: str) -> Words:
    if not isinstance(value, list):
        check.fail(where, f"{_describe(value)} is not a list of words", "write [send, email]")
    phrases: list[tuple[str, ...]] = []
    for item in value:
        if not isinstance(item, str):
            check.fail(where, f"{item!r} is not a word", "quote it (YAML reads yes/no/on/off)")
        phrase = split_words(item)
        if not phrase:
            check.fail(where, f"{item!r} has no letters or digits", "remove it")
        phrases.append(phrase)
    return tuple(phrases)


def _tool(check: _Check, value: object, where: str) -> ToolEntry:
    entry = _mapping(check, value, where, "a tool entry")
    _known_keys(check, entry, where, _TOOL_KEYS)
    if "kind" not in entry:
        check.fail(where, "missing key 'kind'", "add e.g. kind: step.resource")
    kind = _kind(check, entry["kind"], f"{where}.kind")
    if entry.get("verb") == _FROM_NAME:
        check.fail(f"{where}.verb", "tools take a fixed verb", "write the verb, or use a rule")
    verb = _verb(check, entry.get("verb"), f"{where}.verb")
    if not is_valid_pair(kind, verb):
        check.fail(f"{where}.verb", f"{kind} does not take verb {verb}", _pair_fix(kind))
    effect = _effect(check, entry.get("effect"), f"{where}.effect")
    return ToolEntry(kind=kind, verb=verb, effect=effect, props=_props(check, entry, where))


def _rule(check: _Check, value: object, where: str) -> Rule:
    entry = _mapping(check, value, where, "a rule")
    _known_keys(check, entry, where, _RULE_KEYS)
    name = _text(check, entry.get("name"), f"{where}.name")
    where = _key("rules", name)
    if "kind" not in entry:
        check.fail(where, "missing key 'kind'", "add e.g. kind: step.resource")
    kind = _kind(check, entry["kind"], f"{where}.kind")
    words = _words(check, entry.get("words", []), f"{where}.words")
    effect = _effect(check, entry.get("effect"), f"{where}.effect")
    props = _props(check, entry, where)
    allowed = VALID_VERBS.get(kind, frozenset())
    if entry.get("verb") != _FROM_NAME:
        for key in ("default_verb", "only_verbs"):
            if key in entry:
                check.fail(f"{where}.{key}", f"{key} needs verb: from_name", "remove it")
        verb = _verb(check, entry.get("verb"), f"{where}.verb")
        if not is_valid_pair(kind, verb):
            check.fail(f"{where}.verb", f"{kind} does not take verb {verb}", _pair_fix(kind))
        return Rule(name, words, kind, verb, False, None, frozenset(), effect, props)
    if not allowed:
        check.fail(f"{where}.verb", f"{kind} takes no verb", f"{_pair_fix(kind)} (or verb: null)")
    only = allowed
    if "only_verbs" in entry:
        listed = entry["only_verbs"]
        if not isinstance(listed, list) or not listed:
            check.fail(f"{where}.only_verbs", "must be a non-empty list", "write [GET, POST]")
        only = frozenset(_verb(check, v, f"{where}.only_verbs") or "" for v in listed)
        if not only <= allowed:
            check.fail(f"{where}.only_verbs", f"{kind} does not take them all", _pair_fix(kind))
    default = _verb(check, entry.get("default_verb"), f"{where}.default_verb")
    if default is not None and default not in only:
        check.fail(
            f"{where}.default_verb",
            f"{default} is not among the verbs this rule allows",
            "use one of " + ", ".join(v for v in VERBS if v in only),
        )
    return Rule(name, words, kind, None, True, default, only, effect, props)


def _pattern(check: _Check, value: object, where: str) -> Pattern:
    entry = _mapping(check, value, where, "a pattern")
    _known_keys(check, entry, where, _PATTERN_KEYS)
    name = _text(check, entry.get("name"), f"{where}.name")
    where = _key("patterns", name)
    source = _text(check, entry.get("match"), f"{where}.match")
    try:
        regex = re.compile(source)
    except re.error as exc:
        check.fail(f"{where}.match", f"not a regular expression ({exc})", "fix the expression")
    groups = regex.groupindex
    resolve = _text(check, entry.get("resolve"), f"{where}.resolve")
    if resolve not in groups:
        check.fail(f"{where}.resolve", f"no group named {resolve!r}", "name one, e.g. (?P<tool>.+)")
    via = entry.get("via")
    if via is not None:
        via = _integration(check, via, f"{where}.via")
    group_paths: dict[str, str] = {}
    for path, group in _mapping(
        check, entry.get("groups", {}), f"{where}.groups", "groups"
    ).items():
        here = f"{where}.groups.{path}"
        _path(check, path, here)
        if _text(check, group, here) not in groups:
            check.fail(here, f"no group named {group!r} in match", "name one with (?P<name>...)")
        group_paths[path] = group
    props = _props(check, {"set": entry.get("set", {})}, where)
    for path in props.sets:
        if path in group_paths:
            check.fail(f"{where}.set.{path}", f"{path} is also under groups", "keep one")
    return Pattern(name, regex, resolve, via, group_paths, props)


def _integration(check: _Check, value: object, where: str) -> str:
    text = _text(check, value, where).strip().lower().replace("-", "_")
    if not _is_integration(text):
        check.fail(where, f"{value!r} is not an integration name", "use letters, digits and _")
    return text


def _named(check: _Check, items: object, where: str, parse: Any) -> tuple[Any, ...]:
    if not isinstance(items, list):
        check.fail(
            where, f"{_describe(items)} is not a list", "write a list of entries (- name: ...)"
        )
    parsed = [parse(check, item, f"{where}[{i}]") for i, item in enumerate(items)]
    names = [p.name for p in parsed]
    for name in names:
        if names.count(name) > 1:
            check.fail(_key(where, name), "appears twice", "give each entry its own name")
    return tuple(parsed)


def _verbs(check: _Check, value: object) -> tuple[tuple[str, Words], ...]:
    table = _mapping(check, value, "verbs", "verbs")
    result: list[tuple[str, Words]] = []
    for verb, words in table.items():
        if verb not in VERBS:
            check.fail(_key("verbs", verb), f"{verb!r} is not a verb", _one_of(VERBS))
        result.append((verb, _words(check, words, _key("verbs", verb))))
    return tuple(result)


def _doc(check: _Check, value: object, sources: tuple[str, ...]) -> _Doc:
    doc = _mapping(check, value, "", "a template file")
    _known_keys(check, doc, "", _FILE_KEYS)
    if "integration" not in doc:
        check.fail("", "missing key 'integration'", "add e.g. integration: claude_code")
    integration = _integration(check, doc["integration"], "integration")
    if integration != GENERIC:
        for key in _GENERIC_ONLY:
            if key in doc:
                check.fail(key, "only the generic template has verb words", "move it there")
    extends_given = "extends" in doc
    extends = doc.get("extends", None if integration == GENERIC else GENERIC)
    if extends is not None:
        extends = _integration(check, extends, "extends")
    tools_map = _mapping(check, doc.get("tools", {}), "tools", "tools")
    tools = {name: _tool(check, entry, _key("tools", name)) for name, entry in tools_map.items()}
    template = Template(
        integration=integration,
        extends=extends,
        props=_props(check, doc, ""),
        tools=tools,
        patterns=_named(check, doc.get("patterns", []), "patterns", _pattern),
        rules=_named(check, doc.get("rules", []), "rules", _rule),
        sources=sources,
    )
    verbs = _verbs(check, doc["verbs"]) if "verbs" in doc else ()
    chain = _words(check, doc["chain_words"], "chain_words") if "chain_words" in doc else ()
    return _Doc(template, extends_given, verbs, chain)


@functools.cache
def _loader() -> type[yaml.SafeLoader]:
    import yaml

    class Loader(yaml.SafeLoader):
        """A SafeLoader that refuses duplicate keys, which PyYAML would silently collapse."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: set[str] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"{key_node.value!r} appears twice in this mapping",
                        key_node.start_mark,
                    )
                seen.add(key_node.value)
            return super().construct_mapping(node, deep=deep)

    return Loader


def _parse(text: str, file: str) -> list[_Doc]:
    return _checked(_documents(text, file), file)


def _documents(text: str, file: str) -> list[Any]:
    """The YAML documents of a template file as plain data (mappings, lists, scalars)."""
    import yaml

    try:
        return [d for d in yaml.load_all(text, Loader=_loader()) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise TemplateError(
            f"{file}: {where + ': ' if where else ''}{problem}; fix the YAML there",
            file=file,
            where=where,
        ) from exc


def _checked(raw: list[Any], file: str) -> list[_Doc]:
    if not raw:
        raise TemplateError(
            f"{file}: the file holds no template; start it with e.g. integration: claude_code",
            file=file,
        )
    docs: list[_Doc] = []
    for number, value in enumerate(raw, start=1):
        prefix = f"document {number}, " if len(raw) > 1 else ""
        doc = _doc(_Check(file, prefix), value, (file,))
        for earlier in docs:
            if earlier.template.integration == doc.template.integration:
                _Check(file, prefix).fail(
                    "integration",
                    f"{doc.template.integration} already has a document in this file",
                    "merge the two documents",
                )
        docs.append(doc)
    return docs


def _merge_named(user: tuple[Any, ...], base: tuple[Any, ...]) -> tuple[Any, ...]:
    names = {item.name for item in user}
    return user + tuple(item for item in base if item.name not in names)


def _merge(base: Template | None, doc: _Doc) -> Template:
    user = doc.template
    if base is None:
        return user
    return Template(
        integration=base.integration,
        extends=user.extends if doc.extends_given else base.extends,
        props=base.props.merged(user.props),
        tools={**base.tools, **user.tools},
        patterns=_merge_named(user.patterns, base.patterns),
        rules=_merge_named(user.rules, base.rules),
        sources=base.sources + user.sources,
    )


def _merge_vocabulary(base: Vocabulary, docs: Iterable[_Doc]) -> Vocabulary:
    verbs = {verb: list(words) for verb, words in base.verbs}
    chain = list(base.chain_words)
    for doc in docs:
        for verb, words in doc.verbs:
            # A user word names one verb only: it leaves whatever verb it had before.
            for other in verbs.values():
                other[:] = [w for w in other if w not in words]
            verbs[verb] = list(words) + verbs.get(verb, [])
        chain = list(doc.chain_words) + [w for w in chain if w not in doc.chain_words]
    ordered = [verb for verb, _ in base.verbs] + [v for v in verbs if v not in dict(base.verbs)]
    return Vocabulary(tuple((v, tuple(verbs[v])) for v in ordered), tuple(chain))


def _build_set(
    templates: dict[str, Template],
    vocabulary: Vocabulary,
    file: str,
    touched: Iterable[str] = (),
) -> TemplateSet:
    """Check references between templates; `touched` (the file's integrations) are named first."""
    check = _Check(file)
    if GENERIC not in templates:
        check.fail("", "no generic template", "add a document with integration: generic")
    order = list(dict.fromkeys([*touched, *templates]))
    for name in order:
        template = templates[name]
        if template.extends is not None and template.extends not in templates:
            check.fail(
                _key(name, "extends"),
                f"{template.extends!r} has no template",
                _one_of(sorted(templates)),
            )
        for pattern in template.patterns:
            if pattern.via is not None and pattern.via not in templates:
                check.fail(
                    f"{_key('patterns', pattern.name)}.via",
                    f"{pattern.via!r} has no template",
                    _one_of(sorted(templates)),
                )
        chain = [name]
        current = template.extends
        while current is not None:
            if current in chain:
                check.fail(
                    _key(name, "extends"),
                    "templates extend each other in a loop: " + " -> ".join([*chain, current]),
                    "break the loop",
                )
            chain.append(current)
            current = templates[current].extends
    return TemplateSet(templates, vocabulary)


def builtin_sources() -> list[tuple[str, str]]:
    """(name, text) of every built-in template file, in load order."""
    from importlib.resources import files

    folder = files(__package__ or "charter_templates").joinpath("data")
    return [
        (f"charter_templates/data/{item.name}", item.read_text(encoding="utf-8"))
        for item in sorted(folder.iterdir(), key=lambda entry: entry.name)
        if item.name.endswith(".yaml")
    ]


def template_documents(sources: Iterable[tuple[str, str]]) -> list[list[Any]]:
    """[name, documents] per (name, text) source: the YAML read as plain data, which
    `templates_from_documents` builds a set from without YAML (for a JSON cache). Raises
    TemplateError for YAML that does not parse."""
    return [[name, _documents(text, name)] for name, text in sources]


def _from_builtin(parsed: Iterable[tuple[str, list[Any]]]) -> TemplateSet:
    docs: list[_Doc] = []
    for name, raw in parsed:
        docs.extend(_checked(list(raw), name))
    templates: dict[str, Template] = {}
    for doc in docs:
        templates[doc.template.integration] = _merge(templates.get(doc.template.integration), doc)
    vocabulary = _merge_vocabulary(Vocabulary((), ()), docs)
    if {verb for verb, _ in vocabulary.verbs} != set(VERBS):
        _Check("charter_templates/data/generic.yaml").fail(
            "verbs", "the built-in generic template must list words for every verb", "add them"
        )
    return _build_set(templates, vocabulary, "charter_templates/data")


@functools.cache
def default_templates() -> TemplateSet:
    """The built-in templates, parsed once per process."""
    return _from_builtin((name, _documents(text, name)) for name, text in builtin_sources())


def templates_from_documents(
    builtin: Iterable[Sequence[Any]], user: Sequence[Any] | None = None
) -> TemplateSet:
    """The set `load_templates` builds, from `template_documents` output: `builtin` for the
    built-in files, `user` ([name, documents]) for a user file. Checks everything
    `load_templates` checks; raises TemplateError where it would."""
    base = _from_builtin((str(name), list(raw)) for name, raw in builtin)
    if user is None:
        return base
    return _merged(base, _checked(list(user[1]), str(user[0])), str(user[0]))


def load_templates(path: str | os.PathLike[str] | None = None) -> TemplateSet:
    """The built-in templates, merged with the user file at `path` when one is given.

    User entries win: a tool entry replaces the built-in entry of the same name; user rules and
    patterns go in front of the built-in ones (replacing any of the same name); user property
    paths replace built-in ones; user verb words go in front of the built-in words of their verb
    and leave any other verb. A YAML file may hold several documents, one per integration.
    Raises TemplateError (a ValueError) naming the file, entry and key, with how to fix it.
    """
    base = default_templates()
    if path is None:
        return base
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TemplateError(
            f"{file}: cannot be read ({reason}); check the path and that it is UTF-8 text",
            file=file,
        ) from exc
    return _merged(base, _parse(text, file), file)


def _merged(base: TemplateSet, docs: list[_Doc], file: str) -> TemplateSet:
    templates = dict(base._templates)
    for doc in docs:
        templates[doc.template.integration] = _merge(templates.get(doc.template.integration), doc)
    vocabulary = _merge_vocabulary(base._vocabulary, docs)
    return _build_set(templates, vocabulary, file, [d.template.integration for d in docs])
