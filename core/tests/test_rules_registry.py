"""The built-in rules load per module, by name, and the registry still shows them all.

A policy set loads only the rule modules it names; listing the rules, an unknown name and a
rule registered under a built-in's name see every built-in, exactly as if all were loaded
up front. The checks that depend on what is loaded run in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import charter
from charter._policy.rules import BUILTIN_RULES


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_table_names_the_module_of_every_built_in_rule() -> None:
    builtins = {spec.name: spec for spec in charter.registered_rules() if spec.builtin}
    assert set(BUILTIN_RULES) == set(builtins)
    for name, spec in builtins.items():
        assert spec.fn.__module__ == f"charter._policy.rules.{BUILTIN_RULES[name]}", name


def test_a_policy_set_loads_only_the_rule_modules_it_names() -> None:
    out = _fresh(
        """
        import sys
        import charter
        charter.PolicyEngine([
            {"name": "p", "rule_type": "no_secrets", "severity": "high",
             "params": {"fields": ["input"]}},
        ])
        print(" ".join(sorted(m for m in sys.modules if m.startswith("charter._policy.rules."))))
        """
    )
    loaded = {m.rpartition(".")[2] for m in out.split()}
    assert "guards" in loaded
    assert not loaded & {"capabilities", "history", "registration", "shell"}, loaded


def test_listing_the_rules_and_an_unknown_name_show_every_built_in() -> None:
    out = _fresh(
        """
        import charter
        try:
            charter.get_rule("no_such_rule")
        except KeyError as exc:
            print(exc.args[0])
        print(" ".join(spec.name for spec in charter.registered_rules()))
        """
    )
    message, listed = out.splitlines()
    assert set(listed.split()) >= set(BUILTIN_RULES)
    for name in BUILTIN_RULES:
        assert repr(name) in message or name in message


def test_a_rule_under_a_built_in_name_is_refused_before_its_module_loads() -> None:
    out = _fresh(
        """
        import charter
        try:
            charter.rule(name="shell_command", description="mine")(lambda v, p, c: True)
        except ValueError as exc:
            print(exc)
        print(charter.get_rule("shell_command").builtin)
        """
    )
    refusal, builtin = out.splitlines()
    assert "already registered" in refusal
    assert builtin == "True"
