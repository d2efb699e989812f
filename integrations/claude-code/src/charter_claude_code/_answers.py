"""What the hook answers, in Claude Code's contract for each event.

Claude Code reads a hook's answer from its exit code and standard output: exit 0 with JSON on
stdout is a decision; exit 2 blocks (for the events that can be blocked) with stderr as the
reason; any other exit code, a crash or a timeout is a *non-blocking* error, so the tool runs.
Everything here produces exit 0 with JSON except the last-resort path of the events where
exit 2 means "refuse" (PreToolUse, UserPromptSubmit). For Stop and SubagentStop, exit 2 and
``decision: block`` mean "keep working", so those events never use either.
"""

from __future__ import annotations

import sys

__all__ = [
    "BLOCKABLE_EVENTS",
    "HOOK_EVENTS",
    "HookAnswer",
    "blocked_prompt",
    "failure",
    "json_text",
    "last_resort",
    "notice",
    "pre_tool_use",
    "silent",
]

HOOK_EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "Stop",
    "SubagentStop",
)
# Events whose exit code 2 refuses the thing that is about to happen.
BLOCKABLE_EVENTS = frozenset({"PreToolUse", "UserPromptSubmit"})

_PREFIX = "Charter"


class HookAnswer:
    """One hook answer: the process exit code, its stdout and stderr.

    `decision` is Charter's view of the answer (allow, warn, ask, block, none or error), for
    callers and tests; Claude Code only sees the exit code and the streams. Immutable;
    equal when all four are. (A plain slotted class: creating a dataclass costs a hook
    process, whose whole lifetime is the user's wait, about a millisecond.)
    """

    __slots__ = ("decision", "exit_code", "stderr", "stdout")
    exit_code: int
    stdout: str
    stderr: str
    decision: str

    def __init__(self, exit_code: int, stdout: str, stderr: str = "", decision: str = "none"):
        set_ = object.__setattr__
        set_(self, "exit_code", exit_code)
        set_(self, "stdout", stdout)
        set_(self, "stderr", stderr)
        set_(self, "decision", decision)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HookAnswer is immutable: cannot set {name!r}")

    def _fields(self) -> tuple[int, str, str, str]:
        return (self.exit_code, self.stdout, self.stderr, self.decision)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"HookAnswer(exit_code={self.exit_code!r}, stdout={self.stdout!r}, "
            f"stderr={self.stderr!r}, decision={self.decision!r})"
        )

    def json(self) -> dict[str, object]:
        """The parsed stdout (an empty object when there is none)."""
        import json

        return json.loads(self.stdout) if self.stdout.strip() else {}


def json_text(data: object, **keywords: object) -> str:
    """`json.dumps(data, **keywords)`, by Charter's codec when it is loaded.

    On the judging path Charter's codec is loaded and json is not (importing it would cost
    every call milliseconds); text written before Charter loads, or when it cannot, comes
    from json itself.
    """
    integration = sys.modules.get("charter.integration")
    if integration is None:
        import json

        return json.dumps(data, **keywords)  # type: ignore[arg-type]
    return str(integration.json_dumps(data, **keywords))


def _dump(data: dict[str, object]) -> str:
    return json_text(data, ensure_ascii=False, separators=(",", ":"))


def silent() -> HookAnswer:
    """No opinion: Claude Code carries on as if the hook were not there."""
    return HookAnswer(0, "{}", "", "none")


def pre_tool_use(
    decision: str, reason: str, *, auto_approve: bool, warning: str | None = None
) -> HookAnswer:
    """The PreToolUse answer for a Charter decision (allow, warn, ask or block).

    Allowed steps get no permission decision unless `auto_approve`: Claude Code's ``allow``
    skips the user's own permission prompt, which a governance layer must not do on its own.
    A warning travels to the model as additional context and to the user as a system message.
    """
    out: dict[str, object] = {"hookEventName": "PreToolUse"}
    if decision == "block":
        out["permissionDecision"] = "deny"
        out["permissionDecisionReason"] = reason
    elif decision == "ask":
        out["permissionDecision"] = "ask"
        out["permissionDecisionReason"] = reason
    elif auto_approve:
        out["permissionDecision"] = "allow"
        out["permissionDecisionReason"] = reason
    data: dict[str, object] = {"hookSpecificOutput": out}
    if warning:
        out["additionalContext"] = warning
        data["systemMessage"] = warning
    if len(data) == 1 and len(out) == 1:
        return HookAnswer(0, "{}", "", decision)
    return HookAnswer(0, _dump(data), "", decision)


def blocked_prompt(reason: str) -> HookAnswer:
    """UserPromptSubmit: refuse the prompt (Claude Code erases it and shows `reason`)."""
    return HookAnswer(0, _dump({"decision": "block", "reason": reason}), "", "block")


def notice(event: str, message: str, *, context: str | None = None) -> HookAnswer:
    """Tell the user (and, where the event allows, the model) something without deciding."""
    data: dict[str, object] = {"systemMessage": message}
    if context and event in ("PostToolUse", "PostToolUseFailure", "SessionStart"):
        data["hookSpecificOutput"] = {"hookEventName": event, "additionalContext": context}
    return HookAnswer(0, _dump(data), "", "none")


def failure(event: str | None, reason: str) -> HookAnswer:
    """The answer when Charter cannot decide: refuse what can be refused, say so otherwise.

    PreToolUse denies and UserPromptSubmit blocks (exit 0 with JSON); every other event
    cannot stop anything that has not already happened, so it reports `reason` to the user
    and exits 0. An unknown event (unreadable input and no ``--event``) exits 2 with the
    reason on stderr: for PreToolUse, the event that matters, that blocks. An event Charter
    does not govern exits 0.
    """
    text = f"{_PREFIX} could not decide, so it refuses: {reason}"
    if event == "PreToolUse":
        return HookAnswer(
            0,
            _dump(
                {
                    "hookSpecificOutput": {
                        "hookEventName": "PreToolUse",
                        "permissionDecision": "deny",
                        "permissionDecisionReason": text,
                    }
                }
            ),
            text,
            "error",
        )
    if event == "UserPromptSubmit":
        return HookAnswer(0, _dump({"decision": "block", "reason": text}), text, "error")
    if event in HOOK_EVENTS:
        message = f"{_PREFIX} hook failed on {event}: {reason}"
        return HookAnswer(0, _dump({"systemMessage": message}), message, "error")
    if event is not None:
        # An event Charter does not govern (Notification, PreCompact, ...): exit 2 there would
        # refuse something Charter has no opinion on (PreCompact: the compaction).
        return HookAnswer(0, "{}", text, "error")
    return HookAnswer(2, "", text, "error")


def last_resort(event: str | None, reason: str) -> tuple[int, bytes]:
    """(exit code, stderr bytes) when even writing the JSON answer failed."""
    if event is not None and event not in HOOK_EVENTS:
        code = 0  # an event Charter does not govern
    else:
        code = 2 if event in BLOCKABLE_EVENTS or event is None else 1
    text = f"{_PREFIX} could not answer: {reason}\n"
    return code, text.encode("utf-8", "replace")
