"""Runner settings: keyword arguments, then ``CHARTER_*`` environment variables, then defaults.

A keyword always beats the environment, so code that pins a setting cannot be overridden by
a stray variable; the environment beats the defaults, so an operator can configure an agent
without touching its code. Every refusal names the setting in both spellings
(``policy_file= / CHARTER_POLICY_FILE``) and what is accepted.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping

from charter._model import stdjson
from charter._model.frozen import Frozen
from charter._model.identifiers import check_identifier
from charter._policy.policy import Policy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # Loaded by the functions that need them: settings without a grant never do.
    from charter._policy.capabilities import Grant

__all__ = ["Settings", "load_grant"]


def _env_name(name: str) -> str:
    return "CHARTER_" + name.upper()


def _spelling(name: str) -> str:
    return f"{name}= / {_env_name(name)}"


def _choice(*options: str) -> Callable[[Any], str]:
    accepted = ", ".join(options[:-1]) + " or " + options[-1]

    def parse(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise ValueError(accepted)

    return parse


def _text(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError("a non-empty text")


def _number(minimum: float, inclusive: bool) -> Callable[[Any], float]:
    bound = f"at least {minimum:g}" if inclusive else f"above {minimum:g}"

    def parse(value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise TypeError
            number = float(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise ValueError(f"a number of seconds {bound}") from None
        if not math.isfinite(number) or number < minimum or (number == minimum and not inclusive):
            raise ValueError(f"a number of seconds {bound}")
        return number

    return parse


def _count(value: Any) -> int:
    try:
        if isinstance(value, (bool, float)):
            raise TypeError
        number = int(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError("a whole number of at least 1") from None
    if number < 1:
        raise ValueError("a whole number of at least 1")
    return number


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",")]
    elif isinstance(value, Iterable) and not isinstance(value, (Mapping, bytes)):
        items = list(value)
    else:
        raise ValueError("a list of names, or names separated by commas")
    out = []
    for item in items:
        if isinstance(item, os.PathLike):
            item = os.fspath(item)
        if not isinstance(item, str):
            raise ValueError("a list of names, or names separated by commas")
        if item.strip():
            out.append(item.strip())
    return tuple(out)


def _paths(value: Any) -> tuple[str, ...]:
    if isinstance(value, os.PathLike):
        value = [value]
    try:
        found = _names(value)
    except ValueError:
        raise ValueError("one or more YAML manifest paths (a list, or comma-separated)") from None
    if not found:
        raise ValueError("one or more YAML manifest paths (a list, or comma-separated)")
    return found


_POLICIES_ACCEPTED = (
    "a list of policy mappings or charter.Policy objects (in the environment: a JSON array); "
    "[] runs with no policies"
)


def _policies(value: Any) -> tuple[Policy | Mapping[str, Any], ...]:
    if isinstance(value, str):
        try:
            value = stdjson.loads(value)
        except ValueError:
            raise ValueError(_POLICIES_ACCEPTED) from None
    if isinstance(value, (Mapping, str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(_POLICIES_ACCEPTED)
    items = tuple(value)
    if not all(isinstance(item, (Policy, Mapping)) for item in items):
        raise ValueError(_POLICIES_ACCEPTED)
    return items


def _agent_id(value: Any) -> str:
    try:
        return check_identifier("agent_id", value.strip() if isinstance(value, str) else value)
    except ValueError:
        raise ValueError("letters, digits and . _ : - only (at most 255 characters)") from None


def load_grant(path: str | os.PathLike[str]) -> Grant:
    """Read a capability grant from a YAML or JSON file (the manifests' strict YAML: no
    aliases, no duplicate keys); raises GrantError naming the file and every problem."""
    import yaml

    from charter._policy.capabilities import Grant, GrantError
    from charter._policy.manifest import _loader

    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise GrantError([f"{where}: cannot be read ({exc})"]) from None
    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise GrantError([f"{where}: invalid YAML{at}: {problem}"]) from None
    return Grant.from_document(data, where)


def _grant(value: Any) -> Grant:
    from charter._policy.capabilities import Grant, GrantError

    if isinstance(value, Grant):
        return value
    try:
        if isinstance(value, Mapping):
            return Grant.from_document(value, "capabilities")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, str) and value.strip():
            text = value.strip()
            if text.startswith("{"):
                return Grant.from_document(text, "capabilities")
            return load_grant(text)
    except GrantError as exc:
        raise ValueError(f"a valid grant ({exc})") from None
    raise ValueError("a grant: a YAML or JSON file, JSON text, or a mapping with tools")


_LOCATION_ACCEPTED = "sqlite:///PATH, jsonl:///PATH, postgresql://USER@HOST:PORT/DB, stdout or none"


def _location(value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ValueError(_LOCATION_ACCEPTED)
    text = value.strip()
    if text.lower() in ("stdout", "none"):
        return text.lower()
    for scheme in ("sqlite:///", "jsonl:///", "postgresql://", "postgres://"):
        if text.startswith(scheme) and len(text) > len(scheme):
            return text
    raise ValueError(_LOCATION_ACCEPTED)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("true or false (also 1/0, yes/no, on/off)")


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

_URL_ACCEPTED = "an http:// or https:// URL of an OTLP/HTTP receiver, e.g. http://localhost:4318"


def _otlp_url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(_URL_ACCEPTED)
    text = value.strip()
    scheme, _, rest = text.partition("://")
    host = rest.split("/", 1)[0]
    if scheme.lower() not in ("http", "https") or not host or any(c.isspace() for c in text):
        raise ValueError(_URL_ACCEPTED)
    return text


_HEADERS_ACCEPTED = (
    "a mapping of header names to values, or name=value pairs separated by commas "
    "(as in OTEL_EXPORTER_OTLP_HEADERS; values may be percent-encoded)"
)


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    from urllib.parse import unquote

    pairs: list[tuple[Any, Any]]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, str):
        pairs = []
        for part in value.split(","):
            if not part.strip():
                continue
            name, eq, text = part.partition("=")
            if not eq:
                raise ValueError(_HEADERS_ACCEPTED)
            pairs.append((name.strip(), unquote(text.strip())))
    elif isinstance(value, Iterable) and not isinstance(value, bytes):
        pairs = [tuple(item) for item in value]
    else:
        raise ValueError(_HEADERS_ACCEPTED)
    out = []
    for pair in pairs:
        if len(pair) != 2:
            raise ValueError(_HEADERS_ACCEPTED)
        name, text = pair
        if not isinstance(name, str) or not isinstance(text, str) or not name.strip():
            raise ValueError(_HEADERS_ACCEPTED)
        if any(c.isspace() or c in ":," for c in name.strip()):
            raise ValueError(_HEADERS_ACCEPTED)
        out.append((name.strip().lower(), text))
    return tuple(out)


class _Spec(Frozen):
    __slots__ = (
        "meaning",
        "parse",
    )
    parse: Callable[[Any], Any]
    meaning: str

    def __init__(self, parse: Callable[[Any], Any], meaning: str) -> None:
        object.__setattr__(self, "parse", parse)
        object.__setattr__(self, "meaning", meaning)


_SPECS: dict[str, _Spec] = {
    "policies": _Spec(_policies, "inline policies (list of mappings or Policy objects)"),
    "policy_file": _Spec(_paths, "YAML manifests (list or comma-separated), re-read on change"),
    "policy_cache_path": _Spec(_text, "JSON file holding the last good policy set"),
    "policy_cache_max_age": _Spec(_number(0, False), "seconds before the cache counts stale"),
    "fail_mode": _Spec(
        _choice("closed", "open"), "when Charter cannot judge a step: block or allow"
    ),
    "enforcement": _Spec(_choice("enforce", "monitor"), "monitor: judge and record only"),
    "environment": _Spec(_text, "environment name policies can be scoped to"),
    "risk_classification": _Spec(_text, "the agent's risk classification"),
    "agent_id": _Spec(_agent_id, "the agent's identifier in the audit trail"),
    "agent_name": _Spec(_text, "the agent's display name"),
    "agent_purpose": _Spec(_text, "what the agent is for"),
    "agent_owner": _Spec(_text, "who answers for the agent"),
    "declared_tools": _Spec(_names, "tools the agent declares (feeds allow_only)"),
    "project_root": _Spec(_text, "directory path rules are relative to"),
    "trusted_values": _Spec(_names, "operator-trusted values (recipients, hosts)"),
    "capabilities": _Spec(
        _grant, "the operator's capability grant for every task (file or mapping)"
    ),
    "audit_location": _Spec(_location, "where the audit trail goes"),
    "audit_durability": _Spec(_choice("buffered", "sync"), "buffered queue, or commit per step"),
    "signing_key": _Spec(_text, "Ed25519 key file that signs checkpoints (charter keys create)"),
    "checkpoint_file": _Spec(_text, "JSONL file that signed checkpoints are also appended to"),
    "checkpoint_every": _Spec(_count, "records between checkpoints (also at task end and close)"),
    "payload_mode": _Spec(
        _choice("full", "metadata_only", "sha256"), "how payloads are kept in the trail"
    ),
    "max_output_chars": _Spec(_count, "longest string kept of a step's output (cut visibly)"),
    "max_output_items": _Spec(_count, "most list items / keys kept of a step's output"),
    "max_clock_skew_seconds": _Spec(_number(0, False), "refuse steps stamped further off"),
    "evaluation_deadline_seconds": _Spec(
        _number(0, False), "judging one step longer than this blocks it (fail mode decides)"
    ),
    "queue_size": _Spec(_count, "bound of the audit queue (records)"),
    "exit_flush_seconds": _Spec(_number(0, True), "how long exit waits for the queue"),
    "task_idle_seconds": _Spec(_number(0, False), "idle tasks are closed after this"),
    "sweep_interval_seconds": _Spec(_number(0, False), "how often idle tasks are looked for"),
    "template_location": _Spec(_text, "behavior templates file (used by integrations)"),
    "shared_hold_seconds": _Spec(
        _number(0, False), "a running step's share of an agent-wide limit expires after this"
    ),
    "otlp_endpoint": _Spec(_otlp_url, "OTLP/HTTP receiver every step is sent to as a span"),
    "otlp_headers": _Spec(_headers, "headers sent with every OTLP request (values hidden)"),
    "otlp_payloads": _Spec(_flag, "put step inputs and outputs (as stored) in spans"),
}


class Settings(Frozen):
    """Everything a Runner needs, validated; build it with `Settings.from_sources(**kwargs)`.

    Direct construction validates too but reads no environment. Refuses (ValueError naming
    the setting in both spellings and what is accepted) an unparsable value, and a
    configuration with no policy source at all: set `policies` (``[]`` is a source that
    answered with nothing), `policy_file` or `policy_cache_path`.
    """

    __slots__ = (
        "agent_id",
        "agent_name",
        "agent_owner",
        "agent_purpose",
        "audit_durability",
        "audit_location",
        "capabilities",
        "checkpoint_every",
        "checkpoint_file",
        "declared_tools",
        "enforcement",
        "environment",
        "evaluation_deadline_seconds",
        "exit_flush_seconds",
        "fail_mode",
        "max_clock_skew_seconds",
        "max_output_chars",
        "max_output_items",
        "origins",
        "otlp_endpoint",
        "otlp_headers",
        "otlp_payloads",
        "payload_mode",
        "policies",
        "policy_cache_max_age",
        "policy_cache_path",
        "policy_file",
        "project_root",
        "queue_size",
        "risk_classification",
        "shared_hold_seconds",
        "signing_key",
        "sweep_interval_seconds",
        "task_idle_seconds",
        "template_location",
        "trusted_values",
    )
    policies: tuple[Policy | Mapping[str, Any], ...] | None
    policy_file: tuple[str, ...] | None
    policy_cache_path: str | None
    policy_cache_max_age: float
    fail_mode: str
    enforcement: str
    environment: str | None
    risk_classification: str | None
    agent_id: str
    agent_name: str | None
    agent_purpose: str | None
    agent_owner: str | None
    declared_tools: tuple[str, ...] | None
    project_root: str | None
    trusted_values: tuple[str, ...]
    capabilities: Grant | None
    audit_location: str
    audit_durability: str
    signing_key: str | None
    checkpoint_file: str | None
    checkpoint_every: int
    payload_mode: str
    max_output_chars: int
    max_output_items: int
    max_clock_skew_seconds: float
    evaluation_deadline_seconds: float
    queue_size: int
    exit_flush_seconds: float
    task_idle_seconds: float
    sweep_interval_seconds: float
    template_location: str | None
    shared_hold_seconds: float
    otlp_endpoint: str | None
    otlp_headers: tuple[tuple[str, str], ...] | None
    otlp_payloads: bool
    origins: Mapping[str, str]

    def __init__(
        self,
        *,
        policies: tuple[Policy | Mapping[str, Any], ...] | None = None,
        policy_file: tuple[str, ...] | None = None,
        policy_cache_path: str | None = None,
        policy_cache_max_age: float = 86_400.0,
        fail_mode: str = "closed",
        enforcement: str = "enforce",
        environment: str | None = None,
        risk_classification: str | None = None,
        agent_id: str = "default",
        agent_name: str | None = None,
        agent_purpose: str | None = None,
        agent_owner: str | None = None,
        declared_tools: tuple[str, ...] | None = None,
        project_root: str | None = None,
        trusted_values: tuple[str, ...] = (),
        capabilities: Grant | None = None,
        audit_location: str = "sqlite:///.charter/audit.db",
        audit_durability: str = "buffered",
        signing_key: str | None = None,
        checkpoint_file: str | None = None,
        checkpoint_every: int = 1_000,
        payload_mode: str = "full",
        max_output_chars: int = 32_768,
        max_output_items: int = 1_000,
        max_clock_skew_seconds: float = 300.0,
        evaluation_deadline_seconds: float = 5.0,
        queue_size: int = 10_000,
        exit_flush_seconds: float = 5.0,
        task_idle_seconds: float = 3_600.0,
        sweep_interval_seconds: float = 60.0,
        template_location: str | None = None,
        shared_hold_seconds: float = 3_600.0,
        otlp_endpoint: str | None = None,
        otlp_headers: tuple[tuple[str, str], ...] | None = None,
        otlp_payloads: bool = False,
        origins: Mapping[str, str] | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "policies", policies)
        put(self, "policy_file", policy_file)
        put(self, "policy_cache_path", policy_cache_path)
        put(self, "policy_cache_max_age", policy_cache_max_age)
        put(self, "fail_mode", fail_mode)
        put(self, "enforcement", enforcement)
        put(self, "environment", environment)
        put(self, "risk_classification", risk_classification)
        put(self, "agent_id", agent_id)
        put(self, "agent_name", agent_name)
        put(self, "agent_purpose", agent_purpose)
        put(self, "agent_owner", agent_owner)
        put(self, "declared_tools", declared_tools)
        put(self, "project_root", project_root)
        put(self, "trusted_values", trusted_values)
        put(self, "capabilities", capabilities)
        put(self, "audit_location", audit_location)
        put(self, "audit_durability", audit_durability)
        put(self, "signing_key", signing_key)
        put(self, "checkpoint_file", checkpoint_file)
        put(self, "checkpoint_every", checkpoint_every)
        put(self, "payload_mode", payload_mode)
        put(self, "max_output_chars", max_output_chars)
        put(self, "max_output_items", max_output_items)
        put(self, "max_clock_skew_seconds", max_clock_skew_seconds)
        put(self, "evaluation_deadline_seconds", evaluation_deadline_seconds)
        put(self, "queue_size", queue_size)
        put(self, "exit_flush_seconds", exit_flush_seconds)
        put(self, "task_idle_seconds", task_idle_seconds)
        put(self, "sweep_interval_seconds", sweep_interval_seconds)
        put(self, "template_location", template_location)
        put(self, "shared_hold_seconds", shared_hold_seconds)
        put(self, "otlp_endpoint", otlp_endpoint)
        put(self, "otlp_headers", otlp_headers)
        put(self, "otlp_payloads", otlp_payloads)
        put(self, "origins", {} if origins is None else origins)
        self._check()

    # Where each value came from is not part of what the settings are.
    _UNCOMPARED = ("origins",)

    def _check(self) -> None:
        for name, spec in _SPECS.items():
            value = getattr(self, name)
            if value is None:
                continue
            object.__setattr__(self, name, _parse(name, spec, value))
        if self.policies is None and self.policy_file is None and self.policy_cache_path is None:
            raise ValueError(
                "no policy source is configured: set policies= / CHARTER_POLICIES (inline, [] "
                "to run with none), policy_file= / CHARTER_POLICY_FILE (YAML manifests) or "
                "policy_cache_path= / CHARTER_POLICY_CACHE_PATH (a saved policy set)"
            )
        if self.checkpoint_file is not None and self.signing_key is None:
            raise ValueError(
                f"{_spelling('checkpoint_file')} needs {_spelling('signing_key')}: checkpoints "
                "are signed, and an unsigned one proves nothing (create a key with charter "
                "keys create)"
            )
        if self.signing_key is not None and self.audit_location == "none":
            raise ValueError(
                f"{_spelling('signing_key')} needs an audit store: with audit_location= / "
                "CHARTER_AUDIT_LOCATION none there is no trail to sign"
            )
        object.__setattr__(self, "origins", dict(self.origins))

    @classmethod
    def from_sources(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> Settings:
        """Resolve every setting: keyword (not None), else ``CHARTER_<NAME>``, else default.

        `env` defaults to ``os.environ``; empty variables count as unset. Refuses unknown
        keywords (naming the closest setting) and everything `Settings` refuses.
        """
        unknown = sorted(set(kwargs) - set(_SPECS))
        if unknown:
            name = unknown[0]
            import difflib  # only to suggest a name for a typo

            close = difflib.get_close_matches(name, list(_SPECS), n=1)
            hint = f"; did you mean {close[0]}=?" if close else ""
            raise ValueError(f"unknown setting {name}={hint} (accepted: {', '.join(_SPECS)})")
        environ = os.environ if env is None else env
        values: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for name in _SPECS:
            if kwargs.get(name) is not None:
                values[name] = kwargs[name]
                origins[name] = "keyword"
                continue
            raw = environ.get(_env_name(name))
            if raw is not None and raw.strip():
                values[name] = raw
                origins[name] = "env"
        return cls(**values, origins=origins)

    def origin(self, name: str) -> str:
        """Where setting `name` came from: ``keyword``, ``env`` or ``default``."""
        if name not in _SPECS:
            raise ValueError(f"unknown setting {name}=")
        return self.origins.get(name, "default")

    def describe(self) -> list[tuple[str, str, str]]:
        """One row per setting: (name, value as text, where it came from)."""
        rows = []
        for name in _SPECS:
            rows.append((name, _display(name, getattr(self, name)), self.origin(name)))
        return rows

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes` applied as keywords (validated like new settings)."""
        origins = dict(self.origins)
        origins.update({name: "keyword" for name in changes})
        return super().replace(**changes, origins=origins)

    @staticmethod
    def names() -> tuple[str, ...]:
        """Every setting name, in documentation order."""
        return tuple(_SPECS)

    @staticmethod
    def env_var(name: str) -> str:
        """The environment variable of setting `name` (``CHARTER_`` + upper case)."""
        return _env_name(name)

    @staticmethod
    def meaning(name: str) -> str:
        """One line on what setting `name` does."""
        return _SPECS[name].meaning


def _parse(name: str, spec: _Spec, value: Any) -> Any:
    try:
        return spec.parse(value)
    except ValueError as exc:
        shown = f"{value!r:.80}"
        raise ValueError(f"{_spelling(name)}: {shown} is not accepted; use {exc}") from None


def _display(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if name == "otlp_headers":
        # Header values are often credentials (an API key, a bearer token): names only.
        return ", ".join(f"{header}=***" for header, _ in value) if value else "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if name == "policies":
        count = len(value)
        return f"{count} inline {'policy' if count == 1 else 'policies'}"
    if name == "capabilities":  # a Grant: the field's parser makes one
        return f"grants {value.describe()}"[:200]
    if isinstance(value, tuple):
        return ", ".join(value) if value else "-"
    if isinstance(value, float):
        return f"{value:g}"
    if name == "audit_location":
        # Imported here: only a described setting needs it, and a hook call describes none.
        from charter._audit.url import display_location

        return display_location(value)
    return str(value)
