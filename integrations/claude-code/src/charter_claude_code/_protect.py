"""Self-protection: the tool calls that would change what governs the agent are refused.

The governed agent runs with the same privileges as its hook, so anything Charter reads to
decide (the policy files, ``.claude/settings*.json`` with the hook command, ``.charter/``
with the trail, the trusted policy copy and the session state, the hook's own code, and what
its interpreter imports and runs before Charter does: see `_import_path` and `_native_code`)
is a file the agent could rewrite. An always-on policy (`POLICY`, added to every policy set
the hook judges with) refuses every step whose ``properties.claude.protected`` names such a
path; `touched` computes that list for Write, Edit, MultiEdit, NotebookEdit and Bash. The
decision server's folder (``~/.charter/serve/``: its key and token) is protected against
reading too (Read, Grep, Glob, LS, NotebookRead): a process that knew the key could pose as
the server.

Paths are resolved through symlinks. Bash is judged conservatively on its text and on core's
parsed view of it (``properties.exec.shell``: words and redirection targets of every simple
command, from the directory it runs in after ``cd``): every word
after quote removal (and ``~`` / ``$HOME`` / ``$CLAUDE_PROJECT_DIR`` / ``$PWD`` expansion,
globs expanded against the filesystem), and the parts of a word after ``=`` or ``:``, is
taken as a path; one that is, or lies inside, a protected path is refused. So is a folder
that holds one (moved away and replaced, it replaces what it held): named by any command but
a reader (``ls``, ``cat``, ...) where its parent is writable, except the working directory,
the project, the home and the folders above them; and removed or moved away (``rm``, ``mv``,
what core's view lists as deleted) whatever it is. A command that
builds a path at run time (``$(...)``, a script it wrote, an interpreter's own string
handling) is beyond any reading of its text: `charter claude install`'s pins and the trail
anchor (see `_trust`) catch what such a command could change.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping, Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Any

__all__ = ["POLICY", "POLICY_NAME", "Protected", "protected_for", "touched"]

POLICY_NAME = "charter-self-protection"
POLICY: dict[str, Any] = {
    "name": POLICY_NAME,
    "description": (
        "The agent must not change what governs it: the policy files, the Claude Code "
        "settings holding the hook, Charter's .charter/ folder (trail, trusted policy copy, "
        "session state) and the hook's own code."
    ),
    "rule_type": "field_matches",
    "severity": "critical",
    "match": {"kinds": ["step.exec", "step.resource"]},
    "params": {"field": "properties.claude.protected", "pattern": ".", "if_missing": "comply"},
}

_FILE_TOOLS = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}
# Tools that read: refused only where they would reach the decision server's secrets.
_READ_TOOLS = {
    "Read": "file_path",
    "NotebookRead": "notebook_path",
    "Grep": "path",
    "Glob": "path",
    "LS": "path",
}
_SETTINGS = "settings*.json"
_GLOB_LIMIT = 200


class Protected:
    """Real paths that are protected: `files` exactly, `trees` with everything inside,
    `settings_dirs` whose ``settings*.json`` files (and the folder itself) are, and in each
    folder of `shadowing` (given ending in the separator) the entries named after a module
    in its set (``json``, ``json.py``,
    ``json/__init__.py``, ``json.cpython-311-x86_64-linux-gnu.so``,
    ``__pycache__/json.cpython-311.pyc``: what the import system would load instead of the
    module). Immutable and compared by value."""

    __slots__ = ("_holders", "files", "secrets", "settings_dirs", "shadowing", "trees")
    files: frozenset[str]
    trees: frozenset[str]
    settings_dirs: frozenset[str]
    secrets: frozenset[str]
    shadowing: tuple[tuple[str, frozenset[str]], ...]
    _holders: frozenset[str] | None  # computed on first use by `holds`

    def __init__(
        self,
        files: frozenset[str],
        trees: frozenset[str],
        settings_dirs: frozenset[str],
        secrets: frozenset[str] = frozenset(),
        shadowing: tuple[tuple[str, frozenset[str]], ...] = (),
    ) -> None:
        set_ = object.__setattr__
        set_(self, "files", files)
        set_(self, "trees", trees)
        set_(self, "settings_dirs", settings_dirs)
        set_(self, "secrets", secrets)
        set_(self, "shadowing", shadowing)
        set_(self, "_holders", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Protected is immutable: cannot set {name!r}")

    def _fields(self) -> tuple[object, ...]:
        return (self.files, self.trees, self.settings_dirs, self.secrets, self.shadowing)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Protected):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Protected(files={self.files!r}, trees={self.trees!r}, "
            f"settings_dirs={self.settings_dirs!r}, secrets={self.secrets!r}, "
            f"shadowing={self.shadowing!r})"
        )

    def reveals(self, real: str) -> bool:
        """Whether reading `real` (a file, or a folder searched recursively) would reach
        a secret tree: the decision server's key, which a fake server would need."""
        for tree in self.secrets:
            inside = real == tree or real.startswith(tree.rstrip(os.sep) + os.sep)
            # A search of a folder holding the secrets, from Charter's own folder down.
            parent = os.path.dirname(tree)
            above = tree.startswith(real.rstrip(os.sep) + os.sep) and (
                real == parent or real.startswith(parent.rstrip(os.sep) + os.sep)
            )
            if inside or above:
                return True
        return False

    def holds(self, real: str) -> bool:
        """Whether the folder `real` holds a protected path (is a proper ancestor of one):
        moved away or removed, and replaced, it would replace what it held."""
        holders = self._holders
        if holders is None:
            above: set[str] = set()
            for path in (
                *self.files,
                *self.trees,
                *self.settings_dirs,
                *self.secrets,
                # An entry of a shadowing folder: the folder (which ends in the separator)
                # holds what it would shadow.
                *(folder + "*" for folder, _ in self.shadowing),
            ):
                _up(os.path.dirname(path), above)
            holders = frozenset(above)
            object.__setattr__(self, "_holders", holders)
        return real in holders

    def covers(self, real: str) -> bool:
        if real in self.files or real in self.settings_dirs:
            return True
        if any(real == t or real.startswith(t.rstrip(os.sep) + os.sep) for t in self.trees):
            return True
        parent, name = os.path.split(real)
        if parent in self.settings_dirs and fnmatch.fnmatch(name, _SETTINGS):
            return True
        for folder, modules in self.shadowing:
            if real.startswith(folder):
                entry, _, rest = real[len(folder) :].partition(os.sep)
                if entry == "__pycache__":
                    # __pycache__/json.cpython-311.pyc is run in place of json.py beside it.
                    entry = rest.partition(os.sep)[0]
                if entry.split(".", 1)[0] in modules:
                    return True
        return False


def _real(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (UnicodeEncodeError, ValueError):
        # A word the file system cannot name (a lone surrogate, a NUL byte) is no file and
        # no symlink: it is compared as written, so it can still name a protected path.
        return os.path.normpath(os.path.abspath(path))


def _find_spec(package: str) -> ModuleSpec | None:
    """`importlib.util.find_spec` of a top-level `package`, without importing importlib.util
    (with importlib, importlib._abc and warnings: modules a hook call would load for this
    alone): a loaded package's own spec, else the first the import system's finders give."""
    import sys

    module = sys.modules.get(package)
    if module is not None:
        spec: ModuleSpec | None = module.__spec__
        return spec
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        found: ModuleSpec | None = None if find is None else find(package, None)
        if found is not None:
            return found
    return None


def protected_for(
    root: str,
    policy_files: Iterable[str],
    audit_location: str,
    environ: Mapping[str, str],
) -> Protected:
    """What the hook of the project `root` protects (all as real paths)."""
    files = {_real(f) for f in policy_files}
    trees = {_real(os.path.join(root, ".charter"))}
    # The code and data that decide: the hook, Charter, the templates and the baselines.
    for package in ("charter_claude_code", "charter", "charter_templates", "charter_baseline"):
        spec = _find_spec(package)
        if spec is not None and spec.origin:
            trees.add(os.path.dirname(_real(spec.origin)))
    settings = {_real(os.path.join(root, ".claude"))}
    secrets = {_real(os.path.join(root, ".charter", "serve"))}
    home = environ.get("HOME") or os.path.expanduser("~")
    if home and home != "~":
        settings.add(_real(os.path.join(home, ".claude")))
        trees.add(_real(os.path.join(home, ".charter")))
        secrets.add(_real(os.path.join(home, ".charter", "serve")))
    if audit_location.startswith(("sqlite:///", "jsonl:///")):
        store = _real(audit_location.split(":///", 1)[1])
        files.update({store, store + "-wal", store + "-shm", store + "-journal"})
    import sys

    for script in _HOOK_PROGRAMS:
        files.add(_real(os.path.join(os.path.dirname(sys.executable), script)))
    # Claude Code starts a portable hook command (`charter-claude-hook ...`, `uv run ...`)
    # by name: the same name in any folder on PATH could be found first by the next call.
    for folder in environ.get("PATH", "").split(os.pathsep):
        for program in _HOOK_PROGRAMS:
            files.add(_real(os.path.join(folder or ".", program)))
    shadowing = _import_path(files, trees)
    _native_code(files, trees)
    return Protected(
        frozenset(files), frozenset(trees), frozenset(settings), frozenset(secrets), shadowing
    )


# The programs a hook command can start with: the console scripts and uv's launchers.
_HOOK_PROGRAMS = ("charter-claude-hook", "charter-claude", "uv", "uvx")

# Modules outside the standard library a hook process imports, some only on some calls (the
# baseline, YAML for an unpinned policy file, a PostgreSQL driver), and the two modules
# `site` imports at start-up if it finds them anywhere on the import path.
_HOOK_MODULES = frozenset(
    (
        "_yaml",
        "charter",
        "charter_baseline",
        "charter_claude_code",
        "charter_templates",
        "orjson",
        "psycopg",
        "psycopg_binary",
        "psycopg_pool",
        "re2",
        "sitecustomize",
        "usercustomize",
        "yaml",
    )
)


def _import_path(files: set[str], trees: set[str]) -> tuple[tuple[str, frozenset[str]], ...]:
    """Add to `files` and `trees` what the hook's interpreter runs before Charter does, and
    return the folders of its import path where a new entry would be imported in place of a
    module the hook loads (see `Protected.shadowing`).

    Protected whole: the interpreter, a virtual environment's ``pyvenv.cfg``, the standard
    library, every site-packages folder (a ``.pth`` file there runs code in every Python
    process at start-up; the installed packages are the hook's own dependencies) and the
    bytecode prefix when one is set (``PYTHONPYCACHEPREFIX``). A folder
    searched before the standard library (the console script's own folder, PYTHONPATH) could
    stand in for any module; one searched after it (an editable install's source folder) only
    for a module found nowhere earlier, so only the hook's non-standard modules are kept out
    of it, which leaves a project's own files writable.
    """
    import sys

    if sys.executable:
        files.add(_real(sys.executable))
    if sys.prefix != sys.base_prefix:
        files.add(_real(os.path.join(sys.prefix, "pyvenv.cfg")))
    stdlib = _real(os.path.dirname(os.__file__))
    trees.add(stdlib)
    if sys.pycache_prefix:
        # PYTHONPYCACHEPREFIX: every module's bytecode is read from here, and a .pyc whose
        # header names its source's mtime and size is run without the source being read.
        trees.add(_real(sys.pycache_prefix))
    site = sys.modules.get("site")
    if site is not None:
        trees.update(_real(folder) for folder in site.getsitepackages())
        if site.ENABLE_USER_SITE:
            trees.add(_real(site.getusersitepackages()))
    loaded = {name.partition(".")[0] for name in list(sys.modules)}
    after = frozenset(_HOOK_MODULES | (loaded - sys.stdlib_module_names))
    before = frozenset(after | sys.stdlib_module_names)
    shadowing: list[tuple[str, frozenset[str]]] = []
    modules = before
    within = tuple(t.rstrip(os.sep) + os.sep for t in trees)
    for entry in sys.path:
        folder = entry or os.getcwd()
        # Most entries are real paths inside a protected tree: no need to resolve them.
        if not (folder + os.sep).startswith(within):
            folder = _real(folder)
        if folder == stdlib:
            modules = after
            continue
        if (folder + os.sep).startswith(within):
            continue
        if not os.path.isdir(folder):
            # A zip archive on the path (python311.zip, there or not): written, it would be
            # searched for every module.
            files.add(folder)
            continue
        shadowing.append((folder.rstrip(os.sep) + os.sep, modules))
    return tuple(shadowing)


# The dynamic loader's configuration: a library named in ld.so.preload is loaded into every
# process, the hook's included, before its own code runs; the cache and the conf folders
# decide which file a library's name loads.
_LOADER_FILES = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf")
_LOADER_TREES = ("/etc/ld.so.conf.d",)


def _native_code(files: set[str], trees: set[str]) -> None:
    """Add to `files` the shared libraries mapped into this process (libpython when the
    interpreter is built shared, as pyenv builds it; the C libraries its extension modules
    link) and the dynamic loader's configuration: machine code the hook runs, which a tool
    call could replace under a user-owned interpreter. Linux only (read from
    ``/proc/self/maps``); elsewhere nothing is added."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as f:
            maps = f.read()
    except OSError:
        return
    within = tuple(t.rstrip(os.sep) + os.sep for t in trees)
    mapped = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)  # address, mode, offset, device, inode, path
        if len(fields) == 6 and fields[5].startswith("/"):
            mapped.add(fields[5].removesuffix(" (deleted)"))
    # The kernel names a mapped file by the path it was opened at, symlinks resolved.
    files.update(path for path in mapped if not path.startswith(within))
    files.update(_LOADER_FILES)
    trees.update(_LOADER_TREES)


def _expand(word: str, cwd: str, environ: Mapping[str, str]) -> str:
    home = environ.get("HOME") or ""
    if word == "~" or word.startswith("~/"):
        word = home + word[1:]
    for name in ("HOME", "CLAUDE_PROJECT_DIR", "PWD"):
        value = cwd if name == "PWD" else environ.get(name, "")
        if value:
            word = word.replace("${" + name + "}", value).replace("$" + name, value)
    return word


# Every character that can end a word, open a quote or escape: marked so that `str.find`
# skips over ordinary text in C.
_SPECIAL = "'\"\\;&|<>() \t\n\r\x0b\x0c\x00"
_MARKED = str.maketrans(dict.fromkeys(_SPECIAL, "\x00"))


def _words(command: str) -> list[str]:
    """The command's words after quote and backslash removal, split at blanks and shell
    punctuation (an unbalanced quote runs to the end of the text). Linear in the length of
    the command: shlex copies a word once per character, which took seconds on a 1 MB
    command and let the hook's deadline decide instead of its rules."""
    marked = command.translate(_MARKED)
    words: list[str] = []
    word: list[str] = []
    quote = ""
    i, n = 0, len(command)
    while i < n:
        j = marked.find("\x00", i)
        if j < 0:
            word.append(command[i:])
            break
        if j > i:
            word.append(command[i:j])
        c = command[j]
        i = j + 1
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i < n and command[i] in '"\\$`':
                word.append(command[i])
                i += 1
            else:
                word.append(c)
        elif c in "'\"":
            quote = c
            word.append("")  # '' is an (empty) word of its own
        elif c == "\\":
            if i < n:
                word.append(command[i])
                i += 1
        elif word:
            words.append("".join(word))
            word = []
    if word:
        words.append("".join(word))
    return [w for w in words if w]


def _candidates(word: str) -> list[str]:
    out = [word]
    for sep in ("=", ":"):
        for w in list(out):
            if sep in w:
                out.extend(part for part in w.split(sep) if part)
    return out


def _hits(
    paths: Iterable[str],
    cwd: str,
    test: Callable[[str, str], bool],
    where: Sequence[str] = (),
) -> list[str]:
    """The real paths among `paths` (from `cwd`) and the [path, directory, ...] pairs of
    `where` (globs expanded) for which `test(real, written)` holds."""
    found: list[str] = []
    pairs = [(p, cwd) for p in paths]
    pairs += list(zip(where[::2], where[1::2], strict=True))
    for path, base in pairs:
        if not path or (path.startswith("-") and "/" not in path):
            continue
        full = path if os.path.isabs(path) else os.path.join(base, path)
        options = [full]
        if any(c in path for c in "*?["):
            import glob  # only a word with a wildcard needs it

            options += glob.glob(full, recursive=False)[:_GLOB_LIMIT]
            options += glob.glob(full, include_hidden=True)[:_GLOB_LIMIT]
        for option in options:
            real = _real(option)
            if real not in found and test(real, option):
                found.append(real)
    return found


def _up(path: str, into: set[str]) -> None:
    """Add `path` and every folder above it to `into`."""
    while path not in into:  # up to the root, its own parent
        into.add(path)
        path = os.path.dirname(path)


def _replaceable(real: str, written: str) -> bool:
    """Whether the folder `real` (named as `written`) could be moved away and another put
    in its place: its parent folder (or the one holding the symlink named) is writable."""
    return any(
        os.access(os.path.dirname(path) or os.sep, os.W_OK)
        for path in (real, os.path.abspath(written))
    )


def touched(
    tool_name: str,
    tool_input: Mapping[str, Any],
    cwd: str,
    protected: Protected,
    environ: Mapping[str, str],
    view: object = None,
) -> list[str]:
    """The protected real paths a tool call would touch (empty when none, or not a file
    writing tool nor Bash). For Bash, `view` is core's parsed view of the command
    (``properties.exec.shell``), whose words are checked too, each from the directory its
    command runs in. Never raises on odd input."""
    if tool_name in _FILE_TOOLS:
        value = tool_input.get(_FILE_TOOLS[tool_name])
        if not isinstance(value, str) or not value:
            return []
        return _hits([_expand(value, cwd, environ)], cwd, _covered(protected))
    if tool_name in _READ_TOOLS:
        value = tool_input.get(_READ_TOOLS[tool_name])
        if not isinstance(value, str) or not value:
            return []
        full = _expand(value, cwd, environ)
        real = _real(full if os.path.isabs(full) else os.path.join(cwd, full))
        return [real] if protected.reveals(real) else []
    if tool_name != "Bash":
        return []
    command = tool_input.get("command")
    if not isinstance(command, str):
        return []
    paths: list[str] = []
    for word in _words(command):
        for part in _candidates(_expand(word, cwd, environ)):
            paths.append(part)
    words = _view_words(view, cwd, environ)
    found = _hits(paths, cwd, _covered(protected), words)
    # A folder holding a protected path is one too where the command could replace it:
    # named by a command that is not only a reader (`ls`, `cat`, `du`, ...; any command when
    # core could not parse the line), unless it is a folder the agent works in or above (the
    # working directory, the project, the home: naming those is everyday work); and every
    # folder a command removes or moves away, those included.
    broad: set[str] = set()
    for base in (cwd, environ.get("CLAUDE_PROJECT_DIR"), environ.get("HOME")):
        if base:
            _up(_real(base), broad)

    def replaceable(real: str, written: str) -> bool:
        return real not in broad and protected.holds(real) and _replaceable(real, written)

    if isinstance(view, Mapping) and view.get("commands"):
        writers = _view_words(view, cwd, environ, _READERS)
        named = _hits((), cwd, replaceable, writers)
    else:
        named = _hits(paths, cwd, replaceable)
    removed = _hits((), cwd, lambda real, _: protected.holds(real), _removed(view, cwd, environ))
    for real in named + removed:
        if real not in found:
            found.append(real)
    return found


def _covered(protected: Protected) -> Callable[[str, str], bool]:
    return lambda real, _: protected.covers(real)


# Programs that only read what their words name: naming a folder holding a protected path
# cannot replace it.
_READERS = frozenset(
    (
        "cat",
        "cd",
        "diff",
        "du",
        "file",
        "grep",
        "head",
        "less",
        "ls",
        "pwd",
        "readlink",
        "realpath",
        "rg",
        "stat",
        "tail",
        "tree",
        "wc",
    )
)


def _view_words(
    view: object, cwd: str, environ: Mapping[str, str], readers: frozenset[str] = frozenset()
) -> list[str]:
    """[path, directory, ...] from core's parsed view of the command
    (``properties.exec.shell``): each simple command's words and redirection targets,
    relative to the directory it runs in after any ``cd``; none of a command whose program
    is one of `readers` and that redirects nothing."""
    out: list[str] = []
    commands = view.get("commands") if isinstance(view, Mapping) else None
    for cmd in commands if isinstance(commands, list) else ():
        if not isinstance(cmd, Mapping):
            continue
        if cmd.get("program") in readers and not cmd.get("redirects"):
            continue
        base = cmd.get("cwd")
        where = cwd
        if isinstance(base, str) and base:
            where = os.path.join(cwd, _expand(base, cwd, environ))
        words = [w for w in cmd.get("argv") or () if isinstance(w, str)]
        for redirect in cmd.get("redirects") or ():
            if isinstance(redirect, Mapping) and isinstance(redirect.get("target"), str):
                words.append(redirect["target"])
        for word in words:
            for part in _candidates(_expand(word, where, environ)):
                out += [part, where]
    return out


def _removed(view: object, cwd: str, environ: Mapping[str, str]) -> list[str]:
    """[path, directory, ...]: what the command deletes by name (core's
    ``properties.exec.shell.deletes``; not what a search deletes below a folder, as ``find
    . -name __pycache__ -exec rm -rf {} +`` does, whose matches cannot be known from the
    text) and the sources of every ``mv``."""
    out: list[str] = []
    if not isinstance(view, Mapping):
        return out
    named: list[tuple[object, object]] = []
    for delete in view.get("deletes") or ():
        if isinstance(delete, Mapping) and isinstance(delete.get("target"), str):
            if not delete["target"].endswith("**"):
                named.append((delete["target"], delete.get("cwd")))
    for cmd in view.get("commands") or ():
        if isinstance(cmd, Mapping) and cmd.get("program") == "mv":
            argv = [w for w in cmd.get("argv") or () if isinstance(w, str)]
            named += [(source, cmd.get("cwd")) for source in _mv_sources(argv[1:])]
    for target, base in named:
        where = cwd
        if isinstance(base, str) and base:
            where = os.path.join(cwd, _expand(base, cwd, environ))
        out += [_expand(str(target), where, environ), where]
    return out


def _mv_sources(args: Sequence[str]) -> list[str]:
    """The operands ``mv`` moves away: all but the last, or all of them with ``-t DIR``."""
    operands: list[str] = []
    target = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands += args[i:]
            break
        if arg.startswith("--"):
            target = target or arg.startswith("--target-directory")
            if arg in ("--target-directory", "--suffix"):
                i += 1  # its value is the next word
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            for k, letter in enumerate(letters):
                if letter in "tS":
                    target = target or letter == "t"
                    if k == len(letters) - 1:
                        i += 1  # its value is the next word, else the rest of this one
                    break
        else:
            operands.append(arg)
    return operands if target else operands[:-1]


def describe(paths: Sequence[str]) -> str:
    """The protected paths for a reason line (a few, then a count)."""
    shown = ", ".join(paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
