"""A parsed view of a shell command line: what it runs, on what, and what cannot be known.

`shell_view(text)` is the structured account core attaches to every ``step.exec`` at
``properties.exec.shell`` and the `shell_command` rule judges. It is built by a hand-written
scanner for the POSIX/bash subset agents write (lists, pipelines, subshells, groups, if/for/
while/case, functions, quoting, ``$'…'``, parameter expansion, command and process
substitution, arithmetic, here-documents, redirections), one pass over the text with a
bounded nesting depth, so its cost is linear in the length of the command whatever the
agent writes (no regular expression touches the text).

What the view holds (all I-JSON, see `shell_view`):

- ``commands``: every simple command in order, nested ones included (those inside ``$(…)``,
  backticks, ``<(…)``, ``bash -c``/``sh -c``/``eval`` strings, ``find -exec``, ``xargs``,
  text echoed into a shell), each with the program normalised (basename, quotes and escapes
  removed, wrappers such as ``sudo``, ``env``, ``command``, ``nice``, ``nohup``, ``time``,
  ``timeout``, ``xargs``, ``exec`` unwrapped), its argv after quote removal (known variables
  of the same line substituted, ``$HOME`` written ``~``), its redirections, which pipeline
  and position it has, what fed its standard input, and the effective working directory
  after any ``cd`` earlier in the line;
- ``flags``: what cannot be known statically (see `FLAGS`);
- ``reads``: paths the command line reads (arguments of readers, ``<`` redirections);
- ``credential_reads``: those of them (or any argument) that match `CREDENTIAL_PATHS`;
- ``network``: the network-capable programs it runs (inline code that opens sockets or
  URLs counts as its interpreter);
- ``deletes``: recursive or bulk deletions and their targets (``rm -r``, ``find -delete``,
  ``find -exec rm``, ``rsync --delete``, ``rmtree`` and friends in inline code).

Text that is only data is never taken for a command: a commit message, an ``echo`` argument
or a grep pattern that says ``rm -rf /`` is an argument like any other. An interpreter given
a script or a module reads piped data without running it; only a shell or interpreter with
no program argument runs what is piped into it.

A command the scanner cannot follow (an unterminated quote, an unbalanced parenthesis, too
deep a nesting, too long a line) is flagged ``unparseable``: never harmless.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterator

from charter._model.frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "CREDENTIAL_PATHS",
    "FLAGS",
    "INTERPRETERS",
    "MAX_LENGTH",
    "NETWORK_PROGRAMS",
    "SHELLS",
    "Analysis",
    "ShellCommand",
    "analyse",
    "is_credential_path",
    "shell_view",
]

MAX_LENGTH = 262_144
"""Longer command lines are not parsed: they are flagged ``unparseable``."""

_MAX_DEPTH = 12
_MAX_COMMANDS = 512

FLAGS: dict[str, str] = {
    "unparseable": "the command line could not be parsed (or is too long or too deep)",
    "substitution": "command or process substitution ($(...), backticks, <(...), >(...))",
    "dynamic_program": "the program to run comes from an expansion or a substitution",
    "dynamic_path": "a path argument of a deleting or writing command is not known statically",
    "eval": "eval, source or . runs text the parser could not read in full",
    "inline_code": "a shell or interpreter runs code given on its command line",
    "opaque_inline": "inline code that is not a literal (it comes from an expansion)",
    "stdin_exec": "data is piped or redirected into a shell or interpreter that runs it",
    "decode_exec": "decoded or transformed data (base64 -d, xxd -r, rev...) is executed",
    "remote_exec": "downloaded data is executed (curl ... | sh, sh <(curl ...))",
    "destructive_glob": "a deleting command's target contains a glob",
    "inline_exec": "inline interpreter code starts processes (os.system, subprocess, exec...)",
    "inline_delete": "inline interpreter code deletes files (shutil.rmtree, unlink, rm_rf...)",
    "inline_network": "inline interpreter code opens sockets or URLs",
    "fork_bomb": "a function that runs itself in a pipeline in the background",
}
"""Every flag the view may carry, and what it means."""

SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox"}
)
INTERPRETERS = frozenset(
    {"python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "node", "nodejs", "deno",
     "bun", "php", "lua", "luajit", "tclsh", "Rscript", "osascript", "pwsh", "powershell", "awk",
     "gawk", "mawk", "nawk", "jshell", "groovy", "julia"}
)  # fmt: skip
_INLINE_OPTS = {
    "python": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p",
    "--print"), "deno": ("eval",), "bun": ("-e", "--eval"), "php": ("-r",), "lua": ("-e",),
    "pwsh": ("-c", "-command", "-Command"), "osascript": ("-e",), "Rscript": ("-e",),
    "julia": ("-e",), "tclsh": (),
}  # fmt: skip

NETWORK_PROGRAMS = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "scp", "sftp", "ftp", "tftp", "telnet",
     "ssh", "http", "https", "xh", "aria2c", "dig", "nslookup", "host", "drill", "whois", "ping",
     "ping6", "traceroute", "mail", "mailx", "sendmail", "mutt", "openssl", "nmap", "lftp",
     "smbclient", "rclone", "s3cmd", "gsutil", "aws", "gcloud", "az", "gh", "httpie", "lynx",
     "links", "w3m", "websocat", "ncftp", "irssi", "axel", "torsocks", "proxychains", "sshpass"}
)  # fmt: skip
"""Programs that reach the network whatever their arguments (rsync and git only in some modes)."""

_GIT_NETWORK = frozenset(
    {
        "push",
        "fetch",
        "pull",
        "clone",
        "ls-remote",
        "send-email",
        "submodule",
        "remote",
        "request-pull",
        "archive",
    }
)

CREDENTIAL_PATHS: tuple[str, ...] = (
    "**/.ssh", "**/.ssh/*", "**/id_rsa*", "**/id_dsa*", "**/id_ecdsa*", "**/id_ed25519*",
    "**/.aws", "**/.aws/*", "**/.config/gcloud", "**/.config/gcloud/*", "**/.azure",
    "**/.azure/*", "**/.kube/config", "**/.docker/config.json", "**/.netrc",
    "**/.git-credentials", "**/.pgpass", "**/.pypirc", "**/.npmrc", "**/.gnupg", "**/.gnupg/*",
    "**/.password-store", "**/.vault-token", "**/.config/gh/hosts.yml",
    "**/.terraform.d/credentials.tfrc.json", "**/.env", "**/.envrc", "**/.env.local",
    "**/.env.production", "**/.env.prod", "**/.env.development", "**/.env.dev",
    "**/.env.staging", "**/.env.test", "**/*.pem", "**/*.key", "**/credentials.json",
    "/etc/shadow", "/etc/gshadow", "/etc/sudoers",
)  # fmt: skip
"""Credential paths (shell globs; ``**/`` is any directory, the home directory included:
the parser cannot know which directory is home, so ``.ssh`` or ``.aws`` anywhere counts)."""

_READERS = frozenset(
    {"cat", "tac", "less", "more", "head", "tail", "nl", "od", "xxd", "hexdump", "strings",
     "base64", "base32", "cp", "scp", "rsync", "tar", "zip", "gzip", "bzip2", "xz", "grep",
     "egrep", "fgrep", "rg", "ag", "ack", "awk", "sed", "cut", "sort", "uniq", "wc", "diff",
     "cmp", "jq", "yq", "source", ".", "bat", "view", "vi", "vim", "nano", "emacs", "openssl",
     "gpg", "md5sum", "sha256sum", "sha1sum", "dd", "paste", "column", "fold", "iconv", "file",
     "stat", "ls", "find", "tee", "curl", "wget", "python", "python3", "node", "perl", "ruby"}
)  # fmt: skip
_DECODERS = frozenset(
    {
        "base64",
        "base32",
        "xxd",
        "openssl",
        "rev",
        "tr",
        "gunzip",
        "zcat",
        "uudecode",
        "basenc",
        "gzip",
        "bzip2",
        "xz",
        "printf",
    }
)

_KEYWORDS_START = frozenset(
    {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
)
_KEYWORDS_END = frozenset({"fi", "done", "esac", "}"})
_ASSIGN_BUILTINS = frozenset({"export", "declare", "typeset", "local", "readonly"})


# -- words ------------------------------------------------------------------------------------


class _Node:
    """Base of the parse-tree nodes: compared and shown by their fields. Plain slotted
    classes, not dataclasses: building a dataclass costs every fresh process (a Claude Code
    hook call) about a millisecond at import."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Node) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({inner})"


class _Word(_Node):
    """One shell word: literal pieces and expansions, in order."""

    __slots__ = ("parts", "quoted", "start")

    def __init__(
        self, parts: list[tuple[str, Any]] | None = None, quoted: bool = False, start: int = 0
    ) -> None:
        self.parts: list[tuple[str, Any]] = [] if parts is None else parts
        self.quoted = quoted
        self.start = start

    # kinds: "lit" (quote-removed text), "glob" (unquoted * ? [), "var" ((name, quoted)),
    # "sub" (list of parsed items), "arith" (None), "tilde" (user name), "ifs" (None)
    def add(self, kind: str, value: Any) -> None:
        # adjacent literal pieces are joined by `done`: joining here would be quadratic
        self.parts.append((kind, value))

    def done(self) -> _Word:
        merged: list[tuple[str, Any]] = []
        run: list[str] = []
        for kind, value in self.parts:
            if kind == "lit":
                run.append(value)
                continue
            if run:
                merged.append(("lit", "".join(run)))
                run = []
            merged.append((kind, value))
        if run:
            merged.append(("lit", "".join(run)))
        self.parts = merged
        return self

    def literal(self) -> str | None:
        """The text when the word has no expansion at all (globs count as text)."""
        out = []
        for kind, value in self.parts:
            if kind in ("lit", "glob"):
                out.append(value)
            elif kind == "tilde":
                out.append("~" + value)
            else:
                return None
        return "".join(out)


class _Simple(_Node):
    __slots__ = ("assigns", "redirs", "words")

    def __init__(
        self,
        words: list[_Word],
        assigns: list[tuple[str, _Word]],
        redirs: list[tuple[str, _Word | None, str | None]],  # (op, target, heredoc body)
    ) -> None:
        self.words = words
        self.assigns = assigns
        self.redirs = redirs


class _Group(_Node):
    __slots__ = ("items", "subshell")

    def __init__(self, items: list[Any], subshell: bool) -> None:
        self.items = items  # a nested list; cwd changes inside do not leave it
        self.subshell = subshell


class _Pipeline(_Node):
    __slots__ = ("elements",)

    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements  # _Simple or _Group


class _FuncDef(_Node):
    __slots__ = ("body", "name")

    def __init__(self, name: str, body: list[Any]) -> None:
        self.name = name
        self.body = body


class _Unparseable(Exception):
    pass


class _Scanner:
    """Tokens of a command line, pulled by the parser (substitutions parse recursively)."""

    def __init__(self, text: str, depth: int) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.depth = depth
        self.heredocs: list[tuple[str, bool, bool, list[Any]]] = []
        self.peeked: tuple[str, Any] | None = None

    # ---- low level ----

    def _ch(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def next(self) -> tuple[str, Any]:
        if self.peeked is not None:
            tok, self.peeked = self.peeked, None
            return tok
        return self._scan()

    def peek(self) -> tuple[str, Any]:
        if self.peeked is None:
            self.peeked = self._scan()
        return self.peeked

    def _scan(self) -> tuple[str, Any]:
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\\" and self._ch(1) == "\n":
                self.i += 2
            elif c == "#":
                while self.i < n and s[self.i] != "\n":
                    self.i += 1
            else:
                break
        if self.i >= n:
            return ("eof", None)
        c = s[self.i]
        if c == "\n":
            self.i += 1
            self._read_heredocs()
            return ("op", "\n")
        two, three = s[self.i : self.i + 2], s[self.i : self.i + 3]
        if c.isdigit():
            j = self.i
            while j < n and s[j].isdigit():
                j += 1
            if j < n and s[j] in "<>":
                self.i = j
                tok = self._redir()
                if tok is not None:
                    return tok
                self.i -= 1
        if c in "<>" and self._ch(1) == "(":
            return ("word", self._word())
        if c in "<>" or (c == "&" and self._ch(1) == ">"):
            tok = self._redir()
            if tok is not None:
                return tok
        for op in (";;&", "&&", "||", ";;", ";&", "|&"):
            if three.startswith(op) if len(op) == 3 else two == op:
                self.i += len(op)
                return ("op", op)
        if c in ";&|()":
            if c == "(" and self._ch(1) == "(":
                return ("arith", self._arith_command())
            self.i += 1
            return ("op", c)
        return ("word", self._word())

    def _redir(self) -> tuple[str, Any] | None:
        s = self.s
        for op in ("&>>", "<<<", "<<-", "&>", ">>", "<<", "<>", ">|", ">&", "<&", "<", ">"):
            if s.startswith(op, self.i):
                self.i += len(op)
                if op in ("<<", "<<-"):
                    return self._heredoc(op)
                return ("redir", op)
        return None

    def _heredoc(self, op: str) -> tuple[str, Any]:
        while self._ch() in (" ", "\t"):
            self.i += 1
        delim = self._word()
        text = delim.literal()
        if text is None:
            text = "".join(str(v) for k, v in delim.parts if k == "lit")
        box: list[Any] = [None]
        self.heredocs.append((text, delim.quoted, op == "<<-", box))
        return ("heredoc", (op, box, delim.quoted))

    def _read_heredocs(self) -> None:
        s = self.s
        for delim, _quoted, strip, box in self.heredocs:
            lines: list[str] = []
            while True:
                if self.i >= self.n:
                    raise _Unparseable(f"here-document ended before its delimiter {delim!r}")
                end = s.find("\n", self.i)
                end = self.n if end < 0 else end
                line = s[self.i : end]
                self.i = min(end + 1, self.n)
                if (line.lstrip("\t") if strip else line) == delim:
                    break
                lines.append(line)
            box[0] = "\n".join(lines) + "\n"
            if not _quoted and ("$" in box[0] or "`" in box[0]):
                box.append(_substitutions(box[0], self.depth + 1))
        self.heredocs = []

    def finish(self) -> None:
        if self.heredocs:
            raise _Unparseable("here-document without a body")

    def _arith_command(self) -> str:
        self.i += 2
        start = self.i
        depth = 2
        while self.i < self.n:
            c = self.s[self.i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return self.s[start : self.i - 2]
            self.i += 1
        raise _Unparseable("unterminated (( ... ))")

    # ---- words ----

    def _word(self) -> _Word:
        w = _Word(start=self.i)
        s, n = self.s, self.n
        first = True
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n;&|()" or (c in "<>" and self._ch(1) != "("):
                break
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise _Unparseable("unterminated single quote")
                w.add("lit", s[self.i + 1 : j])
                w.quoted = True
                self.i = j + 1
            elif c == '"':
                self.i += 1
                self._dquoted(w)
                w.quoted = True
            elif c == "\\":
                if self.i + 1 >= n:
                    self.i += 1
                    break
                if s[self.i + 1] != "\n":
                    w.add("lit", s[self.i + 1])
                    w.quoted = True
                self.i += 2
            elif c == "$":
                self._dollar(w, quoted=False)
            elif c == "`":
                w.add("sub", self._backtick())
            elif c in "<>" and self._ch(1) == "(":
                self.i += 2
                w.add("sub", self._sub_parse(")"))
            elif c in "*?[":
                w.add("glob", c)
                self.i += 1
            elif c == "~" and first:
                j = self.i + 1
                while j < n and (s[j].isalnum() or s[j] in "_.-"):
                    j += 1
                if j >= n or s[j] in "/ \t\r\n;&|()<>:":
                    w.add("tilde", s[self.i + 1 : j])
                    self.i = j
                else:
                    w.add("lit", c)
                    self.i += 1
            else:
                w.add("lit", c)
                self.i += 1
            first = False
        return w.done()

    def _dquoted(self, w: _Word) -> None:
        s, n = self.s, self.n
        buf: list[str] = []
        while True:
            if self.i >= n:
                raise _Unparseable("unterminated double quote")
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    buf.append(s[self.i + 1])
                self.i += 2
            elif c == "$" or c == "`":
                if buf:
                    w.add("lit", "".join(buf))
                    buf = []
                if c == "$":
                    self._dollar(w, quoted=True)
                else:
                    w.add("sub", self._backtick())
            else:
                buf.append(c)
                self.i += 1
        w.add("lit", "".join(buf))

    def _dollar(self, w: _Word, *, quoted: bool) -> None:
        s, n = self.s, self.n
        nxt = self._ch(1)
        if nxt == "(" and self._ch(2) == "(":
            self.i += 1
            body = self._arith_command()
            w.add("arith", None)
            if "$(" in body or "`" in body:
                arith = _Scanner(body, self.depth + 1)
                dummy = _Word()
                while arith.i < arith.n:
                    ch = arith.s[arith.i]
                    if ch == "$":
                        arith._dollar(dummy, quoted=True)
                    elif ch == "`":
                        dummy.add("sub", arith._backtick())
                    else:
                        arith.i += 1
                for kind, value in dummy.parts:
                    if kind == "sub":
                        w.add("sub", value)
        elif nxt == "(":
            self.i += 2
            w.add("sub", self._sub_parse(")"))
        elif nxt == "{":
            j = self.i + 2
            depth = 1
            while j < n:
                ch = s[j]
                if ch == "\\":
                    j += 2
                    continue
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif ch == "$" and j + 1 < n and s[j + 1] == "(":
                    # a substitution inside a default value runs too
                    self.i = j
                    dummy = _Word()
                    self._dollar(dummy, quoted=True)
                    for kind, value in dummy.parts:
                        if kind == "sub":
                            w.add("sub", value)
                    j = self.i
                    continue
                j += 1
            if j >= n:
                raise _Unparseable("unterminated ${...}")
            inner = s[self.i + 2 : j]
            self.i = j + 1
            name = inner if _is_name(inner) else ""
            if name == "IFS" and not quoted:
                w.add("ifs", None)
            else:
                w.add("var", (name or "?" + inner, quoted))
        elif nxt == "'" and not quoted:
            self.i += 2
            w.add("lit", self._ansi_c())
            w.quoted = True
        elif nxt == '"' and not quoted:
            self.i += 2
            self._dquoted(w)
            w.quoted = True
        elif nxt and (nxt.isalpha() or nxt == "_"):
            j = self.i + 1
            while j < n and (s[j].isalnum() or s[j] == "_"):
                j += 1
            name = s[self.i + 1 : j]
            self.i = j
            if name == "IFS" and not quoted:
                w.add("ifs", None)
            else:
                w.add("var", (name, quoted))
        elif nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.i += 2
            w.add("var", ("?" + nxt, quoted))
        else:
            w.add("lit", "$")
            self.i += 1

    def _ansi_c(self) -> str:
        s, n = self.s, self.n
        out: list[str] = []
        simple = {
            "n": "\n",
            "t": "\t",
            "r": "\r",
            "a": "\a",
            "b": "\b",
            "e": "\x1b",
            "E": "\x1b",
            "f": "\f",
            "v": "\v",
            "\\": "\\",
            "'": "'",
            '"': '"',
            "?": "?",
        }
        while True:
            if self.i >= n:
                raise _Unparseable("unterminated $'...'")
            c = s[self.i]
            if c == "'":
                self.i += 1
                return "".join(out)
            if c != "\\" or self.i + 1 >= n:
                out.append(c)
                self.i += 1
                continue
            e = s[self.i + 1]
            self.i += 2
            if e in simple:
                out.append(simple[e])
            elif e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                j = self.i
                while j < n and j - self.i < width and s[j] in "0123456789abcdefABCDEF":
                    j += 1
                if j == self.i:
                    out.append("\\" + e)
                else:
                    code = int(s[self.i : j], 16)
                    out.append(chr(code) if code < 0x110000 else "\ufffd")
                    self.i = j
            elif e in "01234567":
                j = self.i - 1
                while j < n and j - (self.i - 1) < 3 and s[j] in "01234567":
                    j += 1
                out.append(chr(int(s[self.i - 1 : j], 8) & 0xFF))
                self.i = j
            elif e == "c" and self.i < n:
                out.append(chr(ord(s[self.i]) & 0x1F))
                self.i += 1
            else:
                out.append("\\" + e)

    def _backtick(self) -> list[Any]:
        s, n = self.s, self.n
        self.i += 1
        buf: list[str] = []
        while True:
            if self.i >= n:
                raise _Unparseable("unterminated backquote")
            c = s[self.i]
            if c == "`":
                self.i += 1
                break
            if c == "\\" and self.i + 1 < n and s[self.i + 1] in "$`\\":
                buf.append(s[self.i + 1])
                self.i += 2
            else:
                buf.append(c)
                self.i += 1
        return _parse_text("".join(buf), self.depth + 1)

    def _sub_parse(self, closer: str) -> list[Any]:
        if self.depth + 1 > _MAX_DEPTH:
            raise _Unparseable("nested too deeply")
        saved = self.depth
        self.depth += 1
        try:
            items = _Parser(self).parse_list(closer=closer)
        finally:
            self.depth = saved
        return items


def _substitutions(text: str, depth: int) -> list[Any]:
    """The command substitutions in expanding text (an unquoted here-document body)."""
    scanner = _Scanner(text, depth)
    found = _Word()
    while scanner.i < scanner.n:
        ch = scanner.s[scanner.i]
        if ch == "\\":
            scanner.i += 2
        elif ch == "$":
            scanner._dollar(found, quoted=True)
        elif ch == "`":
            found.add("sub", scanner._backtick())
        else:
            scanner.i += 1
    return [value for kind, value in found.parts if kind == "sub"]


def _is_name(text: str) -> bool:
    return (
        bool(text)
        and (text[0].isalpha() or text[0] == "_")
        and all(c.isalnum() or c == "_" for c in text)
    )


# -- parser -----------------------------------------------------------------------------------


class _Parser:
    """Lists, pipelines and simple commands; compound commands are read by their keywords."""

    def __init__(self, scanner: _Scanner) -> None:
        self.sc = scanner

    def parse_list(self, closer: str | None = None) -> list[Any]:
        items: list[Any] = []
        while True:
            kind, value = self.sc.peek()
            if kind == "eof":
                if closer is not None:
                    raise _Unparseable(f"missing {closer!r}")
                self.sc.finish()
                return items
            if kind == "op" and value == closer:
                self.sc.next()
                return items
            if kind == "op" and value in (";", "\n", "&", "&&", "||", ";;", ";&", ";;&"):
                self.sc.next()
                if value in (";;", ";&", ";;&"):
                    self._case_patterns()
                continue
            if kind == "op" and value in ("|", "|&", ")"):
                raise _Unparseable(f"unexpected {value!r}")
            items.append(self._pipeline())

    def _pipeline(self) -> Any:
        elements = [self._command()]
        while True:
            kind, value = self.sc.peek()
            if kind == "op" and value in ("|", "|&"):
                self.sc.next()
                while self.sc.peek() == ("op", "\n"):
                    self.sc.next()
                elements.append(self._command())
            else:
                break
        if len(elements) == 1:
            return elements[0]
        return _Pipeline(elements)

    def _command(self) -> Any:
        kind, value = self.sc.peek()
        if kind == "op" and value == "(":
            self.sc.next()
            group = _Group(self.parse_list(closer=")"), subshell=True)
            self._trailing_redirs(group)
            return group
        if kind == "arith":
            self.sc.next()
            return _Simple([], [], [])
        words: list[_Word] = []
        assigns: list[tuple[str, _Word]] = []
        redirs: list[tuple[str, _Word | None, str | None]] = []
        in_test = False
        while True:
            kind, value = self.sc.peek()
            if kind == "word":
                self.sc.next()
                text = value.literal()
                if not words and not assigns and not value.quoted and text is not None:
                    if text in _KEYWORDS_START:
                        continue
                    if text in _KEYWORDS_END:
                        return _Simple([], [], redirs)
                    if text in ("for", "select"):
                        self._skip_for()
                        return _Simple([], [], [])
                    if text == "case":
                        self._skip_case_head()
                        return _Simple([], [], [])
                    if text == "function":
                        tok = self.sc.next()
                        if self.sc.peek() == ("op", "("):
                            self.sc.next()
                            self._expect(")")
                        return self._funcdef((tok[1].literal() or "") if tok[0] == "word" else "")
                    if text == "coproc":
                        continue
                    if text == "[[":
                        in_test = True
                if in_test and text == "]]":
                    in_test = False
                if not words and (assign := _assignment(value)) is not None:
                    assigns.append(assign)
                    continue
                words.append(value)
            elif kind == "redir" or kind == "heredoc":
                self.sc.next()
                if in_test:
                    continue
                if kind == "heredoc":
                    op, box, _quoted = value
                    redirs.append((op, None, None))
                    self._pending_heredoc(redirs, len(redirs) - 1, box)
                    continue
                tkind, target = self.sc.next()
                if tkind != "word":
                    raise _Unparseable(f"redirection {value!r} without a target")
                redirs.append((value, target, None))
            elif kind == "op" and value == "(" and words and len(words) == 1 and not assigns:
                self.sc.next()
                self._expect(")")
                name = words[0].literal() or ""
                return self._funcdef(name)
            elif kind == "op" and in_test and value in ("&&", "||", "(", ")"):
                self.sc.next()
            else:
                break
        return _Simple(words, assigns, redirs)

    def _pending_heredoc(self, redirs: list[Any], index: int, box: list[Any]) -> None:
        # the body is read at the next newline; the redirection keeps the box to read later
        redirs[index] = (redirs[index][0], None, box)

    def _trailing_redirs(self, group: _Group) -> None:
        while self.sc.peek()[0] in ("redir", "heredoc"):
            kind, _ = self.sc.next()
            if kind == "redir":
                self.sc.next()

    def _expect(self, op: str) -> None:
        got = self.sc.next()
        if got != ("op", op):
            raise _Unparseable(f"expected {op!r}")

    def _funcdef(self, name: str) -> _FuncDef:
        while self.sc.peek() == ("op", "\n"):
            self.sc.next()
        kind, value = self.sc.peek()
        if kind == "word" and value.literal() == "{" and not value.quoted:
            self.sc.next()
            return _FuncDef(name, self._until_brace())
        return _FuncDef(name, [self._command()])

    def _until_brace(self) -> list[Any]:
        items: list[Any] = []
        while True:
            kind, value = self.sc.peek()
            if kind == "eof":
                raise _Unparseable("function body without '}'")
            if kind == "word" and value.literal() == "}" and not value.quoted:
                self.sc.next()
                return items
            if kind == "op" and value in (";", "\n", "&", "&&", "||"):
                self.sc.next()
                continue
            items.append(self._pipeline())

    def _skip_for(self) -> None:
        kind, value = self.sc.peek()
        if kind == "arith":
            self.sc.next()
            return
        while True:
            kind, value = self.sc.peek()
            if kind == "eof" or (kind == "op" and value in (";", "\n")):
                return
            if kind == "word" and value.literal() == "do":
                return
            self.sc.next()

    def _skip_case_head(self) -> None:
        # case WORD in
        self.sc.next()
        while self.sc.peek() == ("op", "\n"):
            self.sc.next()
        self.sc.next()
        self._case_patterns()

    def _case_patterns(self) -> None:
        while self.sc.peek() == ("op", "\n"):
            self.sc.next()
        kind, value = self.sc.peek()
        if kind == "word" and value.literal() == "esac":
            return
        if kind == "op" and value == "(":
            self.sc.next()
        while True:
            kind, value = self.sc.next()
            if kind == "eof":
                raise _Unparseable("case pattern without ')'")
            if kind == "op" and value == ")":
                return


def _assignment(w: _Word) -> tuple[str, _Word] | None:
    if not w.parts or w.parts[0][0] != "lit":
        return None
    head = w.parts[0][1]
    eq = head.find("=")
    if eq <= 0:
        return None
    name = head[:eq]
    if name.endswith("+"):
        name = name[:-1]
    if "[" in name:
        name = name[: name.find("[")]
    if not _is_name(name):
        return None
    # a quoted name ("A"=1) is not an assignment, but the scanner merged the pieces already;
    # agents do not write that, and treating it as one only hides a program named "A=1"
    value = _Word(parts=[("lit", head[eq + 1 :]), *w.parts[1:]], quoted=w.quoted)
    if value.parts[0] == ("lit", ""):
        value.parts.pop(0)
    return name, value


def _parse_text(text: str, depth: int) -> list[Any]:
    if depth > _MAX_DEPTH:
        raise _Unparseable("nested too deeply")
    return _Parser(_Scanner(text, depth)).parse_list()


# -- analysis ---------------------------------------------------------------------------------


class ShellCommand(Frozen):
    """One simple command as it will run (after unwrapping).

    `argv` is after quote removal; an argument whose value is not known statically keeps its
    expansions as written (``$X``, ``$(…)``) and its index is in `dynamic`. `cwd` is the
    directory it runs in: None for where the line started, else an absolute path, a ``~``
    path, a path relative to the start, or ``?`` when a ``cd`` went somewhere unknown.
    `stdin_text` is a literal here-document or here-string (not in the view); `fed` is what
    substitutions in its arguments did (network, decode).
    """

    __slots__ = (
        "argv",
        "cwd",
        "dynamic",
        "fed",
        "globs",
        "pipeline",
        "position",
        "program",
        "redirects",
        "stdin",
        "stdin_text",
        "via",
        "wrappers",
    )
    program: str
    argv: tuple[str, ...]
    dynamic: frozenset[int]
    globs: frozenset[int]
    cwd: str | None
    redirects: tuple[tuple[str, str], ...]
    wrappers: tuple[str, ...]
    pipeline: int
    position: int
    via: str
    stdin: str | None
    stdin_text: str | None
    fed: frozenset[str]

    def __init__(
        self,
        program: str,
        argv: tuple[str, ...],
        dynamic: frozenset[int],
        globs: frozenset[int],
        cwd: str | None,
        redirects: tuple[tuple[str, str], ...],
        wrappers: tuple[str, ...],
        pipeline: int,
        position: int,
        via: str,
        stdin: str | None,
        stdin_text: str | None = None,
        fed: frozenset[str] = frozenset(),
    ) -> None:
        put = object.__setattr__
        put(self, "program", program)
        put(self, "argv", argv)
        put(self, "dynamic", dynamic)
        put(self, "globs", globs)
        put(self, "cwd", cwd)
        put(self, "redirects", redirects)
        put(self, "wrappers", wrappers)
        put(self, "pipeline", pipeline)
        put(self, "position", position)
        put(self, "via", via)
        put(self, "stdin", stdin)
        put(self, "stdin_text", stdin_text)
        put(self, "fed", fed)


class Analysis(Frozen):
    """Everything the view says about one command line (see the module docstring).

    `deletes` holds (how, target, cwd) triples.
    """

    __slots__ = ("commands", "credential_reads", "deletes", "flags", "network", "problem", "reads")
    commands: tuple[ShellCommand, ...]
    flags: frozenset[str]
    reads: tuple[str, ...]
    credential_reads: tuple[str, ...]
    network: tuple[str, ...]
    deletes: tuple[tuple[str, str, str | None], ...]
    problem: str | None

    def __init__(
        self,
        commands: tuple[ShellCommand, ...],
        flags: frozenset[str],
        reads: tuple[str, ...],
        credential_reads: tuple[str, ...],
        network: tuple[str, ...],
        deletes: tuple[tuple[str, str, str | None], ...],
        problem: str | None,
    ) -> None:
        put = object.__setattr__
        put(self, "commands", commands)
        put(self, "flags", flags)
        put(self, "reads", reads)
        put(self, "credential_reads", credential_reads)
        put(self, "network", network)
        put(self, "deletes", deletes)
        put(self, "problem", problem)

    def view(self) -> dict[str, Any]:
        """The I-JSON view stored at ``properties.exec.shell``."""
        out: dict[str, Any] = {"commands": [_command_view(c) for c in self.commands]}
        out["flags"] = sorted(self.flags)
        if self.reads:
            out["reads"] = list(self.reads)
        if self.credential_reads:
            out["credential_reads"] = list(self.credential_reads)
        if self.network:
            out["network"] = list(self.network)
        if self.deletes:
            out["deletes"] = [
                {"how": how, "target": t, **({"cwd": cwd} if cwd is not None else {})}
                for how, t, cwd in self.deletes
            ]
        if self.problem:
            out["problem"] = self.problem
        return out


def _command_view(c: ShellCommand) -> dict[str, Any]:
    out: dict[str, Any] = {"program": c.program, "argv": list(c.argv)}
    if c.dynamic:
        out["dynamic"] = sorted(c.dynamic)
    if c.cwd is not None:
        out["cwd"] = c.cwd
    if c.redirects:
        out["redirects"] = [{"op": op, "target": t} for op, t in c.redirects]
    if c.wrappers:
        out["wrappers"] = list(c.wrappers)
    out["pipeline"] = c.pipeline
    out["position"] = c.position
    if c.via:
        out["via"] = c.via
    if c.stdin:
        out["stdin"] = c.stdin
    return out


class _State:
    def __init__(self) -> None:
        self.commands: list[ShellCommand] = []
        self.flags: set[str] = set()
        self.reads: list[str] = []
        self.creds: list[str] = []
        self.network: list[str] = []
        self.deletes: list[tuple[str, str, str | None]] = []
        self.functions: set[str] = set()
        self.pipelines = 0
        self.problem: str | None = None


class _Env:
    """What a point of the line knows: the working directory and the variables set so far."""

    __slots__ = ("cwd", "vars")

    def __init__(self, cwd: str | None = None, vars: dict[str, str | None] | None = None) -> None:
        self.cwd = cwd
        self.vars: dict[str, str | None] = dict(vars or {})

    def copy(self) -> _Env:
        return _Env(self.cwd, self.vars)


def _expand(w: _Word, env: _Env, st: _State, depth: int) -> tuple[list[str], bool, bool]:
    """The fields a word expands to, whether any is dynamic, whether it has a glob."""
    fields: list[str] = []
    cur: list[str] = []
    dynamic = glob = False
    for kind, value in w.parts:
        if kind == "lit":
            cur.append(value)
        elif kind == "glob":
            cur.append(value)
            glob = True
        elif kind == "tilde":
            cur.append("~" + value)
        elif kind == "ifs":
            fields.append("".join(cur))
            cur = []
        elif kind == "var":
            name, _quoted = value
            if name == "HOME":
                cur.append("~")
            elif name == "PWD" and env.cwd not in (None, "?"):
                cur.append(env.cwd or ".")
            elif name in env.vars and env.vars[name] is not None:
                cur.append(env.vars[name] or "")
            else:
                cur.append("$" + name if not name.startswith("?") else "${" + name[1:] + "}")
                dynamic = True
        elif kind == "sub":
            st.flags.add("substitution")
            _walk(value, env.copy(), st, depth + 1, via="substitution")
            cur.append("$(…)")
            dynamic = True
        elif kind == "arith":
            cur.append("$((…))")
            dynamic = True
    fields.append("".join(cur))
    if any(k == "ifs" for k, _ in w.parts):
        fields = [f for f in fields if f]
    return fields or [""], dynamic, glob


def _walk(items: list[Any], env: _Env, st: _State, depth: int, via: str = "") -> None:
    for item in items:
        if isinstance(item, _Pipeline):
            index = st.pipelines
            st.pipelines += 1
            feeders: list[ShellCommand] = []
            for pos, element in enumerate(item.elements):
                sub_env = env.copy()
                if isinstance(element, _Simple):
                    _simple(element, sub_env, st, depth, via, index, pos, feeders)
                else:
                    _walk(_element_items(element, st), sub_env, st, depth, via)
        elif isinstance(item, _Simple):
            index = st.pipelines
            st.pipelines += 1
            _simple(item, env, st, depth, via, index, 0, [])
        elif isinstance(item, _Group):
            _walk(item.items, env.copy() if item.subshell else env, st, depth, via)
        elif isinstance(item, _FuncDef):
            st.functions.add(item.name)
            body_names = _program_names(item.body)
            if item.name in body_names and _has_background_pipe(item.body, item.name):
                st.flags.add("fork_bomb")
            _walk(item.body, env.copy(), st, depth, via or "function")


def _element_items(element: Any, st: _State) -> list[Any]:
    if isinstance(element, _Group):
        return element.items
    if isinstance(element, _FuncDef):
        st.functions.add(element.name)
        return element.body
    return [element]


def _program_names(items: list[Any]) -> set[str]:
    out: set[str] = set()
    for item in items:
        elements = item.elements if isinstance(item, _Pipeline) else [item]
        for e in elements:
            if isinstance(e, _Simple) and e.words:
                text = e.words[0].literal()
                if text:
                    out.add(text)
            elif isinstance(e, _Group):
                out |= _program_names(e.items)
    return out


def _has_background_pipe(items: list[Any], name: str) -> bool:
    for item in items:
        if isinstance(item, _Pipeline):
            if name in _program_names([item]):
                return True
        elif isinstance(item, _Group) and _has_background_pipe(item.items, name):
            return True
    return False


def _opts_with_args(program: str) -> tuple[frozenset[str], bool]:
    """(options of a wrapper that take an argument, whether the wrapper is followed by a
    positional argument before the command, e.g. timeout's duration)."""
    table = {
        "sudo": ("-u -g -h -p -C -D -r -t -U -T -R", False),
        "doas": ("-u -C", False),
        "env": ("-u -C -S --unset --chdir --split-string", False),
        "nice": ("-n --adjustment", False),
        "time": ("-f -o --format --output", False),
        "timeout": ("-s -k --signal --kill-after", True),
        "xargs": (
            "-I -i -n -P -L -s -d -E -a --max-args --max-procs --delimiter --arg-file --replace",
            False,
        ),
        "exec": ("-a", False),
        "stdbuf": ("-i -o -e", False),
        "ionice": ("-c -n -p", False),
        "chroot": ("", True),
        "flock": ("-w -E", True),
        "watch": ("-n -d --interval", False),
        "taskset": ("", True),
        "strace": ("-e -o -p -s", False),
        "runuser": ("-u -g", False),
        "su": ("-c -s -g", False),
    }
    opts, positional = table.get(program, ("", False))
    return frozenset(opts.split()), positional


_WRAPPERS = frozenset(
    {"command", "builtin", "env", "sudo", "doas", "nice", "nohup", "time", "timeout", "xargs",
     "exec", "stdbuf", "ionice", "chroot", "flock", "setsid", "unbuffer", "caffeinate", "chronic",
     "watch", "taskset", "strace", "ltrace", "torsocks", "proxychains", "proxychains4", "noglob",
     "nocorrect", "runuser", "su", "fakeroot", "firejail", "busybox", "then", "do", "else"}
)  # fmt: skip


def _base(program: str) -> str:
    name = program.rstrip("/").rpartition("/")[2] if "/" in program else program
    if name.startswith("python") and name[6:].replace(".", "").isdigit():
        return "python3" if name[6:7] == "3" or name == "python" else name
    return name


def _family(program: str) -> str:
    if program.startswith("python") or program.startswith("pypy"):
        return "python"
    if program in ("nodejs",):
        return "node"
    if program in ("gawk", "mawk", "nawk"):
        return "awk"
    if program == "powershell":
        return "pwsh"
    return program


def _simple(
    cmd: _Simple,
    env: _Env,
    st: _State,
    depth: int,
    via: str,
    pipeline: int,
    position: int,
    feeders: list[ShellCommand],
) -> None:
    if len(st.commands) >= _MAX_COMMANDS:
        raise _Unparseable(f"more than {_MAX_COMMANDS} commands")
    argv: list[str] = []
    dynamic: set[int] = set()
    globs: set[int] = set()
    assign_env: dict[str, str | None] = {}
    for name, value in cmd.assigns:
        fields, dyn, _ = _expand(value, env, st, depth)
        assign_env[name] = None if dyn else " ".join(fields)
    fed: set[str] = set()
    for w in cmd.words:
        net_before, cmds_before = len(st.network), len(st.commands)
        fields, dyn, glob = _expand(w, env, st, depth)
        if len(st.network) > net_before:
            fed.add("network")
        if any(_is_decoder(x) for x in st.commands[cmds_before:]):
            fed.add("decode")
        for f in fields:
            if dyn:
                dynamic.add(len(argv))
            if glob:
                globs.add(len(argv))
            argv.append(f)
    redirects: list[tuple[str, str]] = []
    stdin_text: str | None = None
    stdin_from: str | None = None
    for op, target, box in cmd.redirs:
        if target is None:
            body = box[0] if isinstance(box, list) else None
            subs: list[Any] = box[1] if isinstance(box, list) and len(box) > 1 else []
            for sub in subs:
                st.flags.add("substitution")
                _walk(sub, env.copy(), st, depth + 1, via="substitution")
            redirects.append((op, "<here-document>"))
            stdin_text = body
            stdin_from = "here-document"
            continue
        fields, dyn, _ = _expand(target, env, st, depth)
        text = " ".join(fields)
        redirects.append((op, text))
        if op == "<<<":
            stdin_text = None if dyn else text
            stdin_from = "here-string"
            if dyn:
                stdin_from = "here-string (dynamic)"
        elif op in ("<", "<>"):
            _read(st, text, env.cwd)
            stdin_from = "file"
        if "/dev/tcp/" in text or "/dev/udp/" in text:
            st.network.append("/dev/tcp")
    if not argv:
        env.vars.update(assign_env)
        return
    for val in assign_env.values():
        if val is not None and ("/dev/tcp/" in val or "/dev/udp/" in val):
            st.network.append("/dev/tcp")
    wrappers: list[str] = []
    i = 0
    from_xargs = False
    while i < len(argv):
        prog = _base(argv[i]) if i not in dynamic else argv[i]
        if i in dynamic or prog not in _WRAPPERS:
            break
        if prog == "command" and any(a in ("-v", "-V") for a in argv[i + 1 : i + 2]):
            break
        if prog == "busybox" and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            break
        wrappers.append(prog)
        if prog == "xargs":
            from_xargs = True
        with_arg, positional = _opts_with_args(prog)
        i += 1
        while i < len(argv):
            a = argv[i]
            if a == "--":
                i += 1
                break
            if prog == "env" and "=" in a and not a.startswith("-"):
                i += 1
                continue
            if prog == "env" and a in ("-S", "--split-string") and i + 1 < len(argv):
                _inline_shell(argv[i + 1], i + 1 in dynamic, env, st, depth, "env -S")
                return
            if prog in ("sudo", "su", "runuser") and a == "-c" and i + 1 < len(argv):
                _inline_shell(argv[i + 1], i + 1 in dynamic, env, st, depth, f"{prog} -c")
                i += 2
                continue
            if a.startswith("-") and len(a) > 1 and prog not in ("nohup", "setsid"):
                if a in with_arg or (len(a) == 2 and a in with_arg):
                    i += 2
                elif any(
                    a.startswith(o) and len(o) == 2 for o in with_arg if not o.startswith("--")
                ):
                    i += 1
                else:
                    i += 1
                continue
            if prog == "nice" and a.lstrip("-").isdigit():
                i += 1
                continue
            break
        if positional and i < len(argv):
            i += 1
    if i >= len(argv):
        return
    program_dynamic = i in dynamic
    raw_program = argv[i]
    program = raw_program if program_dynamic else _base(raw_program)
    args = argv[i:]
    dyn_args = frozenset(k - i for k in dynamic if k >= i)
    glob_args = frozenset(k - i for k in globs if k >= i)
    if program_dynamic:
        st.flags.add("dynamic_program")
    stdin = stdin_from
    if position > 0 and feeders:
        stdin = "pipe:" + feeders[-1].program
    record = ShellCommand(
        program=program,
        argv=tuple(args),
        dynamic=dyn_args,
        globs=glob_args,
        cwd=env.cwd,
        redirects=tuple(redirects),
        wrappers=tuple(wrappers),
        pipeline=pipeline,
        position=position,
        via=via,
        stdin=stdin,
        stdin_text=stdin_text,
        fed=frozenset(fed),
    )
    st.commands.append(record)
    _judge_command(record, env, st, depth, feeders, from_xargs, stdin_text, position)
    feeders.append(record)
    if program in _ASSIGN_BUILTINS:
        env.vars.update(assign_env)
        for k, a in enumerate(args[1:], start=1):
            var, eq, val = a.partition("=")
            if eq and _is_name(var):
                env.vars[var] = None if k in dyn_args else val


def _read(st: _State, path: str, cwd: str | None) -> None:
    st.reads.append(path)
    if is_credential_path(path, cwd):
        st.creds.append(path)


def _inline_shell(code: str, dynamic: bool, env: _Env, st: _State, depth: int, via: str) -> None:
    st.flags.add("inline_code")
    if dynamic:
        st.flags.add("opaque_inline")
        return
    try:
        items = _parse_text(code, depth + 1)
    except _Unparseable as exc:
        st.flags.add("unparseable")
        st.problem = f"inline shell code ({via}): {exc}"
        return
    _walk(items, env.copy(), st, depth + 1, via=via)


def _options(args: tuple[str, ...]) -> tuple[set[str], list[int]]:
    """Short and long options of a typical command, and the indices of its operands."""
    opts: set[str] = set()
    operands: list[int] = []
    end = False
    for k, a in enumerate(args[1:], start=1):
        if end or not a.startswith("-") or a == "-":
            operands.append(k)
        elif a == "--":
            end = True
        elif a.startswith("--"):
            opts.add(a.split("=", 1)[0])
        else:
            opts.update("-" + c for c in a[1:])
    return opts, operands


def _judge_command(
    c: ShellCommand,
    env: _Env,
    st: _State,
    depth: int,
    feeders: list[ShellCommand],
    from_xargs: bool,
    stdin_text: str | None,
    position: int,
) -> None:
    program, args = c.program, c.argv
    family = _family(program)
    opts, operands = _options(args)
    # credential paths in any argument count as reads (cat, cp, tar, grep ... or anything)
    for k in operands:
        a = args[k]
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if is_credential_path(value, c.cwd):
            st.reads.append(value)
            st.creds.append(value)
        elif program in _READERS and k not in c.dynamic:
            st.reads.append(value)
    for a in args[1:]:
        if a.startswith("-") and "=" in a:
            value = a.split("=", 1)[1]
            if value.startswith("@"):
                value = value[1:]
            if is_credential_path(value, c.cwd):
                st.creds.append(value)
        elif a.startswith("@") and is_credential_path(a[1:], c.cwd):
            st.creds.append(a[1:])
    # network
    if program in NETWORK_PROGRAMS:
        st.network.append(program)
    elif program == "git":
        sub = _git_subcommand(args)
        if sub in _GIT_NETWORK:
            st.network.append("git " + sub)
    elif program == "rsync" and any(
        ":" in args[k] and not args[k].startswith("/") for k in operands
    ):
        st.network.append("rsync")
    elif (
        program in ("docker", "podman")
        and len(args) > 1
        and args[1] in ("push", "pull", "login", "run")
    ):
        if args[1] != "run":
            st.network.append(f"{program} {args[1]}")
    elif any("/dev/tcp/" in a or "/dev/udp/" in a for a in args):
        st.network.append("/dev/tcp")
    # shells and interpreters
    if program in SHELLS or family in INTERPRETERS or program in INTERPRETERS:
        _judge_interpreter(c, env, st, depth, feeders, stdin_text, position)
    elif program in ("eval",):
        code = " ".join(args[1:])
        if c.dynamic:
            st.flags.add("eval")
            _fed_flags(c, st)
        else:
            _inline_shell(code, False, env, st, depth, "eval")
    elif program in ("source", "."):
        if len(args) > 1 and args[1] in ("/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "-"):
            if c.stdin_text is not None:
                _inline_shell(c.stdin_text, False, env, st, depth, f"{program} /dev/stdin")
            else:
                st.flags.add("eval")
        if c.dynamic or any("$(…)" in a for a in args):
            st.flags.add("eval")
            _fed_flags(c, st)
    elif program == "cd" or program == "pushd":
        target = args[1] if len(args) > 1 else "~"
        if target == "--" and len(args) > 2:
            target = args[2]
        if 1 in c.dynamic or target == "-":
            env.cwd = "?"
        else:
            env.cwd = _join(env.cwd, target)
    elif program == "popd":
        env.cwd = "?"
    elif program in ("rm", "rmdir", "unlink", "shred", "srm", "trash", "trash-put"):
        recursive = bool(opts & {"-r", "-R", "--recursive"}) or program in ("rmdir",)
        if program == "rm" and recursive:
            targets = [k for k in operands]
            if from_xargs:
                if feeders:
                    _xargs_targets(c, st, feeders[-1], "rm -r")
                else:
                    st.deletes.append(("xargs rm -r", "$(stdin)", c.cwd))
            for k in targets:
                _delete(st, c, "rm -r", k)
    elif program == "find":
        _judge_find(c, env, st, depth, opts)
    elif program == "rsync" and any(
        a.startswith("--delete") or a in ("--remove-source-files",) for a in args
    ):
        if operands:
            _delete(st, c, "rsync --delete", operands[-1])
    elif program == "git":
        _judge_git(c, st)
    if from_xargs and program in SHELLS:
        st.flags.add("stdin_exec")


def _xargs_targets(c: ShellCommand, st: _State, feeder: ShellCommand, how: str) -> None:
    if feeder.program == "find":
        for s in _find_starts(feeder.argv) or ["."]:
            st.deletes.append((how, _below(s), c.cwd))
    elif (
        feeder.program in ("git", "ls", "grep", "rg", "fd", "echo", "printf", "cat")
        and not feeder.dynamic
    ):
        paths = [a for a in feeder.argv[1:] if not a.startswith("-")]
        if feeder.program in ("echo", "printf"):
            for p in paths:
                for part in p.split():
                    st.deletes.append((how, part, c.cwd))
        elif feeder.program in ("ls", "fd", "find"):
            for p in paths or ["."]:
                st.deletes.append((how, p.rstrip("/") + "/*", c.cwd))
        else:
            st.deletes.append((how, "$(stdin)", c.cwd))
    else:
        st.deletes.append((how, "$(stdin)", c.cwd))


def _below(start: str) -> str:
    """What find reaches under `start` (its start directory itself is never deleted)."""
    return start.rstrip("/") + "/**"


def _find_starts(argv: tuple[str, ...]) -> list[str]:
    starts = []
    for a in argv[1:]:
        if a.startswith("-") or a in ("(", "!", ")"):
            if a in ("-H", "-L", "-P"):
                continue
            break
        starts.append(a)
    return starts


def _judge_find(c: ShellCommand, env: _Env, st: _State, depth: int, opts: set[str]) -> None:
    args = c.argv
    starts = _find_starts(args) or ["."]
    k = 1
    while k < len(args):
        a = args[k]
        if a == "-delete":
            for s in starts:
                st.deletes.append(("find -delete", _below(s), c.cwd))
        elif a in ("-exec", "-execdir", "-ok", "-okdir"):
            j = k + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            inner = [
                x if x != "{}" else (starts[0] if len(starts) == 1 else "{}")
                for x in args[k + 1 : j]
            ]
            if inner:
                _judge_exec_argv(inner, c, env, st, depth, starts)
            k = j
        k += 1


def _judge_exec_argv(
    inner: list[str], parent: ShellCommand, env: _Env, st: _State, depth: int, starts: list[str]
) -> None:
    program = _base(inner[0])
    while program in _WRAPPERS and len(inner) > 1:
        inner = inner[1:]
        program = _base(inner[0])
    record = ShellCommand(
        program=program,
        argv=tuple(inner),
        dynamic=frozenset(),
        globs=frozenset(),
        cwd=parent.cwd,
        redirects=(),
        wrappers=(),
        pipeline=parent.pipeline,
        position=parent.position,
        via="find -exec",
        stdin=None,
    )
    st.commands.append(record)
    if program in ("rm", "shred", "unlink", "rmdir", "srm"):
        for s in starts:
            st.deletes.append(("find -exec " + program, _below(s), parent.cwd))
    elif program in SHELLS or _family(program) in INTERPRETERS:
        _judge_interpreter(record, env, st, depth, [], None, 0)
    elif program in NETWORK_PROGRAMS:
        st.network.append(program)


def _delete(st: _State, c: ShellCommand, how: str, k: int) -> None:
    target = c.argv[k]
    if k in c.dynamic:
        st.flags.add("dynamic_path")
    if k in c.globs:
        st.flags.add("destructive_glob")
    st.deletes.append((how, target, c.cwd))


def _git_subcommand(args: tuple[str, ...]) -> str:
    k = 1
    while k < len(args):
        a = args[k]
        if a in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"):
            k += 2
        elif a.startswith("-"):
            k += 1
        else:
            return a
    return ""


def _judge_git(c: ShellCommand, st: _State) -> None:
    args = c.argv
    sub = _git_subcommand(args)
    if (
        sub == "clean"
        and c.cwd is not None
        and any(
            a.startswith("-") and "f" in a and "d" in a for a in args[2:] if not a.startswith("--")
        )
    ):
        st.deletes.append(("git clean", ".", c.cwd))


def _judge_interpreter(
    c: ShellCommand,
    env: _Env,
    st: _State,
    depth: int,
    feeders: list[ShellCommand],
    stdin_text: str | None,
    position: int,
) -> None:
    program, args = c.program, c.argv
    family = _family(program)
    inline_opts = _INLINE_OPTS.get(family, ())
    code: str | None = None
    code_dynamic = False
    has_script = False
    k = 1
    while k < len(args):
        a = args[k]
        if program in SHELLS and a.startswith("-") and not a.startswith("--") and "c" in a[1:]:
            if k + 1 < len(args):
                code, code_dynamic = args[k + 1], (k + 1) in c.dynamic
            has_script = True
            break
        if a in inline_opts or (family == "python" and a.startswith("-c") and len(a) > 2):
            if a.startswith("-c") and len(a) > 2:
                code, code_dynamic = a[2:], k in c.dynamic
            elif k + 1 < len(args):
                code, code_dynamic = args[k + 1], (k + 1) in c.dynamic
            has_script = True
            break
        if family == "awk" and not a.startswith("-"):
            code, code_dynamic = a, k in c.dynamic
            has_script = True
            break
        if a in ("-m", "-s") and family == "python" and a == "-m":
            has_script = True
            if k + 1 < len(args) and args[k + 1] == "http.server":
                st.network.append("python -m http.server")
            break
        if a.startswith("-") and a != "-":
            if family == "python" and a in ("-W", "-X", "-Q"):
                k += 2
                continue
            if program in SHELLS and a in ("-o", "+o", "-O", "+O"):
                k += 2
                continue
            if family == "node" and a in ("-r", "--require", "--import"):
                k += 2
                continue
            k += 1
            continue
        if a == "-":
            break
        has_script = True
        break
    if code is not None:
        st.flags.add("inline_code")
        if code_dynamic:
            st.flags.add("opaque_inline")
            _fed_flags(c, st)
        elif program in SHELLS:
            _inline_shell(code, False, env, st, depth, f"{program} -c")
        else:
            _inline_code(code, family, st, c)
    if has_script:
        script = k if code is None else None
        if script is not None and script in c.dynamic:
            # `bash <(curl ...)`, `python3 $(mktemp)`: the script itself is generated
            st.flags.add("stdin_exec")
            _fed_flags(c, st)
            if not c.fed:
                st.flags.add("eval")
        return
    # no program argument: it runs what reaches its standard input
    if stdin_text is not None:
        if program in SHELLS:
            _inline_shell(stdin_text, False, env, st, depth, f"{program} < text")
        else:
            _inline_code(stdin_text, family, st, c)
        return
    if c.stdin and c.stdin.startswith("here-string"):
        st.flags.add("stdin_exec")
        st.flags.add("opaque_inline")
        return
    if position > 0 and feeders:
        source = feeders[-1]
        upstream = list(feeders)
        known = False
        if any(f.program in NETWORK_PROGRAMS or f.program == "/dev/tcp" for f in upstream):
            st.flags.add("remote_exec")
            known = True
        if any(_is_decoder(f) for f in upstream):
            st.flags.add("decode_exec")
            known = True
        if source.program == "cat" and len(source.argv) == 1 and source.stdin_text is not None:
            if program in SHELLS:
                _inline_shell(source.stdin_text, False, env, st, depth, f"cat | {program}")
            else:
                _inline_code(source.stdin_text, family, st, c)
        elif source.program in ("echo", "printf") and not source.dynamic:
            text = " ".join(a for a in source.argv[1:] if a not in ("-e", "-n", "-E"))
            if source.program == "printf" or "-e" in source.argv[1:2]:
                text = text.replace("\\n", "\n")
            if program in SHELLS:
                _inline_shell(text, False, env, st, depth, f"echo | {program}")
            else:
                _inline_code(text, family, st, c)
        elif not known:
            st.flags.add("stdin_exec")
        return
    if c.stdin == "file":
        return
    for op, target in c.redirects:
        if op == "<" and target and "$(…)" in target:
            st.flags.add("remote_exec" if _any_network_sub(st) else "eval")
    # a process substitution in its arguments: `bash <(curl ...)`
    if c.via != "substitution" and any("$(…)" in a for a in args[1:]):
        st.flags.add("stdin_exec")


def _fed_flags(c: ShellCommand, st: _State) -> None:
    if "network" in c.fed:
        st.flags.add("remote_exec")
    if "decode" in c.fed:
        st.flags.add("decode_exec")


def _any_network_sub(st: _State) -> bool:
    return any(c.via == "substitution" and c.program in NETWORK_PROGRAMS for c in st.commands)


def _is_decoder(c: ShellCommand) -> bool:
    if c.program in ("base64", "base32", "basenc"):
        return any(
            a in ("-d", "--decode", "-D")
            or (a.startswith("-") and "d" in a and not a.startswith("--"))
            for a in c.argv[1:]
        )
    if c.program == "xxd":
        return any(a.startswith("-r") or a == "-revert" for a in c.argv[1:])
    if c.program == "openssl":
        return any(a in ("-d", "base64", "enc") for a in c.argv[1:])
    if c.program in ("gunzip", "zcat", "uudecode", "rev"):
        return True
    if c.program in ("gzip", "bzip2", "xz"):
        return any(a in ("-d", "--decompress") for a in c.argv[1:])
    if c.program == "tr":
        return True
    if c.program == "printf":
        return any("\\x" in a or "\\0" in a for a in c.argv[1:])
    if c.program in ("echo",):
        return any("\\x" in a for a in c.argv[1:]) and "-e" in c.argv[1:]
    return False


_INLINE_DELETE = (
    "rmtree", "os.remove", "os.unlink", "os.rmdir", "unlink(", "unlinkSync", "rmdir(", "rmSync",
    "rm_rf", "rm_r", "FileUtils.rm", "File.delete", "fs.rm", "rimraf", "remove_tree",
    "Path.unlink", ".unlink(", "shutil.", "rmdirSync", "deleteSync", "Remove-Item",
)  # fmt: skip
_INLINE_EXEC = (
    "os.system", "subprocess", "popen", "Popen", "exec(", "execSync", "execv", "spawn",
    "child_process", "system(", "`", "IO.popen", "Kernel.exec", "%x", "os.exec", "pty.spawn",
    "eval(", "Invoke-Expression", "run(",
)  # fmt: skip
_INLINE_NETWORK = (
    "socket", "urllib", "urlopen", "requests", "http.client", "httpx", "aiohttp", "ftplib",
    "smtplib", "telnetlib", "fetch(", "http.get", "https.get", "http.request", "https.request",
    "net.connect", "net.Socket", "dgram", "XMLHttpRequest", "LWP", "IO::Socket", "HTTP::Tiny",
    "Net::", "open-uri", "URI.open", "TCPSocket", "UDPSocket", "curl", "wget", "dns.resolve",
    "dns.lookup", "gethostbyname", "getaddrinfo", "Invoke-WebRequest", "WebClient",
    "file_get_contents(\"http", "file_get_contents('http", "fsockopen", "http://", "https://",
)  # fmt: skip


def _inline_code(code: str, family: str, st: _State, c: ShellCommand) -> None:
    """Inline code of an interpreter: what its text says it does (no interpreter is run)."""
    if any(m in code for m in _INLINE_NETWORK):
        st.flags.add("inline_network")
        st.network.append(f"{c.program} inline code")
    if any(m in code for m in _INLINE_DELETE):
        st.flags.add("inline_delete")
        for target in _literal_args(
            code, ("rmtree", "rm_rf", "rm_r", "rmSync", "remove_tree", "rimraf", "rmdir", "fs.rm")
        ):
            st.deletes.append((f"{c.program} inline code", target, c.cwd))
    if (any(m in code for m in _INLINE_EXEC) and family != "awk") or (
        family == "awk" and "system(" in code
    ):
        st.flags.add("inline_exec")
        for text in _string_literals(code):
            if " " in text or text in ("reboot", "halt"):
                try:
                    items = _parse_text(text, _MAX_DEPTH - 2)
                except _Unparseable:
                    continue
                sub = _State()
                try:
                    _walk(items, _Env(c.cwd), sub, _MAX_DEPTH - 2, via=f"{c.program} inline code")
                except _Unparseable:
                    continue
                st.commands.extend(sub.commands)
                st.flags |= sub.flags
                st.deletes.extend(sub.deletes)
                st.network.extend(sub.network)
                st.creds.extend(sub.creds)
    for text in _string_literals(code):
        if is_credential_path(text, c.cwd):
            st.creds.append(text)
            st.reads.append(text)


def _string_literals(code: str) -> Iterator[str]:
    """Quoted string literals in inline code (single, double or backquoted), in order."""
    i, n = 0, len(code)
    while i < n:
        q = code[i]
        if q in "'\"`":
            j = i + 1
            buf: list[str] = []
            while j < n and code[j] != q:
                if code[j] == "\\" and j + 1 < n:
                    buf.append(code[j + 1])
                    j += 2
                    continue
                buf.append(code[j])
                j += 1
            yield "".join(buf)
            i = j + 1
        else:
            i += 1


def _literal_args(code: str, names: tuple[str, ...]) -> Iterator[str]:
    """The first string literal after each call of one of `names` (a best effort: the
    deletion flag is raised whatever this finds)."""
    for name in names:
        start = 0
        while True:
            at = code.find(name, start)
            if at < 0:
                break
            start = at + len(name)
            rest = code[start : start + 400]
            for lit in _string_literals(rest):
                yield lit
                break
            else:
                yield "$(unknown)"


def _join(cwd: str | None, target: str) -> str:
    if cwd == "?" or "$" in target:
        return "?"
    if target.startswith("/") or target.startswith("~"):
        return target
    if cwd is None:
        return posixpath.normpath(target) if target else "."
    return posixpath.join(cwd, target)


# -- credential paths -------------------------------------------------------------------------


def _glob_match(pattern: str, text: str) -> bool:
    """Shell glob match (``*``, ``?``, ``[...]``) of `text` against `pattern`; ``*`` crosses
    ``/`` here (the credential list is about names, not depth). Linear-space DP, O(len^2)
    bounded by short credential patterns and a cap on `text`."""
    p, t = pattern, text[:512]
    # iterative wildcard matching with backtracking to the last star: O(len(p) * len(t))
    pi = ti = 0
    star = mark = -1
    while ti < len(t):
        if pi < len(p) and p[pi] == "[":
            end = p.find("]", pi + 1)
            if end > pi:
                chars = p[pi + 1 : end]
                neg = chars.startswith("!") or chars.startswith("^")
                if neg:
                    chars = chars[1:]
                hit = _in_class(t[ti], chars)
                if hit != neg:
                    pi, ti = end + 1, ti + 1
                    continue
            if star >= 0:
                pi, mark = star + 1, mark + 1
                ti = mark
                continue
            return False
        if pi < len(p) and (p[pi] == "?" or p[pi] == t[ti]):
            pi, ti = pi + 1, ti + 1
        elif pi < len(p) and p[pi] == "*":
            star, mark = pi, ti
            pi += 1
        elif star >= 0:
            pi, mark = star + 1, mark + 1
            ti = mark
        else:
            return False
    while pi < len(p) and p[pi] == "*":
        pi += 1
    return pi == len(p)


def _in_class(ch: str, chars: str) -> bool:
    k = 0
    while k < len(chars):
        if k + 2 < len(chars) and chars[k + 1] == "-":
            if chars[k] <= ch <= chars[k + 2]:
                return True
            k += 3
        else:
            if chars[k] == ch:
                return True
            k += 1
    return False


def _home_forms(path: str) -> list[str]:
    """`path` with any home directory prefix written ``~``."""
    out = [path]
    for prefix in ("/home/", "/Users/"):
        if path.startswith(prefix):
            rest = path[len(prefix) :]
            slash = rest.find("/")
            out.append("~" + (rest[slash:] if slash >= 0 else ""))
    if path.startswith("/root"):
        out.append("~" + path[5:])
    if path.startswith("~") and not path.startswith("~/") and path != "~":
        slash = path.find("/")
        out.append("~" + (path[slash:] if slash >= 0 else ""))
    return out


@functools.lru_cache(maxsize=4096)
def is_credential_path(path: str, cwd: str | None = None) -> bool:
    """Whether `path` (quote-removed; ``~`` or ``$HOME`` for the home directory; it may hold
    globs) names or may name a credential path of `CREDENTIAL_PATHS`. A glob in `path` counts
    when some name it could match is a credential path (``~/.aws/cred*``, ``~/.a*/c*``)."""
    if not path or len(path) > 1024 or "\x00" in path:
        return False
    path = path.replace("$HOME", "~").replace("${HOME}", "~")
    if cwd and cwd != "?" and not path.startswith(("/", "~")):
        path = posixpath.join(cwd, path)
    if path.startswith(("/", "~")):
        path = posixpath.normpath(path)
    path = path.rstrip("/") or "/"
    forms = _home_forms(path)
    has_glob = any(ch in path for ch in "*?[")
    for form in forms:
        for pattern in CREDENTIAL_PATHS:
            if pattern.startswith("**/"):
                tail = pattern[3:]
                parts = form.split("/")[-8:]
                for k in range(len(parts)):
                    suffix = "/".join(parts[k:])
                    if _glob_match(tail, suffix) or (has_glob and _glob_match(suffix, tail)):
                        return True
                if has_glob and "/" in form and _glob_match(form, "x/" + tail):
                    return True
            else:
                if _glob_match(pattern, form) or (has_glob and _glob_match(form, pattern)):
                    return True
                # a glob in the path that could reach inside a credential directory
                if has_glob and not pattern.endswith("*") and _glob_match(form, pattern + "/x"):
                    return True
    return False


# -- entry points -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def analyse(text: str) -> Analysis:
    """The analysis of one command line; never raises (a line it cannot follow is flagged
    ``unparseable`` with the reason in `problem`)."""
    st = _State()
    problem: str | None = None
    if not isinstance(text, str):
        text = str(text)
    if len(text) > MAX_LENGTH:
        st.flags.add("unparseable")
        problem = f"longer than {MAX_LENGTH} characters"
    else:
        try:
            items = _parse_text(text, 0)
            _walk(items, _Env(), st, 0)
            problem = st.problem
        except _Unparseable as exc:
            st.flags.add("unparseable")
            problem = str(exc)
        except RecursionError:
            st.flags.add("unparseable")
            problem = "nested too deeply"
    return Analysis(
        commands=tuple(st.commands),
        flags=frozenset(st.flags),
        reads=tuple(dict.fromkeys(st.reads)),
        credential_reads=tuple(dict.fromkeys(st.creds)),
        network=tuple(dict.fromkeys(st.network)),
        deletes=tuple(dict.fromkeys(st.deletes)),
        problem=problem,
    )


def shell_view(text: str) -> dict[str, Any]:
    """The parsed view of `text` as I-JSON (a fresh dict on every call): ``commands``
    (``program``, ``argv``, ``dynamic``, ``cwd``, ``redirects``, ``wrappers``, ``pipeline``,
    ``position``, ``via``, ``stdin``), ``flags``, ``reads``, ``credential_reads``, ``network``,
    ``deletes`` (``how``, ``target``, ``cwd``) and ``problem`` when it is unparseable."""
    return analyse(text).view()
