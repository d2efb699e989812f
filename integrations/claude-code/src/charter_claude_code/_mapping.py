"""Claude Code tool calls as steps: the templates decide kind, verb and properties.

The only thing added here is what a template cannot know: where a file path really points.
Claude Code hands tools absolute paths, but a path inside the project can be a symlink to
anywhere, so each ``properties.target.path`` is resolved (``~`` expanded, relative paths
joined to the session's cwd, symlinks followed with realpath) into
``properties.target.resolved_path``, which Charter's path rules check next to the given path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from charter.integration import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
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
    import glob  # here: only a cache miss needs it

    folder = os.path.dirname(package_file)
    parts = [sys.version]
    for pattern in names or ("*.py",):
        for name in sorted(glob.glob(pattern, root_dir=folder)):
            st = os.stat(os.path.join(folder, name))
            parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
    return sha256_hex("\n".join(parts).encode())[:32]


def template_set(location: str | None, trusted: Mapping[str, Any] | None = None) -> Any:
    """The Claude Code templates (built-in, merged with the user file at `location`).

    `trusted` is the template part of the verified trusted record (`_trust.template_part`):
    the set is then built from its documents (plain data, no YAML parser), pinned like the
    policies: an edited template file (in the project or in site-packages) does not change
    how tool calls map until a person runs ``charter claude trust``. Nothing is ever
    unpickled or read from a file the pin does not vouch for. Without `trusted` (no pin),
    the files are read. Raises TemplateError for a user file that cannot be used.
    """
    import charter_templates

    if trusted is not None:
        try:
            return charter_templates.templates_from_documents(
                trusted["documents"], trusted.get("user")
            )
        except (charter_templates.TemplateError, KeyError, TypeError, ValueError):
            pass  # a record an older Charter wrote that no longer builds: read the files
    return charter_templates.load_templates(location)
