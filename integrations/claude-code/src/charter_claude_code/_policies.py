"""Where the hook's policies come from: manifest files (with a parse cache) and a baseline.

Each hook call is a new process, and parsing YAML manifests (safe, strict, pure-Python
loader) is one of the largest costs of a call. The manifests are therefore parsed once per
content change and kept as JSON under ``.charter/claude-code/``, keyed by each file's SHA-256
(so an edit is never missed, whatever the clock says) and by the Charter version. The cache is
only a fast path for files that are valid *now*: whenever a file cannot be read, is refused,
or clashes with another, the files go to Charter's own loader unchanged, which reports the
cause and applies the fail mode exactly as it would without the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "PolicySource", "baseline_policies", "policy_source"]

_CACHE_FORMAT = 1


class ConfigError(Exception):
    """The hook's own configuration cannot be used (the message says how to fix it)."""


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Settings keywords for the runner's policy sources, and where they came from.

    `keywords` holds ``policies`` (inline, from the baseline and/or the cache) and/or
    ``policy_file`` (for Charter's own loader); `monitor` says every manifest asked for
    ``enforcement: monitor``; `cached` says the manifests came from the parse cache.
    """

    keywords: dict[str, Any]
    monitor: bool
    cached: bool
    described: tuple[str, ...]


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


def _baseline_file(name: str) -> str | None:
    """The manifest file of baseline `name`, when the package exposes one.

    A baseline is a shipped manifest; read as a file it goes through the same parse cache
    and the same fail-mode handling as the user's own manifests.
    """
    module = _baseline_module(name)
    locate = getattr(module, "baseline_path", None)
    if locate is None:
        return None
    try:
        return str(locate(name))
    except Exception as exc:
        raise ConfigError(f"the baseline {name!r} could not be loaded: {exc}") from None


def policy_source(
    files: Sequence[str], baseline: str | None, cache_dir: Path | None, charter_version: str
) -> PolicySource:
    """The policy keywords for `files` (absolute paths) and `baseline`.

    Raises ConfigError for a missing baseline and when nothing is configured at all.
    """
    inline: list[Any] = []
    described = list(files)
    if baseline:
        found = _baseline_file(baseline)
        if found is None:
            inline = baseline_policies(baseline)
        else:
            files = [found, *files]
        described.insert(0, f"baseline {baseline}")
    if not files:
        if not baseline:
            raise ConfigError(
                "no policies are configured for the hook: install it with --policy FILE or "
                "--baseline NAME (charter claude install)"
            )
        return PolicySource({"policies": inline}, False, False, tuple(described))
    parsed = _manifests(files, cache_dir, charter_version)
    if parsed is None or _clash(inline, parsed[0]):
        keywords: dict[str, Any] = {"policy_file": list(files)}
        if inline:
            keywords["policies"] = inline
        return PolicySource(keywords, False, False, tuple(described))
    policies, monitor, cached = parsed
    return PolicySource(
        {"policies": [*inline, *policies]}, monitor and not inline, cached, tuple(described)
    )


def _clash(inline: list[Any], policies: list[dict[str, Any]]) -> bool:
    names = [_name(p) for p in inline] + [p.get("name") for p in policies]
    return len(names) != len(set(names))


def _name(policy: Any) -> Any:
    return policy.get("name") if isinstance(policy, Mapping) else getattr(policy, "name", None)


def _manifests(
    files: Sequence[str], cache_dir: Path | None, charter_version: str
) -> tuple[list[dict[str, Any]], bool, bool] | None:
    """(policies as mappings, all-monitor, from cache) or None when Charter must load them."""
    contents: list[bytes] = []
    for name in files:
        try:
            contents.append(Path(name).read_bytes())
        except OSError:
            return None
    digests = [hashlib.sha256(data).hexdigest() for data in contents]
    key = {
        "charter": charter_version,
        "files": [[f, d] for f, d in zip(files, digests, strict=True)],
    }
    cache = None
    if cache_dir is not None:
        label = hashlib.sha256("\0".join(files).encode("utf-8", "surrogatepass")).hexdigest()
        cache = cache_dir / f"policies-{label[:24]}.json"
        found = _read_cache(cache, key)
        if found is not None:
            return found[0], found[1], True
    from charter import parse_manifest

    policies: list[dict[str, Any]] = []
    monitor = True
    seen: set[str] = set()
    for name, data in zip(files, contents, strict=True):
        result = parse_manifest(data, source=name)
        if not result.valid:
            return None
        monitor = monitor and result.enforcement == "monitor"
        for p in result.policies:
            if p.name in seen:
                return None
            seen.add(p.name)
            policies.append(p.to_dict())
    if cache is not None:
        _write_cache(cache, key, policies, monitor)
    return policies, monitor, False


def _read_cache(path: Path, key: dict[str, Any]) -> tuple[list[dict[str, Any]], bool] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != _CACHE_FORMAT
        or data.get("key") != key
        or not isinstance(data.get("policies"), list)
        or not all(isinstance(p, dict) for p in data["policies"])
    ):
        return None
    return data["policies"], bool(data.get("monitor"))


def _write_cache(path: Path, key: dict[str, Any], policies: list[Any], monitor: bool) -> None:
    # Only a speed-up: a cache that cannot be written is simply rebuilt by a later call.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        payload = {"format": _CACHE_FORMAT, "key": key, "monitor": monitor, "policies": policies}
        tmp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
