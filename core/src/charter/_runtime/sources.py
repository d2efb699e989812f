"""Where the runner's policy set comes from: inline policies, manifest files and a cache.

The set is loaded whole or not at all. Manifest files are re-read when they change on disk;
the check is a `stat` per file at most once per second on the evaluate path, which is cheaper
than a watcher thread and needs no platform support. A refused or unreadable reload keeps the
last good set in force and reports `stale` with the cause. The last good set read from files
is saved to the cache (when configured) and used at startup when the files cannot be.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from charter._engine.engine import PolicyEngine
from charter._model import stdjson
from charter._model.errors import PolicyLoadError
from charter._policy.policy import Policy, compile_policies
from charter._runtime.atomic import write_atomically
from charter._runtime.internal import charter_logger, report_internal_error
from charter._runtime.settings import Settings

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PolicySources"]


_CHECK_EVERY = 1.0
_CACHE_FORMAT = 1

UNREADABLE = "file unreadable"
REFUSED = "set refused"
EXPIRED = "cache expired"

Stamp = tuple[int, int, int] | None


def _stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _first(problems: list[str]) -> str:
    text = problems[0] if problems else "unknown problem"
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more)"
    return text


class _Failure(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class PolicySources:
    """Loads the policy set into `engine` and tracks its state; thread-safe.

    `state` is `enforcing`, `none_configured` (the sources answered with an empty set),
    `unavailable` (nothing could be loaded) or `stale` (a set is in force but it is not what
    the sources say now); `cause` says why for the last two, beginning with one of
    "file unreadable", "set refused" or "cache expired".
    """

    def __init__(self, settings: Settings, engine: PolicyEngine) -> None:
        self._settings = settings
        self._engine = engine
        self._inline: tuple[Policy | Mapping[str, Any], ...] = settings.policies or ()
        # Paths as text (os.path, not pathlib: it imports urllib.parse and ipaddress, which
        # a process that lives for one decision would load for nothing).
        self._files = tuple(os.fspath(p) for p in settings.policy_file or ())
        self._cache = os.fspath(settings.policy_cache_path) if settings.policy_cache_path else None
        self._max_age = settings.policy_cache_max_age
        self._lock = threading.Lock()
        self._stamps: tuple[Stamp, ...] = ()
        self._next_check = 0.0
        self._loaded = False
        self._kind: str | None = None
        self._detail: str | None = None
        self._cache_saved_at: float | None = None
        self._from_cache = False
        self.source = "none"
        self.manifests_monitor = False
        self.reloads = 0

    # -- loading ------------------------------------------------------------------------------

    def load_initial(self) -> None:
        """Load from the configured sources; never raises for file or cache problems.

        Raises PolicyLoadError when the inline policies themselves are invalid: they are code,
        and a program that hands over a broken set should hear so at once.
        """
        compiled: list[Any] = []
        if self._inline:
            compiled, problems = compile_policies(self._inline, "policies=")
            if problems:
                raise PolicyLoadError([str(p) for p in problems], "policies= (inline)")
        with self._lock:
            if self._files:
                self._reload_files()
                if not self._loaded:
                    self._load_cache()
            elif self._settings.policies is not None:
                # The set just checked and compiled, not compiled a second time.
                self._apply(compiled, "policies= (inline)", monitor=False)
            else:
                self._load_cache()
            self._next_check = time.monotonic() + _CHECK_EVERY

    def maybe_reload(self) -> None:
        """Re-read the manifests if any changed on disk; checks at most once per second."""
        if not self._files:
            return
        now = time.monotonic()
        if now < self._next_check or not self._lock.acquire(blocking=False):
            return
        try:
            self._next_check = now + _CHECK_EVERY
            stamps = tuple(_stamp(p) for p in self._files)
            if stamps != self._stamps:
                self.reloads += 1
                self._reload_files()
        finally:
            self._lock.release()

    def _reload_files(self) -> None:
        self._stamps = tuple(_stamp(p) for p in self._files)
        try:
            policies, monitor = self._read_files()
            combined = [*self._inline, *policies]
            label = ", ".join(str(p) for p in self._files)
            self._apply(combined, label, monitor=monitor)
        except _Failure as failure:
            self._kind, self._detail = failure.kind, failure.detail
            kept = "the last good set stays in force" if self._loaded else "no set is in force"
            charter_logger().warning(
                "charter: policy reload refused (%s: %s); %s", failure.kind, failure.detail, kept
            )
            return
        self._save_cache()

    def _read_files(self) -> tuple[list[Policy], bool]:
        problems: list[str] = []
        unreadable: list[str] = []
        policies: list[Policy] = []
        owner: dict[str, str] = {}
        monitor = True
        for path in self._files:
            source = path
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as exc:
                unreadable.append(f"{source}: cannot be read ({exc.strerror or exc})")
                continue
            # The manifest loader loads with the first file: a runner given its policies
            # (a hook call's pinned set) never reads one.
            from charter._policy.manifest import parse_manifest

            result = parse_manifest(data, source=source)
            problems.extend(result.error_lines())
            monitor = monitor and result.enforcement == "monitor"
            for p in result.policies:
                if p.name in owner:
                    problems.append(
                        f"{source}: policy {p.name!r}: name: also defined in {owner[p.name]}; "
                        "policy names must be unique across manifests"
                    )
                owner[p.name] = source
                policies.append(p)
        if unreadable:
            raise _Failure(UNREADABLE, _first(unreadable + problems))
        if problems:
            raise _Failure(REFUSED, _first(problems))
        return policies, monitor

    def _apply(self, policies: list[Any], label: str, *, monitor: bool) -> None:
        try:
            self._engine.load_policies(policies, source=label)
        except PolicyLoadError as exc:
            raise _Failure(REFUSED, _first(exc.problems)) from None
        self._loaded = True
        self._from_cache = False
        self._kind = self._detail = None
        self.source = label
        self.manifests_monitor = monitor and not self._inline

    # -- cache --------------------------------------------------------------------------------

    def _save_cache(self) -> None:
        if self._cache is None:
            return
        try:
            payload = {
                "charter_policy_cache": _CACHE_FORMAT,
                "saved_at": datetime.now(UTC).isoformat(),
                "source": self.source,
                "monitor": self.manifests_monitor,
                "policies": [p.to_dict() for p in self._engine.policies],
            }
            text = stdjson.dumps(payload, indent=1, sort_keys=True)
            write_atomically(self._cache, text.encode("utf-8"))
        except Exception as exc:  # the cache only helps later starts; it must not stop this one
            report_internal_error(exc, "policy cache write")

    def _load_cache(self) -> None:
        if self._cache is None:
            if not self._files and self._kind is None:
                self._kind, self._detail = UNREADABLE, "no policy source answered"
            return
        why = f"{self._kind}: {self._detail}" if self._kind else None
        try:
            with open(self._cache, encoding="utf-8") as f:
                data = stdjson.loads(f.read())
            if not isinstance(data, dict) or data.get("charter_policy_cache") != _CACHE_FORMAT:
                raise ValueError("not a Charter policy cache")
            saved = datetime.fromisoformat(data["saved_at"]).timestamp()
            self._engine.load_policies(data["policies"], source=f"cache {self._cache}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if why is None:
                self._kind = UNREADABLE
                self._detail = f"policy cache {self._cache} cannot be used ({exc})"
            return
        self._loaded = True
        self._from_cache = True
        self._cache_saved_at = saved
        self.source = f"cache {self._cache}"
        self.manifests_monitor = bool(data.get("monitor", False))
        # The files' own problem stays the cause: the cache is only standing in for them.
        if why is None:
            self._kind = self._detail = None

    # -- state --------------------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """True when some policy set (possibly empty, possibly stale) is in force."""
        return self._loaded

    def state(self) -> tuple[str, str | None]:
        """(state, cause); see the class docstring."""
        kind, detail = self._kind, self._detail
        if self._from_cache and self._cache_saved_at is not None:
            age = time.time() - self._cache_saved_at
            if age > self._max_age:
                kind = EXPIRED
                detail = (
                    f"the cached policy set in {self._cache} is {age:.0f} s old (more than "
                    f"policy_cache_max_age= / CHARTER_POLICY_CACHE_MAX_AGE {self._max_age:g})"
                )
        if not self._loaded:
            return "unavailable", f"{kind}: {detail}" if kind else None
        if kind is not None:
            return "stale", f"{kind}: {detail}"
        report = self._engine.load_report()
        return report.state, None

    @property
    def detail(self) -> str:
        """The bare problem text of the current cause (for block reasons)."""
        return self._detail or "no policy source answered"
