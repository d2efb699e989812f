"""Finding and loading the shipped manifests (``charter_baseline/data/<name>.yaml``)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import charter

_SUFFIX = ".yaml"


def _data() -> Path:
    # The package is installed as plain files (hatchling wheel), so the data directory is a
    # real directory that manifests can be read from by path.
    return Path(str(resources.files("charter_baseline") / "data"))


def baseline_names() -> tuple[str, ...]:
    """The names of the shipped baselines, sorted (e.g. ``coding-agent``, ``tool-agent``)."""
    return tuple(sorted(p.name[: -len(_SUFFIX)] for p in _data().glob(f"*{_SUFFIX}")))


def baseline_path(name: str) -> Path:
    """The manifest file of baseline `name`.

    Raises ValueError, listing the shipped names, when there is no such baseline.
    """
    names = baseline_names()
    if name not in names:
        raise ValueError(f"unknown baseline {name!r}; the shipped baselines are {', '.join(names)}")
    return _data() / f"{name}{_SUFFIX}"


@functools.lru_cache(maxsize=8)
def _manifest(name: str) -> charter.ManifestResult:
    path = baseline_path(name)
    result = charter.parse_manifest(path.read_bytes(), source=str(path))
    if not result.valid:
        # Shipped data that does not load is a packaging bug; say so rather than run without it.
        raise charter.PolicyLoadError(result.error_lines(), f"baseline {name}")
    return result


def load_baseline_policies(name: str) -> list[charter.Policy]:
    """The policies of baseline `name`, checked, in manifest order (a new list each call).

    Raises ValueError for an unknown name and charter.PolicyLoadError if the shipped
    manifest does not load (a broken installation).
    """
    return list(_manifest(name).policies)


def baseline_description(name: str) -> str:
    """The one-paragraph description of baseline `name`; raises like `load_baseline_policies`."""
    return _manifest(name).description or ""
