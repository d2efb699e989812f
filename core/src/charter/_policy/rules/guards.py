"""Step guards that need no history: time windows, paths inside the project, secrets.

All three are pure functions of the step (and the evaluation context): `time_window` reads
only the step's own timestamp, `path_within_root` normalises paths lexically with posixpath
and never touches the filesystem, `no_secrets` scans with the shared shapes of
`charter._policy.secrets` so the rule and the audit redactor agree on what a secret is.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterator
from datetime import datetime

from charter._model.behavior import Behavior
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.paths import FieldPath, parse_path
from charter._policy.registry import Violation, rule
from charter._policy.secrets import contains_secret, find_secrets, shape_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any
    from zoneinfo import ZoneInfo

__all__ = ["no_secrets", "path_within_root", "time_window"]

Verdict = bool | Violation

# -- time_window -------------------------------------------------------------------------------

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_RANGE = r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]|24):([0-5][0-9])"


class _TimeWindow(Frozen):
    __slots__ = ("days", "ranges", "texts", "zone", "zone_name")
    zone: ZoneInfo
    zone_name: str
    days: frozenset[int] | None
    # (start, end) in seconds after local midnight; end exclusive; start > end crosses midnight
    ranges: tuple[tuple[int, int], ...] | None
    texts: tuple[str, ...]

    def __init__(
        self,
        zone: ZoneInfo,
        zone_name: str,
        days: frozenset[int] | None,
        ranges: tuple[tuple[int, int], ...] | None,
        texts: tuple[str, ...],
    ) -> None:
        put = object.__setattr__
        put(self, "zone", zone)
        put(self, "zone_name", zone_name)
        put(self, "days", days)
        put(self, "ranges", ranges)
        put(self, "texts", texts)


def _prepare_time_window(params: dict[str, Any]) -> _TimeWindow:
    from zoneinfo import ZoneInfo  # deferred: only a time_window policy needs the zone data

    days = params.get("weekdays")
    hours = params.get("hours")
    if days is None and hours is None:
        raise ValueError("give weekdays, hours or both; without them every time complies")
    ranges: list[tuple[int, int]] = []
    for text in hours or ():
        m = re.fullmatch(_RANGE, text)
        if m is None:
            raise ValueError(
                f"hours {text!r}: write HH:MM-HH:MM, e.g. '09:00-17:30' or '22:00-06:00'"
            )
        h1, m1, h2, m2 = map(int, m.groups())
        start, end = (h1 * 60 + m1) * 60, (h2 * 60 + m2) * 60
        if end > 24 * 3600:
            raise ValueError(f"hours {text!r}: the latest end is 24:00")
        if start == end:
            raise ValueError(f"hours {text!r}: empty range; use '00:00-24:00' for the whole day")
        ranges.append((start, end))
    return _TimeWindow(
        ZoneInfo(params["timezone"]),
        params["timezone"],
        frozenset(_DAYS.index(d) for d in days) if days is not None else None,
        tuple(ranges) if hours is not None else None,
        tuple(hours or ()),
    )


def _in_range(t: float, start: int, end: int) -> bool:
    if start < end:
        return start <= t < end
    return t >= start or t < end


@rule(
    name="time_window",
    description=(
        "The step's own timestamp, read in `timezone`, must fall on one of `weekdays` and "
        "inside one of the `hours` ranges ('09:00-17:30': start inclusive, end exclusive; "
        "'22:00-06:00' crosses midnight). Weekday and hour are checked separately on the local "
        "time, so Saturday 02:00 is a Saturday even inside a Friday-night range."
    ),
    params_schema={
        "type": "object",
        "required": ["timezone"],
        "properties": {
            "timezone": {"type": "string", "format": "timezone"},
            "weekdays": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": list(_DAYS)},
            },
            "hours": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
                "description": "Local time ranges 'HH:MM-HH:MM', end exclusive, e.g. 09:00-17:30.",
            },
        },
    },
    example_params={
        "timezone": "Europe/Amsterdam",
        "weekdays": ["mon", "tue", "wed", "thu", "fri"],
        "hours": ["09:00-17:30"],
    },
    prepare=_prepare_time_window,
    _builtin=True,
)
def time_window(view: Behavior, p: _TimeWindow, ctx: RuleContext) -> Verdict:
    local: datetime = view.timestamp.astimezone(p.zone)
    if p.days is not None and local.weekday() not in p.days:
        allowed = ", ".join(d for i, d in enumerate(_DAYS) if i in p.days)
        return Violation(f"{_when(local, p)} is not on an allowed weekday ({allowed})")
    if p.ranges is not None:
        t = local.hour * 3600 + local.minute * 60 + local.second + local.microsecond / 1e6
        if not any(_in_range(t, s, e) for s, e in p.ranges):
            return Violation(
                f"{_when(local, p)} is outside the allowed hours ({', '.join(p.texts)})"
            )
    return True


def _when(local: datetime, p: _TimeWindow) -> str:
    return f"{local:%a %Y-%m-%d %H:%M} {p.zone_name}"


# -- path_within_root --------------------------------------------------------------------------

_DEFAULT_PATH_FIELDS = (
    "properties.target.path",
    "properties.target.resolved_path",
    "input.path",
    "input.file_path",
)


class _PathWithin(Frozen):
    __slots__ = (
        "fields",
        "home",
        "roots",
    )
    fields: tuple[FieldPath, ...]
    roots: tuple[str, ...]
    home: str | None

    def __init__(
        self,
        fields: tuple[FieldPath, ...],
        roots: tuple[str, ...],
        home: str | None,
    ) -> None:
        put = object.__setattr__
        put(self, "fields", fields)
        put(self, "roots", roots)
        put(self, "home", home)


def _clean(path: str) -> str:
    """Lexically normalised absolute path: one leading slash (POSIX lets '//' mean something
    else, which must not sneak past a prefix check), no '.', '..' or repeated separators."""
    return posixpath.normpath("/" + path.lstrip("/"))


@functools.lru_cache(maxsize=64)
def _clean_root(root: str) -> str:
    return _clean(root)


def _prepare_path_within(params: dict[str, Any]) -> _PathWithin:
    home = params.get("home")
    if home is not None and not home.startswith("/"):
        raise ValueError(f"home {home!r}: must be an absolute path")
    roots = []
    for root in params.get("roots", ()):
        if not root.startswith("/"):
            raise ValueError(f"roots: {root!r} is not an absolute path")
        roots.append(_clean(root))
    fields = params.get("fields", _DEFAULT_PATH_FIELDS)
    return _PathWithin(
        tuple(parse_path(f) for f in fields),
        tuple(roots),
        _clean(home) if home is not None else None,
    )


def _inside(path: str, root: str) -> bool:
    # A plain prefix test would put /srv/app2 inside /srv/app.
    return path == root or path.startswith(root if root == "/" else root + "/")


def _path_problem(raw: str, p: _PathWithin, project_root: str | None) -> str | None:
    """Why `raw` is not inside an allowed root, or None when it is."""
    if not raw:
        return "is empty"
    if "\x00" in raw:
        return "contains a NUL byte"
    if "\\" in raw:
        return "contains a backslash; only POSIX paths are understood"
    path = raw
    if path.startswith("file:"):
        from urllib.parse import unquote, urlsplit  # only file: URLs need it

        path = unquote(urlsplit(path).path)
    if path == "~" or path.startswith("~/"):
        if p.home is None:
            return "starts with '~' and the policy sets no `home` to expand it to"
        path = p.home + path[1:]
    elif path.startswith("~"):
        return "names another user's home directory ('~user'), which cannot be resolved"
    roots = list(p.roots)
    if project_root is not None:
        if not project_root.startswith("/"):
            return f"cannot be checked: the project root {project_root!r} is not absolute"
        roots.insert(0, _clean_root(project_root))
    if not path.startswith("/"):
        if project_root is None:
            return "is relative and no project root is known to resolve it against"
        path = roots[0] + "/" + path
    normal = _clean(path)
    if not roots:
        return "cannot be checked: no project root is known and the policy lists no roots"
    if any(_inside(normal, r) for r in roots):
        return None
    where = "the project root" if project_root is not None else "the allowed roots"
    return f"resolves to {normal!r}, outside {where} ({', '.join(roots)})"


@rule(
    name="path_within_root",
    description=(
        "Every path at `fields` must lie inside the project root (the context's project_root) "
        "or one of `roots`, after lexical normalisation ('.', '..', repeated slashes; relative "
        "paths are joined to the project root). '~' expands to `home` and violates without it; "
        "a relative path with no project root known violates. Integrations put the resolved "
        "real path in properties.target.resolved_path, which is checked too. POSIX only: a "
        "backslash violates."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "fields": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "format": "path"},
                "description": "Default: " + ", ".join(_DEFAULT_PATH_FIELDS) + ".",
            },
            "roots": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
                "description": "More absolute directories the paths may lie in.",
            },
            "home": {"type": "string", "minLength": 1, "description": "What '~' expands to."},
        },
    },
    example_params={"roots": ["/tmp/agent-scratch"]},
    prepare=_prepare_path_within,
    _builtin=True,
)
def path_within_root(view: Behavior, p: _PathWithin, ctx: RuleContext) -> Verdict:
    project_root = ctx.context.project_root
    for path in p.fields:
        for value in _strings(path.resolve(view)):
            problem = _path_problem(value, p, project_root)
            if problem is not None:
                return Violation(f"{path.text} {value!r:.120} {problem}")
    return True


def _strings(values: list[Any]) -> Iterator[str]:
    for v in values:
        if isinstance(v, str):
            yield v
        elif isinstance(v, list):
            yield from _strings(v)


# -- no_secrets --------------------------------------------------------------------------------


class _NoSecrets(Frozen):
    __slots__ = (
        "fields",
        "shapes",
    )
    fields: tuple[FieldPath, ...]
    shapes: tuple[str, ...] | None

    def __init__(
        self,
        fields: tuple[FieldPath, ...],
        shapes: tuple[str, ...] | None,
    ) -> None:
        put = object.__setattr__
        put(self, "fields", fields)
        put(self, "shapes", shapes)


def _prepare_no_secrets(params: dict[str, Any]) -> _NoSecrets:
    shapes = params.get("shapes")
    if shapes is not None:
        known = set(shape_names())
        unknown = [s for s in shapes if s not in known]
        if unknown:
            raise ValueError(
                f"shapes: unknown secret shape(s) {', '.join(map(repr, unknown))}; "
                f"known shapes: {', '.join(shape_names())}"
            )
    return _NoSecrets(
        tuple(parse_path(f) for f in params.get("fields", ("input",))),
        tuple(shapes) if shapes is not None else None,
    )


def _located(value: Any, where: str, out: list[tuple[str, str]], depth: int = 0) -> None:
    """Append every string in `value` to `out`, with the dotted path that holds it."""
    if isinstance(value, str):
        out.append((where, value))
    elif depth < 64:
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, str):
                    out.append((f"{where}.{k}", v))
                elif isinstance(v, (dict, list)):
                    _located(v, f"{where}.{k}", out, depth + 1)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                _located(v, f"{where}[{i}]", out, depth + 1)


@rule(
    name="no_secrets",
    description=(
        "No string at `fields` (default: the whole input, searched through nested objects and "
        "lists) may contain a known secret shape (API keys, tokens, private keys, passwords in "
        "assignments or URLs); `shapes` limits the check to some shapes. The detail names the "
        "shape and where it is, never the secret."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "fields": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "format": "path"},
            },
            "shapes": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
                "description": "Secret shape names (see charter._policy.secrets.shape_names()).",
            },
        },
    },
    example_params={"fields": ["input"], "shapes": ["github_token", "aws_access_key_id"]},
    prepare=_prepare_no_secrets,
    _builtin=True,
)
def no_secrets(view: Behavior, p: _NoSecrets, ctx: RuleContext) -> Verdict:
    located: list[tuple[str, str]] = []
    for path in p.fields:
        found = path.resolve(view)
        for i, value in enumerate(found):
            where = path.text if len(found) == 1 else f"{path.text} (item {i})"
            _located(value, where, located)
    if not located:
        return True
    # One scan of all strings joined is far cheaper than one per string; only a hit pays for
    # the per-string scan that names the shape and the field (and drops a "secret" that only
    # appeared across the join).
    if not contains_secret("\n".join(text for _, text in located), p.shapes):
        return True
    for location, text in located:
        findings = find_secrets(text, p.shapes)
        if findings:
            return Violation(f"{location} contains a secret shaped like {findings[0].shape}")
    return True
