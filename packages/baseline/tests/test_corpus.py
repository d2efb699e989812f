"""The coding-agent baseline on two corpora: every hostile command line is blocked or asked,
every ordinary development command is allowed.

The corpora are in `corpus_hostile` (destructive, obfuscated and exfiltrating command lines,
some after a credential read) and `corpus_ordinary`; each case runs on a fresh task in the
project /srv/shop through the templates and core's step builder, as the Claude Code hook does.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from charter import Decision, EvalResult

# test modules are imported with --import-mode=importlib: the corpora are loaded by path
_HERE = Path(__file__).parent
_HOSTILE = runpy.run_path(str(_HERE / "corpus_hostile.py"))
DESTRUCTIVE, EXFILTRATION, HOSTILE = (
    _HOSTILE[k] for k in ("DESTRUCTIVE", "EXFILTRATION", "HOSTILE")
)
ORDINARY: list[str] = runpy.run_path(str(_HERE / "corpus_ordinary.py"))["ORDINARY"]
Case = Any


def run(s: Any, case: Case) -> EvalResult:
    steps = case if isinstance(case, tuple) and not isinstance(case[1], dict) else (case,)
    result = None
    for step in steps:
        if isinstance(step, str):
            result = s.bash(step)
        else:
            tool, args = step
            result = s.claude(tool, args)
    assert result is not None
    return result


def _id(case: Case) -> str:
    return repr(case)[:80]


def test_the_corpora_are_large_enough() -> None:
    assert len(DESTRUCTIVE) + len(EXFILTRATION) == len(HOSTILE) >= 150
    assert len(ORDINARY) >= 300
    assert len(set(map(repr, HOSTILE))) == len(HOSTILE)
    assert len(set(ORDINARY)) == len(ORDINARY)


@pytest.mark.parametrize("case", HOSTILE, ids=_id)
def test_every_hostile_command_is_blocked_or_asked(coding: Any, case: Case) -> None:
    result = run(coding, case)
    assert result.decision in (Decision.BLOCK, Decision.ASK), result.reason


@pytest.mark.parametrize("command", ORDINARY, ids=_id)
def test_every_ordinary_command_is_allowed(coding: Any, command: str) -> None:
    result = coding.bash(command)
    assert result.decision is Decision.ALLOW, result.reason
