"""Claude Code tool calls as steps: the templates decide kind, verb and properties.

The only thing added here is what a template cannot know: where a file path really points.
Claude Code hands tools absolute paths, but a path inside the project can be a symlink to
anywhere, so each ``properties.target.path`` is resolved (``~`` expanded, relative paths
joined to the session's cwd, symlinks followed with realpath) into
``properties.target.resolved_path``, which Charter's path rules check next to the given path.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["PROMPT_STEP", "code_stamp", "refine", "resolve_path", "template_set"]

# The step name of a user prompt (UserPromptSubmit), for policies that match it by name.
PROMPT_STEP = "user_prompt"


def resolve_path(path: str, cwd: str) -> str:
    """`path` as the filesystem would resolve it from `cwd`: ``~`` expanded, made absolute,
    ``..`` removed and every symlink followed (a missing tail is kept as written)."""
    p = os.path.expanduser(path) if path.startswith("~") else path
    if not os.path.isabs(p):
        p = os.path.join(cwd, p)
    return os.path.realpath(p)


def _resolved(value: Any, cwd: str) -> Any:
    if isinstance(value, str):
        return resolve_path(value, cwd) if value else value
    if isinstance(value, list):
        return [resolve_path(v, cwd) for v in value if isinstance(v, str) and v]
    return None


def refine(properties: dict[str, Any], kind: str, cwd: str) -> None:
    """Add what a template cannot know to a Claude Code tool step's `properties` (in place):
    ``target.resolved_path`` (symlinks followed, relative to the session's `cwd`) and, for a
    ``step.exec``, ``exec.cwd``. Never raises on odd input."""
    target = properties.get("target")
    if isinstance(target, dict) and "path" in target:
        resolved = _resolved(target["path"], cwd)
        if resolved:
            properties["target"] = {**target, "resolved_path": resolved}
    if kind == "step.exec":
        exec_props = properties.get("exec")
        if exec_props is None or isinstance(exec_props, dict):
            properties["exec"] = {"cwd": cwd, **(exec_props or {})}


def code_stamp(package_file: str, *names: str) -> str:
    """A cheap fingerprint of a package's code and data: name, mtime and size of its files.

    Caches built from a package's output are keyed by it, so an upgrade (or an edit in an
    editable install) invalidates them without reading package metadata.
    """
    folder = Path(package_file).parent
    parts = [sys.version]
    for pattern in names or ("*.py",):
        for f in sorted(folder.glob(pattern)):
            st = f.stat()
            parts.append(f"{f.relative_to(folder)}:{st.st_mtime_ns}:{st.st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def template_set(location: str | None, cache_dir: Path | None) -> Any:
    """The Claude Code templates (built-in, merged with the user file at `location`).

    Parsing the template YAML is a large share of a hook call, and every call is a new
    process, so the parsed set is kept as a pickle under `cache_dir`, keyed by the templates
    package's files and the user file's content. Loading a pickle from the project trusts
    that folder exactly as much as the interpreter already trusts its own site-packages:
    both are writable by the same user, and neither by anything Charter gates less.
    Raises TemplateError for a user file that cannot be used.
    """
    import pickle

    import charter_templates

    key = code_stamp(charter_templates.__file__, "*.py", "data/*.yaml")
    if location:
        data = Path(location).read_bytes() if os.path.exists(location) else b""
        key = hashlib.sha256(f"{key}:{location}:".encode() + data).hexdigest()[:32]
    cache = cache_dir / f"templates-{key}.pickle" if cache_dir is not None else None
    if cache is not None:
        try:
            found = pickle.loads(cache.read_bytes())
        except Exception:
            found = None
        if isinstance(found, charter_templates.TemplateSet):
            return found
    templates = charter_templates.load_templates(location)
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps(templates, protocol=pickle.HIGHEST_PROTOCOL))
            os.replace(tmp, cache)
        except Exception:  # only a speed-up; the next call tries again
            pass
    return templates
