"""Where the hook's policies come from: manifest files and a baseline.

With a pin (``--pin``, written by `charter claude install`) the policy set comes from the
trusted record (see `_trust`), never from the files directly. Without one, the files are read
by Charter's own loader on every call: no parse cache, because a cache the agent can write
and the hook cannot check would be a way around the policies.
"""

from __future__ import annotations

from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ConfigError", "PolicySource", "baseline_file", "baseline_policies", "policy_source"]


class ConfigError(Exception):
    """The hook's own configuration cannot be used (the message says how to fix it)."""


class PolicySource:
    """Settings keywords for the runner's policy sources, and where they came from.

    `keywords` holds ``policies`` (inline: a baseline without a file, or the trusted
    record's) and/or ``policy_file`` (for Charter's own loader); `pinned` says they come
    from a verified trusted record; `changed` says the files no longer match it (the
    trusted set stays in force).
    """

    __slots__ = ("changed", "described", "keywords", "pinned")

    def __init__(
        self, keywords: dict[str, Any], pinned: bool, changed: bool, described: tuple[str, ...]
    ) -> None:
        self.keywords = keywords
        self.pinned = pinned
        self.changed = changed
        self.described = described

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PolicySource):
            return NotImplemented
        return (self.keywords, self.pinned, self.changed, self.described) == (
            other.keywords,
            other.pinned,
            other.changed,
            other.described,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PolicySource(keywords={self.keywords!r}, pinned={self.pinned!r}, "
            f"changed={self.changed!r}, described={self.described!r})"
        )


def _baseline_module(name: str) -> Any:
    try:
        import charter_baseline
    except ImportError:
        raise ConfigError(
            f"the baseline {name!r} needs the charter-baseline package, which is not installed "
            "in the hook's Python: pip install charter-baseline (or pass --policy FILE instead)"
        ) from None
    return charter_baseline


def baseline_policies(name: str) -> list[Any]:
    """The policies of baseline `name` (``charter_baseline.load_baseline_policies``).

    Raises ConfigError when the package is missing (naming the install command) or when it
    refuses the name.
    """
    module = _baseline_module(name)
    try:
        policies = module.load_baseline_policies(name)
    except Exception as exc:
        raise ConfigError(f"the baseline {name!r} could not be loaded: {exc}") from None
    return list(policies)


def baseline_file(name: str) -> str | None:
    """The manifest file of baseline `name`, when the package exposes one.

    A baseline is a shipped manifest; read as a file it goes through the same loader and
    the same fail-mode handling as the user's own manifests.
    """
    module = _baseline_module(name)
    locate = getattr(module, "baseline_path", None)
    if locate is None:
        return None
    try:
        return str(locate(name))
    except Exception as exc:
        raise ConfigError(f"the baseline {name!r} could not be loaded: {exc}") from None


def policy_source(files: Sequence[str], baseline: str | None) -> PolicySource:
    """The policy keywords for `files` (absolute paths) and `baseline`, read live.

    Raises ConfigError for a missing baseline and when nothing is configured at all.
    """
    inline: list[Any] = []
    described = list(files)
    if baseline:
        found = baseline_file(baseline)
        if found is None:
            inline = baseline_policies(baseline)
        else:
            files = [found, *files]
        described.insert(0, f"baseline {baseline}")
    if not files and not baseline:
        raise ConfigError(
            "no policies are configured for the hook: install it with --policy FILE or "
            "--baseline NAME (charter claude install)"
        )
    keywords: dict[str, Any] = {"policies": inline}
    if files:
        keywords["policy_file"] = list(files)
    return PolicySource(keywords, False, False, tuple(described))
