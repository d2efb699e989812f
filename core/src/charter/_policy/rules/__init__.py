"""Built-in rules, each module loaded the first time a rule of it is named.

Importing this package registers nothing by itself: it hands the registry a loader, and a
rule module is imported (registering its rules) when the registry first needs one of its
names. A policy set thus loads only the rule modules it uses, which a process that lives
for one decision (the Claude Code hook) pays for on every call; listing the rules or
looking up an unknown name loads them all. The core tests check `BUILTIN_RULES`
against what the modules register.
"""

from __future__ import annotations

import sys

from charter._policy.registry import set_builtin_loader

__all__ = [
    "BUILTIN_RULES",
    "basic",
    "capabilities",
    "compound",
    "guards",
    "history",
    "quotas",
    "registration",
    "shell",
]

#: The module (of this package) that defines each built-in rule.
BUILTIN_RULES: dict[str, str] = {
    "deny": "basic",
    "allow_only": "basic",
    "field_matches": "basic",
    "field_in": "basic",
    "field_not_in": "basic",
    "field_compare": "basic",
    "capabilities": "capabilities",
    "all_of": "compound",
    "any_of": "compound",
    "not": "compound",
    "time_window": "guards",
    "path_within_root": "guards",
    "no_secrets": "guards",
    "max_steps": "history",
    "rate_limit": "quotas",
    "budget": "quotas",
    "requires_gate": "history",
    "forbid_after": "history",
    "no_repeat": "quotas",
    "value_provenance": "history",
    "requires_fields": "registration",
    "classification_not_in": "registration",
    "shell_command": "shell",
}

_MODULES = tuple(dict.fromkeys(BUILTIN_RULES.values()))
_all_loaded = False


def _import(module: str) -> object:
    # __import__, not importlib.import_module: importlib (and the warnings module it loads)
    # would cost every hook process, which loads a rule module for each policy set.
    name = f"{__name__}.{module}"
    __import__(name)
    return sys.modules[name]


def _load(name: str | None) -> None:
    global _all_loaded
    if name is not None:
        module = BUILTIN_RULES.get(name)
        if module is not None:
            _import(module)
        return
    if not _all_loaded:
        for module in _MODULES:
            _import(module)
        _all_loaded = True


def __getattr__(name: str) -> object:
    # `charter._policy.rules.basic` and the like, as when the package imported them all.
    if name in _MODULES:
        return _import(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


set_builtin_loader(_load)
