"""No backtracking regular expression runs on what an agent controls.

Python's `re` backtracks: a pattern that is fine on a sentence can take minutes on a long
token (the provenance index's e-mail pattern took 37 s on 100,000 characters, past every hook
deadline). Text from the agent is scanned with RE2 (linear time) or plain string methods; the
only `re` imports left in core, the integrations and the templates are listed here with what
they read, none of it agent-controlled or longer than a step name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    REPO / "core" / "src",
    *sorted(REPO.glob("integrations/*/src")),
    *REPO.glob("packages/*/src"),
]

ALLOWED = {
    "core/src/charter/_model/paths.py": "field paths written in policies",
    "core/src/charter/_policy/selector.py": "policy globs, matched on step names (at most 255 "
    "characters; fnmatch's atomic groups do not backtrack across stars)",
    "core/src/charter/_policy/rules/basic.py": "policy globs, matched on tool names (as above)",
    "core/src/charter/_policy/rules/guards.py": "hours written in policies",
    "core/src/charter/_cli/_common.py": "shortening reasons for the terminal",
    "core/src/charter/_cli/policytest.py": "the -k pattern a person types",
    "core/src/charter/_cli/report.py": "the --since duration a person types",
    "integrations/crewai/src/charter_crewai/_crewai.py": "the installed crewai version",
    "packages/templates/src/charter_templates/_load.py": "template files (author-written)",
    "packages/templates/src/charter_templates/_model.py": "template patterns (author-written)",
    "packages/templates/src/charter_templates/_words.py": "splitting tool names into words",
}


def _imports_re(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name == "re" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "re":
            return True
    return False


def test_only_listed_modules_use_backtracking_regular_expressions() -> None:
    found = {
        str(p.relative_to(REPO)) for src in SOURCES for p in src.rglob("*.py") if _imports_re(p)
    }
    assert found - set(ALLOWED) == set(), "scan agent text with RE2 (charter._policy.regex)"


@pytest.mark.parametrize("token", ["a" * 100_000, "a@" * 50_000, "<a@" * 30_000])
def test_provenance_extraction_of_a_long_token_keeps_its_candidates(token: str) -> None:
    from charter._policy.rules._provenance import trusted_candidates

    text = f"mail bob@example.com via https://host.example/x then {token}"
    found = trusted_candidates([text])
    assert {("t", "bob@example.com"), ("h", "example.com"), ("h", "host.example")} <= found
