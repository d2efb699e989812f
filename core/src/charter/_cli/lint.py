"""`charter check`'s warnings: policies that load but do not do what they seem to.

Each warning is one sentence naming the policy, what is wrong and how to fix it:

- a counting rule (max_steps, rate_limit, budget) whose `match` narrows the steps it judges
  while `params.select` is missing: the rule then counts every step of the task, so a
  "at most 3 deploys" policy fires on the fourth step of any kind;
- a policy that can never match: `match.verbs` that no kind in `match.kinds` takes, or
  literal `match.step_names` that the templates map to none of the matched kinds;
- a `match.step_names` glob that no template, no manifest (`allow_only` tools) and no name
  the built-in integrations use would ever produce (a typo, or a tool named otherwise).

Templates come from charter-templates when it is installed; without it the template checks
are skipped.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, verbs_for
from charter._policy.policy import Policy

__all__ = ["COUNTING_RULES", "policy_warnings"]

COUNTING_RULES = ("max_steps", "rate_limit", "budget")
# Step names Charter's own integrations and runner give to steps that are not tool calls.
_BUILT_IN_NAMES = ("user_prompt", "approval", "model", "task", "node", "crew", "agent")
_INTEGRATIONS = ("generic", "claude_code")


def _templates() -> Any:
    try:
        import charter_templates  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return charter_templates


def _declared_names(policies: Iterable[Policy]) -> set[str]:
    """Tool names the manifests themselves declare (allow_only `tools`, literal globs)."""
    names: set[str] = set(_BUILT_IN_NAMES)
    for p in policies:
        tools = p.params.get("tools") if isinstance(p.params, Mapping) else None
        if isinstance(tools, list):
            names.update(t for t in tools if isinstance(t, str))
    return names


def _resolutions(templates: Any, glob: str) -> list[tuple[str, str | None]]:
    """(kind, verb) the templates give a step named like `glob` (a wildcard read as a word
    boundary)."""
    # A wildcard stands for other words of the name: `*refund*` is judged as `refund`.
    name = "_".join(glob.replace("?", "*").replace("[", "*").replace("]", "*").split("*")).strip(
        "_"
    )
    found = []
    for integration in _INTEGRATIONS:
        try:
            resolved = templates.resolve(integration, name)
        except Exception:  # a broken template must not stop the check
            continue
        kind, verb = resolved.kind, resolved.verb
        if str(kind) != ActionKind.STEP_UNKNOWN.value:
            found.append((str(kind), None if verb is None else str(verb)))
    return found


def _kinds(match: Mapping[str, Any]) -> list[str]:
    kinds = match.get("kinds")
    if isinstance(kinds, list) and kinds:
        return [str(k) for k in kinds]
    return [k.value for k in ActionKind if k not in TASK_BOUNDARY_KINDS]


def policy_warnings(policies: Sequence[Policy], known: Sequence[Policy] = ()) -> list[str]:
    """The warnings for `policies`; `known` are every policy checked together (their declared
    tools count as declared names). Pure apart from reading the installed templates."""
    templates = _templates()
    declared = _declared_names([*policies, *known])
    out: list[str] = []
    for p in policies:
        match = p.match if isinstance(p.match, Mapping) else {}
        narrows = any(match.get(k) for k in ("kinds", "verbs", "step_names"))
        params = p.params if isinstance(p.params, Mapping) else {}
        if p.rule_type in COUNTING_RULES and narrows and "select" not in params:
            out.append(
                f"policy {p.name!r} ({p.rule_type}): `match` narrows which steps it judges, but "
                "without `params.select` it counts every step of the task; add `select:` with "
                "the same kinds/verbs/step_names to count only those"
            )
        kinds = _kinds(match)
        verbs = [str(v) for v in match.get("verbs") or ()]
        if verbs and not any(v in {x.value for x in verbs_for(k)} for k in kinds for v in verbs):
            out.append(
                f"policy {p.name!r} can never match: no kind in {kinds} takes the verbs "
                f"{verbs} (see `charter schema` for the kind/verb pairs)"
            )
            continue
        globs = [str(g) for g in match.get("step_names") or ()]
        if not globs:
            continue
        unknown = [
            g
            for g in globs
            if not any(fnmatch.fnmatchcase(n, g) for n in declared)
            and (templates is None or not _resolutions(templates, g))
        ]
        if templates is not None:
            for g in unknown:
                out.append(
                    f"policy {p.name!r}: match.step_names {g!r} names a step that no template, "
                    "tool or manifest declares; check the spelling (tools are matched by their "
                    "exact, case-sensitive name) or declare the tool with allow_only's `tools`"
                )
        if templates is None or not match.get("kinds"):
            continue
        literal = [g for g in globs if not any(c in g for c in "*?[") and g not in unknown]
        if literal and len(literal) == len(globs):
            mapped = {r for g in literal for r in _resolutions(templates, g)}
            if mapped and not any(k in kinds and (not verbs or v in verbs) for k, v in mapped):
                shown = ", ".join(sorted(f"{k} {v or ''}".strip() for k, v in mapped))
                out.append(
                    f"policy {p.name!r} can never match: the templates map {literal} to "
                    f"{shown}, not to {kinds}{' ' + str(verbs) if verbs else ''}; fix "
                    "match.kinds or match.verbs"
                )
    return out
