"""Policy manifests: YAML files holding a named, versioned set of policies.

`parse_manifest` is pure and never raises on bad content: it reports every problem at once, so
a person fixes a file in one pass. `load_manifest_policies` is the strict front door: a set is
loaded whole or refused whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charter._model.errors import PolicyLoadError
from charter._policy.params import check_params
from charter._policy.policy import CompiledPolicy, Policy, PolicyProblem, compile_policies

__all__ = ["ManifestResult", "load_manifest_policies", "parse_manifest"]

MANIFEST_KEYS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "description": {"type": "string"},
    "version": {"type": ["string", "integer", "number"]},
    "enforcement": {
        "type": "string",
        "enum": ["enforce", "monitor"],
        "description": "monitor: judge and record, but never block or ask.",
    },
    "policies": {"type": "array"},
}
MANIFEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "version", "policies"],
    "properties": MANIFEST_KEYS,
}


@dataclass(frozen=True, slots=True)
class ManifestResult:
    """What parsing found: `valid` is True only when `errors` is empty."""

    valid: bool
    policies: tuple[Policy, ...] = ()
    errors: tuple[PolicyProblem, ...] = ()
    name: str | None = None
    version: str | None = None
    description: str | None = None
    enforcement: str = "enforce"
    source: str | None = None

    def error_lines(self) -> list[str]:
        return [str(e) for e in self.errors]


def _loader() -> Any:
    import yaml

    # The pure-Python loader: the C one composes nodes itself, so aliases could not be refused.
    class _StrictLoader(yaml.SafeLoader):
        """Safe YAML that also refuses duplicate keys and aliases.

        A duplicated key silently replaces the first (a policy could vanish unnoticed), and
        aliases let a small file expand into a huge one.
        """

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    "aliases (*name) are not allowed in manifests; repeat the value instead",
                    event.start_mark,
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    duplicate = False
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                try:
                    seen.add(key)
                except TypeError:
                    pass
            return super().construct_mapping(node, deep=deep)

    _StrictLoader.add_constructor(
        "tag:yaml.org,2002:map",
        _StrictLoader.construct_mapping,
    )
    return _StrictLoader


def _yaml_error(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return f"invalid YAML: {problem}"


def parse_manifest(text: str | bytes, *, source: str | None = None) -> ManifestResult:
    """Parse manifest text; returns a result with `valid` and every error found. Never raises."""
    try:
        return _parse(text, source)
    except Exception as exc:  # the contract is "never raises": report instead
        return ManifestResult(
            valid=False,
            errors=(
                PolicyProblem(f"could not be parsed: {type(exc).__name__}: {exc}", source=source),
            ),
            source=source,
        )


def _parse(text: str | bytes, source: str | None) -> ManifestResult:
    import yaml

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _failed(f"is not UTF-8 text ({exc.reason} at byte {exc.start})", source)
    try:
        data = yaml.load(text, Loader=_loader())
    except (yaml.YAMLError, RecursionError) as exc:
        return _failed(_yaml_error(exc), source)
    if data is None:
        return _failed(
            "is empty; a manifest needs name, version and policies (see charter schema)", source
        )
    if not isinstance(data, dict):
        return _failed(
            f"must be a mapping with name, version and policies, not a {type(data).__name__}",
            source,
        )
    problems: list[PolicyProblem] = []
    for msg in check_params(data, MANIFEST_SCHEMA, "manifest"):
        key, _, body = msg.partition(": ")
        problems.append(PolicyProblem(body, key=key, source=source))
    policies_raw = data.get("policies")
    compiled: list[CompiledPolicy] = []
    if isinstance(policies_raw, list):
        compiled, found = compile_policies(policies_raw, source)
        problems.extend(found)
    version = data.get("version")
    enforcement = data.get("enforcement", "enforce")
    return ManifestResult(
        valid=not problems,
        policies=tuple(c.policy for c in compiled) if not problems else (),
        errors=tuple(problems),
        name=data.get("name") if isinstance(data.get("name"), str) else None,
        version=str(version) if version is not None and not isinstance(version, bool) else None,
        description=data.get("description") if isinstance(data.get("description"), str) else None,
        enforcement=enforcement if enforcement in ("enforce", "monitor") else "enforce",
        source=source,
    )


def _failed(message: str, source: str | None) -> ManifestResult:
    return ManifestResult(
        valid=False, errors=(PolicyProblem(message, source=source),), source=source
    )


def _split_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(paths, str):
        items: Sequence[str | os.PathLike[str]] = [p.strip() for p in paths.split(",")]
    elif isinstance(paths, os.PathLike):
        items = [paths]
    else:
        items = list(paths)
    return [Path(p) for p in items if str(p)]


def read_manifests(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[ManifestResult]:
    """Read and parse every file; unreadable files become invalid results (never raises)."""
    results = []
    for path in _split_paths(paths):
        source = str(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            results.append(_failed(f"cannot be read ({reason}); check the path", source))
            continue
        results.append(parse_manifest(data, source=source))
    return results


def load_manifest_policies(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[Policy]:
    """Load the policies of one or several manifests (a list, or comma-separated paths).

    Returns the combined set. Raises PolicyLoadError listing every problem in every file, and
    a policy name used in two files, when anything is wrong: nothing is loaded in that case.
    """
    files = _split_paths(paths)
    if not files:
        raise PolicyLoadError(["no manifest path given; pass one or more YAML files"])
    results = read_manifests(files)
    problems = [str(e) for r in results for e in r.errors]
    policies: list[Policy] = []
    owner: dict[str, str] = {}
    for r in results:
        for p in r.policies:
            if p.name in owner:
                problems.append(
                    f"{r.source}: policy {p.name!r}: name: also defined in {owner[p.name]}; "
                    "policy names must be unique across manifests"
                )
            owner[p.name] = r.source or "?"
            policies.append(p)
    if problems:
        label = ", ".join(str(f) for f in files)
        raise PolicyLoadError(problems, f"manifest {label}")
    return policies
