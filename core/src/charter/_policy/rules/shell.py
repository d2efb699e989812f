"""`shell_command`: judge a shell command by what it runs, read from its parsed view.

The view comes from `charter._policy.shell.analyse` on the command text at `fields` (cached
per text, so the several policies of a baseline pay for one parse), never from the step's
properties: what the agent sent is the only source of truth. Paths are resolved lexically
against the command's own working directory (after ``cd``) and the context's project root;
nothing touches the filesystem.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator

from charter._model.behavior import Behavior
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.paths import FieldPath, parse_path
from charter._policy.regex import compile_re2, search_function
from charter._policy.registry import Violation, rule
from charter._policy.shell import FLAGS, Analysis, ShellCommand, analyse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["shell_command"]

Verdict = bool | Violation

_DEFAULT_FIELDS = ("input.command", "properties.exec.command")

TARGET_CLASSES = {
    "system": "the file system root, a top-level directory or a system directory",
    "home": "a home directory (~, $HOME, /home/NAME, /Users/NAME, /root)",
    "project": "the project root or a directory above it",
    "outside": "any other path outside the project",
    "unknown": "a path not known statically (a variable, a substitution, piped names)",
}

_DEVICES = ("/dev/sd", "/dev/hd", "/dev/vd", "/dev/xvd", "/dev/nvme", "/dev/mmcblk", "/dev/disk",
            "/dev/rdisk", "/dev/mapper/", "/dev/md", "/dev/loop", "/dev/dm-")  # fmt: skip
_DISK_PROGRAMS = frozenset({"mkfs", "wipefs", "blkdiscard", "mkswap", "fdisk", "sfdisk", "parted",
                            "sgdisk", "gdisk", "cryptsetup", "diskutil", "newfs"})  # fmt: skip
_PROTECTED_DEFAULT = ("main", "master", "trunk", "develop", "production", "prod", "stable",
                      "release", "release/*", "release-*")  # fmt: skip


class _Programs(Frozen):
    __slots__ = (
        "names",
        "pattern",
        "search",
    )
    names: frozenset[str]
    search: Any  # text -> bool, or None
    pattern: str | None

    def __init__(
        self,
        names: frozenset[str],
        search: Any,  # text -> bool, or None
        pattern: str | None,
    ) -> None:
        put = object.__setattr__
        put(self, "names", names)
        put(self, "search", search)
        put(self, "pattern", pattern)


class _Params(Frozen):
    __slots__ = (
        "credential_reads",
        "deletes",
        "disk",
        "fields",
        "flags",
        "force_push",
        "home",
        "network",
        "permissions",
        "programs",
    )
    fields: tuple[FieldPath, ...]
    deletes: frozenset[str]
    permissions: frozenset[str]
    flags: frozenset[str]
    network: bool
    credential_reads: bool
    disk: bool
    force_push: tuple[str, ...] | None
    programs: tuple[_Programs, ...]
    home: str | None

    def __init__(
        self,
        fields: tuple[FieldPath, ...],
        deletes: frozenset[str],
        permissions: frozenset[str],
        flags: frozenset[str],
        network: bool,
        credential_reads: bool,
        disk: bool,
        force_push: tuple[str, ...] | None,
        programs: tuple[_Programs, ...],
        home: str | None,
    ) -> None:
        put = object.__setattr__
        put(self, "fields", fields)
        put(self, "deletes", deletes)
        put(self, "permissions", permissions)
        put(self, "flags", flags)
        put(self, "network", network)
        put(self, "credential_reads", credential_reads)
        put(self, "disk", disk)
        put(self, "force_push", force_push)
        put(self, "programs", programs)
        put(self, "home", home)


def _prepare(params: dict[str, Any]) -> _Params:
    flags = params.get("flags", ())
    unknown = [f for f in flags if f not in FLAGS]
    if unknown:
        raise ValueError(
            f"flags: unknown flag(s) {', '.join(map(repr, unknown))}; known: {', '.join(FLAGS)}"
        )
    home = params.get("home")
    if home is not None and not home.startswith("/"):
        raise ValueError(f"home {home!r}: must be an absolute path")
    programs = []
    for spec in params.get("programs", ()):
        pattern = spec.get("arg_pattern")
        programs.append(
            _Programs(
                frozenset(spec["names"]),
                search_function(compile_re2(pattern)) if pattern is not None else None,
                pattern,
            )
        )
    force = params.get("force_push")
    p = _Params(
        tuple(parse_path(f) for f in params.get("fields", _DEFAULT_FIELDS)),
        frozenset(params.get("deletes", ())),
        frozenset(params.get("permissions", ())),
        frozenset(flags),
        bool(params.get("network", False)),
        bool(params.get("credential_reads", False)),
        bool(params.get("disk", False)),
        tuple(force) if force is not None else None,
        tuple(programs),
        posixpath.normpath(home) if home else None,
    )
    if not (p.deletes or p.permissions or p.flags or p.network or p.credential_reads or p.disk
            or p.force_push is not None or p.programs):  # fmt: skip
        raise ValueError(
            "give at least one of deletes, permissions, flags, network, credential_reads, disk, "
            "force_push, programs; without them every command complies"
        )
    return p


_CLASSES = sorted(TARGET_CLASSES)


@rule(
    name="shell_command",
    description=(
        "Judges a shell command line (the strings at `fields`) by its parsed view: the simple "
        "commands it runs after quote removal and unwrapping (sudo, env, xargs, bash -c, eval, "
        "$(...), find -exec, text piped into a shell...), each in its working directory after "
        "cd. Violates when any selected condition holds: `deletes` lists target classes "
        "(system, home, project, outside, unknown) a recursive delete (rm -r, find -delete or "
        "-exec rm, rsync --delete, git clean -d, rmtree in inline code) may not reach; "
        "`permissions` the same for chmod/chown/chgrp -R; `flags` names view flags that violate "
        "(unparseable, dynamic_program, eval, opaque_inline, stdin_exec, decode_exec, "
        "remote_exec, ...); `network` any network-capable program (or inline code opening "
        "sockets or URLs); `credential_reads` any credential path named; `disk` formatting or "
        "overwriting a block device; `force_push` a forced git push to one of these branches "
        "('*': any, also one naming no branch); `programs` given programs, optionally with an "
        "argument matching `arg_pattern` (RE2). '~' resolves to `home` when given. A command "
        "that cannot be parsed has the unparseable flag: list it to fail closed."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "fields": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "format": "path"},
                "description": "Default: " + ", ".join(_DEFAULT_FIELDS) + ".",
            },
            "deletes": {"type": "array", "items": {"type": "string", "enum": _CLASSES}},
            "permissions": {"type": "array", "items": {"type": "string", "enum": _CLASSES}},
            "flags": {"type": "array", "items": {"type": "string", "enum": sorted(FLAGS)}},
            "network": {"type": "boolean"},
            "credential_reads": {"type": "boolean"},
            "disk": {"type": "boolean"},
            "force_push": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "minLength": 1},
                "description": "Branch globs, e.g. main, release/*; '*' is any force push.",
            },
            "programs": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["names"],
                    "properties": {
                        "names": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "minLength": 1},
                        },
                        "arg_pattern": {"type": "string", "format": "re2", "minLength": 1},
                    },
                },
            },
            "home": {"type": "string", "minLength": 1, "description": "What '~' expands to."},
        },
    },
    example_params={"deletes": ["system", "home", "project"], "flags": ["unparseable"]},
    prepare=_prepare,
    _builtin=True,
)
def shell_command(view: Behavior, p: _Params, ctx: RuleContext) -> Verdict:
    root = ctx.context.project_root
    for path in p.fields:
        for text in _strings(path.resolve(view)):
            problem = _judge(analyse(text), p, root)
            if problem is not None:
                return Violation(problem)
    return True


def _strings(values: list[Any]) -> Iterator[str]:
    seen: set[str] = set()
    for v in values:
        if isinstance(v, str) and v not in seen:
            seen.add(v)
            yield v


def _judge(a: Analysis, p: _Params, root: str | None) -> str | None:
    flagged = sorted(p.flags & a.flags)
    if flagged:
        flag = flagged[0]
        why = f" ({a.problem})" if flag == "unparseable" and a.problem else ""
        return f"the command {FLAGS[flag]}{why}"
    if p.deletes:
        for how, target, cwd in a.deletes:
            cls = classify(target, cwd, root, p.home)
            if cls in p.deletes:
                return f"{how} of {target!r} reaches {TARGET_CLASSES[cls]}"
    if p.network and a.network:
        return f"the command reaches the network ({', '.join(a.network)})"
    if p.credential_reads and a.credential_reads:
        return f"the command reads a credential path ({a.credential_reads[0]!r})"
    for c in a.commands:
        found = _per_command(c, p, root)
        if found is not None:
            return found
    return None


def _per_command(c: ShellCommand, p: _Params, root: str | None) -> str | None:
    if p.disk:
        found = _disk(c)
        if found:
            return found
    if p.permissions and c.program in ("chmod", "chown", "chgrp"):
        args = c.argv[1:]
        if any(a in ("-R", "--recursive") or (a[:1] == "-" and a[1:2] != "-" and "R" in a)
               for a in args):  # fmt: skip
            operands = [a for a in args if not a.startswith("-")][1:]
            for k, target in enumerate(operands):
                index = c.argv.index(target, 1)
                cls = "unknown" if index in c.dynamic else classify(target, c.cwd, root, p.home)
                if cls in p.permissions and k >= 0:
                    return f"{c.program} -R of {target!r} reaches {TARGET_CLASSES[cls]}"
    if p.force_push is not None and c.program == "git":
        found = _force_push(c, p.force_push)
        if found:
            return found
    for spec in p.programs:
        if c.program in spec.names and (
            spec.search is None or any(spec.search(a) for a in c.argv[1:])
        ):
            extra = f" with an argument matching {spec.pattern!r}" if spec.pattern else ""
            return f"the command runs {c.program}{extra}"
    return None


def _disk(c: ShellCommand) -> str | None:
    if c.program.split(".")[0] in _DISK_PROGRAMS:
        return f"{c.program} formats or repartitions a disk"
    if c.program == "dd" and any(
        a.startswith("of=") and a[3:].startswith(_DEVICES) for a in c.argv
    ):
        return "dd writes onto a block device"
    if c.program in ("shred", "wipe") and any(a.startswith(_DEVICES) for a in c.argv[1:]):
        return f"{c.program} overwrites a block device"
    for op, target in c.redirects:
        if op in (">", ">>", ">|", "&>", "&>>", "<>") and target.startswith(_DEVICES):
            return f"a redirection writes onto the block device {target!r}"
    return None


def _force_push(c: ShellCommand, branches: tuple[str, ...]) -> str | None:
    args = list(c.argv)
    try:
        at = next(i for i, a in enumerate(args) if a == "push" and i > 0)
    except StopIteration:
        return None
    rest = args[at + 1 :]
    forced = any(
        a in ("--force", "--force-if-includes", "--mirror")
        or a.startswith("--force-with-lease")
        or (a[:1] == "-" and a[1:2] != "-" and "f" in a)
        for a in rest
    )
    operands = [a for a in rest if not a.startswith("-")]
    refs = operands[1:]
    if any(r.startswith("+") for r in refs):
        forced = True
    if not forced:
        return None
    if "*" in branches and not refs:
        return "a forced git push (of the current branch)"
    for ref in refs:
        dst = ref.lstrip("+").rpartition(":")[2] or ref.lstrip("+")
        if dst.startswith("refs/heads/"):
            dst = dst[len("refs/heads/") :]
        if any(posixpath.normpath(dst) == b or _glob(b, dst) for b in branches):
            return f"a forced git push to {dst!r}"
    return None


def _glob(pattern: str, text: str) -> bool:
    import fnmatch  # stdlib; patterns are the policy's own, texts are short branch names

    return fnmatch.fnmatchcase(text[:256], pattern)


def classify(target: str, cwd: str | None, root: str | None, home: str | None) -> str | None:
    """Which `TARGET_CLASSES` entry a deletion target falls in, or None when it lies inside
    the project (strictly below its root)."""
    if "$" in target or cwd == "?" or target == "" or "\x00" in target:
        return "unknown"
    if target.endswith("/**"):
        # what find reaches below a start directory, never the directory itself
        below = _resolve(target[:-3] or "/", cwd, root, home)
        if below is None:
            return "unknown"
        if below in ("@below", ".") or (root is not None and below == posixpath.normpath(root)):
            return None
        return _class_of(below, root, home)
    glob_at = min((target.find(ch) for ch in "*?[" if ch in target), default=-1)
    base = target
    if glob_at >= 0:
        # the directory a glob expands in: `/*` deletes what `/` holds, `build/*` what build does
        base = target[:glob_at].rpartition("/")[0] + "/" if "/" in target[:glob_at] else ""
        base = base or "."
        if target[:glob_at].startswith("/") and base == "/":
            return "system"
    path = _resolve(base, cwd, root, home)
    if path is None:
        return "unknown"
    cls = _class_of(path, root, home)
    if glob_at >= 0 and cls is None and path == root:
        return "project"
    return cls


def _resolve(target: str, cwd: str | None, root: str | None, home: str | None) -> str | None:
    if target.startswith("~"):
        user, _, rest = target[1:].partition("/")
        head = home if (not user and home) else ("~" if not user else "~" + user)
        target = head + ("/" + rest if rest else "")
    if not target.startswith(("/", "~")):
        if cwd is None:
            if root is None:
                # no project root: only a path that stays below where the line started is safe
                norm = posixpath.normpath(target)
                return "." if norm == "." else ("@above" if norm.startswith("..") else "@below")
            cwd = root
        elif not cwd.startswith(("/", "~")):
            if root is None:
                return None
            cwd = posixpath.join(root, cwd)
        if cwd.startswith("~"):
            return _resolve(posixpath.join(cwd, target), None, root, home)
        target = posixpath.join(cwd, target)
    return posixpath.normpath(target)


def _class_of(path: str, root: str | None, home: str | None) -> str | None:
    if path == "@below":
        return None
    if path in (".", "@above"):
        return "project"
    if path.startswith("~"):
        rest = path[1:].partition("/")[2]
        return "home" if not rest.strip("/") else "outside"
    parts = [x for x in path.split("/") if x]
    if not parts:
        return "system"
    if home is not None and path == home:
        return "home"
    if len(parts) == 1:
        return "system"
    if len(parts) == 2 and parts[0] in ("home", "Users"):
        return "home"
    if root is not None and root.startswith("/"):
        clean_root = posixpath.normpath(root)
        if path == clean_root or clean_root.startswith(path.rstrip("/") + "/"):
            return "project"
        if path.startswith(clean_root.rstrip("/") + "/"):
            return None
    if home is not None and (home.startswith(path + "/")):
        return "home"
    return "outside"
