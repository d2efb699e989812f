"""The engine's fast path gives the verdicts the rules give one by one.

Complying policies share one result object per policy, and forbidding patterns on one field
are searched together in an RE2 set; neither may change what `evaluate` returns. The walk
that finds the field paths a loaded policy reads skips plain values and common containers
quickly; it must find what the full chain of tests finds.
"""

from __future__ import annotations

from typing import Any

import pytest
from charter import Behavior, Decision, EvalContext, PolicyEngine, PolicyResult, Severity
from charter._engine.engine import EvaluationDeadline
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CTX = EvalContext(agent_id="agent", task_id="t1")

PATTERNS = [r"\brm\s+-rf\s+/", r"\bmkfs", r"curl[^|]*\|\s*(ba)?sh", r"^sudo\b", "DROP TABLE"]


def forbid(name: str, pattern: str, field: str = "input.command", **params: Any) -> dict[str, Any]:
    return {
        "name": name,
        "rule_type": "field_matches",
        "severity": "critical",
        "description": f"no {name}",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": field, "pattern": pattern, **params},
    }


# Several forbidding patterns on one field (one set), two folding case (another set), one on
# another field, one in require mode, and rules of other kinds around them.
POLICIES: list[dict[str, Any]] = [
    *(forbid(f"p{i}", p) for i, p in enumerate(PATTERNS)),
    forbid("fold-a", "secret", ignore_case=True),
    forbid("fold-b", "token", ignore_case=True),
    forbid("cwd", r"^/etc", field="input.cwd"),
    forbid("args", "--force", field="input.args[*]"),
    forbid("args-2", "--no-verify", field="input.args[*]"),
    forbid("strict", "^(ls|cat) ", mode="require", if_missing="comply"),
    {
        "name": "tools",
        "rule_type": "allow_only",
        "severity": "high",
        "action": "ask",
        "params": {"tools": ["Bash", "Read"]},
    },
    {
        "name": "tables",
        "rule_type": "field_not_in",
        "severity": "medium",
        "params": {"field": "input.table", "values": ["users"]},
    },
]


def step(**input: Any) -> Behavior:
    return Behavior(agent_id="agent", task_id="t1", kind="step.exec", step_name="Bash", input=input)


def one_by_one(policies: list[dict[str, Any]], behavior: Behavior) -> tuple[PolicyResult, ...]:
    """What each policy answers in an engine of its own (no set can form there)."""
    out: list[PolicyResult] = []
    for policy in policies:
        out.extend(PolicyEngine([policy]).evaluate(behavior, CTX).results)
    return tuple(out)


def test_many_complying_policies_give_one_full_result_each() -> None:
    policies = [forbid(f"rule-{i}", f"never-{i}-here") for i in range(40)]
    result = PolicyEngine(policies).evaluate(step(command="ls -la src"), CTX)
    assert result.decision is Decision.ALLOW
    assert result.reason == "allowed: no policy was violated"
    assert result.results == tuple(
        PolicyResult(
            f"rule-{i}", "field_matches", Severity.CRITICAL, False, None, False, f"no rule-{i}"
        )
        for i in range(40)
    )
    assert result.to_dict()["evaluated"] == 40
    assert result.violations == ()


def test_a_pattern_among_many_on_one_field_is_reported_by_its_own_rule() -> None:
    engine = PolicyEngine(POLICIES)
    behavior = step(command="sudo mkfs /dev/sda", args=["--force"])
    result = engine.evaluate(behavior, CTX)
    assert result.results == one_by_one(POLICIES, behavior)
    assert [r.name for r in result.violations] == ["p1", "p3", "args", "strict"]
    assert result.decision is Decision.BLOCK
    assert "forbidden pattern '\\bmkfs'" in (result.results[1].details or "")


def test_a_missing_field_is_judged_by_each_policy_s_missing_rule() -> None:
    policies = [
        forbid("a", "x", if_missing="violate"),
        forbid("b", "y"),
        forbid("c", "z", if_missing="violate"),
    ]
    behavior = step(other="x y z")
    result = PolicyEngine(policies).evaluate(behavior, CTX)
    assert [r.name for r in result.violations] == ["a", "c"]
    assert result.violations[0].details == "input.command is missing"
    assert result.results == one_by_one(policies, behavior)


commands = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.sampled_from(
            ["sudo", "rm", "-rf", "/", "mkfs", "curl x", "|", "sh", "SECRET", "Token", "DROP TABLE"]
        ),
        max_size=6,
    ).map(" ".join),
)
inputs = st.fixed_dictionaries(
    {},
    optional={
        "command": st.one_of(commands, st.lists(commands, max_size=3), st.integers(-1000, 1000)),
        "cwd": st.sampled_from(["/etc/x", "/home", ""]),
        "args": st.lists(st.sampled_from(["--force", "--no-verify", "-q", "x"]), max_size=3),
        "table": st.sampled_from(["users", "orders"]),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs)
def test_evaluate_gives_what_each_policy_gives_alone(payload: dict[str, Any]) -> None:
    behavior = step(**payload)
    engine = PolicyEngine(POLICIES)
    result = engine.evaluate(behavior, CTX)
    assert result.results == one_by_one(POLICIES, behavior)


# Policies with selectors on kind, verb and step name, so which policies apply depends on all
# three; one violates on every step it selects.
SELECTED: list[dict[str, Any]] = [
    *POLICIES,
    {
        "name": "no-writes",
        "rule_type": "field_in",
        "severity": "high",
        "match": {"verbs": ["POST", "DELETE"]},
        "params": {"field": "verb", "values": ["GET"]},
    },
    {
        "name": "pay-limit",
        "rule_type": "field_compare",
        "severity": "critical",
        "match": {"step_names": ["pay_*"]},
        "params": {"field": "input.amount", "op": "<=", "value": 100},
    },
    {
        "name": "model-only",
        "rule_type": "field_not_in",
        "severity": "low",
        "match": {"kinds": ["step.model"]},
        "params": {"field": "input.table", "values": ["orders"]},
    },
]

steps = st.builds(
    lambda kind, verb, name, amount, table: Behavior(
        agent_id="agent",
        task_id="t1",
        kind=kind,
        verb=verb if kind == "step.resource" else None,
        step_name=name,
        input={"amount": amount, "table": table, "command": "ls"},
    ),
    st.sampled_from(["step.exec", "step.model", "step.resource"]),
    st.sampled_from(["GET", "POST", "DELETE"]),
    st.sampled_from(["Bash", "Read", "pay_card", "pay_", "Write"]),
    st.integers(0, 200),
    st.sampled_from(["users", "orders", "x"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=8))
def test_one_engine_judging_many_steps_gives_what_a_fresh_engine_gives_each(
    behaviors: list[Behavior],
) -> None:
    # The engine remembers which policies a step's kind, verb and name select; a step judged
    # after others must get exactly the verdict a fresh engine gives it.
    engine = PolicyEngine(SELECTED)
    for behavior in behaviors:
        fresh = PolicyEngine(SELECTED).evaluate(behavior, CTX)
        assert engine.evaluate(behavior, CTX) == fresh
        assert fresh.results == one_by_one(SELECTED, behavior)


def test_verdicts_stay_right_past_the_remembered_choices() -> None:
    # Agent-chosen step names cannot grow the engine's memory without bound: past its limit
    # it forgets the choices it remembered, and the next steps are judged as before.
    engine = PolicyEngine(SELECTED)

    def pay(name: str, amount: int) -> Behavior:
        return Behavior(
            agent_id="agent",
            task_id="t1",
            kind="step.exec",
            step_name=name,
            input={"amount": amount},
        )

    for i in range(5000):
        engine.evaluate(pay(f"tool-{i}", 500), CTX)
    blocked = engine.evaluate(pay("pay_card", 500), CTX)
    assert [r.name for r in blocked.violations] == ["tools", "pay-limit"]
    assert blocked.decision is Decision.BLOCK
    assert engine.evaluate(pay("tool-1", 500), CTX) == PolicyEngine(SELECTED).evaluate(
        pay("tool-1", 500), CTX
    )


# -- the field paths a prepared policy holds ------------------------------------------------


def _field_paths_reference(prepared: Any) -> tuple[Any, ...]:
    """The definition `_field_paths` is held to: every value is put through the whole chain
    of tests."""
    import dataclasses
    import types

    from charter._model.paths import FieldPath

    found: list[Any] = []
    stack: list[tuple[Any, int]] = [(prepared, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, FieldPath):
            found.append(value)
        elif (
            depth > 8
            or value is None
            or isinstance(value, str | bytes | int | float | type | types.ModuleType)
            or callable(value)
        ):
            continue
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend((v, depth + 1) for v in value)
        elif dataclasses.is_dataclass(value):
            stack.extend(
                (getattr(value, f.name, None), depth + 1) for f in dataclasses.fields(value)
            )
        else:
            for klass in type(value).__mro__:
                for name in getattr(klass, "__slots__", ()):
                    stack.append((getattr(value, name, None), depth + 1))
            stack.extend((v, depth + 1) for v in getattr(value, "__dict__", {}).values())
    return tuple(found)


class _Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class _Plain:
    def __init__(self, a: Any) -> None:
        self.a = a


def _prepared_values() -> st.SearchStrategy[Any]:
    from collections import OrderedDict

    from charter._model.paths import parse_path

    paths = st.sampled_from(["input.command", "properties.target.path", "step_name"]).map(
        parse_path
    )
    leaves = st.one_of(
        paths,
        st.none(),
        st.booleans(),
        st.integers(),
        st.text(max_size=3),
        st.just(b"x"),
        st.just(len),
        st.just(Severity.HIGH),
        st.just(str),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.frozensets(paths | st.integers(), max_size=3),
            st.dictionaries(st.text(max_size=2), inner, max_size=4),
            st.dictionaries(st.text(max_size=2), inner, max_size=2).map(OrderedDict),
            st.builds(_Slotted, inner, inner),
            st.builds(_Plain, inner),
        ),
        max_leaves=40,
    )


@settings(max_examples=400, deadline=None)
@given(prepared=_prepared_values())
def test_the_field_paths_walk_finds_what_the_definition_finds(prepared: Any) -> None:
    from charter._engine.engine import _field_paths

    assert _field_paths(prepared) == _field_paths_reference(prepared)


def test_the_field_paths_of_every_built_in_example_are_found_as_defined() -> None:
    from charter._engine.engine import _field_paths
    from charter._policy.policy import compile_policies
    from charter._policy.registry import registered_rules

    for spec in registered_rules():
        if spec.example_params is None or "step_execution" not in spec.enforcement_points:
            continue
        policy = {"name": "p", "rule_type": spec.name, "severity": "low"}
        compiled, problems = compile_policies([{**policy, "params": spec.example_params}])
        assert not problems, problems
        prepared = compiled[0].prepared
        assert _field_paths(prepared) == _field_paths_reference(prepared), spec.name


def test_the_field_paths_walk_stops_at_the_same_depth() -> None:
    from charter._engine.engine import _field_paths
    from charter._model.paths import parse_path

    for depth in range(6, 13):
        for wrap in (list, tuple, lambda v: {"k": v}, lambda v: _Slotted(v, None)):
            value: Any = [parse_path("input.command")]
            for _ in range(depth):
                value = wrap(value)
            assert _field_paths(value) == _field_paths_reference(value), (depth, wrap)


# Policies whose verdict the step's kind, verb, name and agent fix (judged once per choice and
# remembered), beside ones that read more: the context's declared tools, the task, the input.
IDENTITY: list[dict[str, Any]] = [
    {"name": "no-deletes", "rule_type": "deny", "severity": "high", "match": {"verbs": ["DELETE"]}},
    {
        "name": "reads-or-shell",
        "rule_type": "any_of",
        "severity": "medium",
        "params": {
            "conditions": [
                {"rule_type": "field_in", "params": {"field": "verb", "values": ["GET"]}},
                {
                    "rule_type": "field_matches",
                    "params": {"field": "step_name", "pattern": "^(Bash|Read)$", "mode": "require"},
                },
            ]
        },
    },
    {
        "name": "not-model",
        "rule_type": "not",
        "severity": "low",
        "params": {
            "condition": {
                "rule_type": "field_in",
                "params": {"field": "kind", "values": ["step.model"]},
            }
        },
    },
    {
        "name": "this-agent",
        "rule_type": "all_of",
        "severity": "critical",
        "params": {
            "conditions": [
                {"rule_type": "field_in", "params": {"field": "agent_id", "values": ["agent"]}},
                {
                    "rule_type": "field_not_in",
                    "params": {"field": "step_name", "values": ["Write"]},
                },
            ]
        },
    },
    {"name": "listed", "rule_type": "allow_only", "severity": "high", "params": {"tools": ["B*"]}},
    {"name": "declared", "rule_type": "allow_only", "severity": "high", "params": {}},
    {
        "name": "first-task",
        "rule_type": "field_in",
        "severity": "high",
        "params": {"field": "task_id", "values": ["t1"]},
    },
    {
        "name": "mixed",
        "rule_type": "any_of",
        "severity": "critical",
        "params": {
            "conditions": [
                {"rule_type": "field_in", "params": {"field": "step_name", "values": ["Read"]}},
                {
                    "rule_type": "field_compare",
                    "params": {"field": "input.amount", "op": "<=", "value": 100},
                },
            ]
        },
    },
]

BY_NAME = {p["name"]: p for p in IDENTITY}
CONTEXTS = {
    (task, tools): EvalContext(agent_id="agent", task_id=task, declared_tools=tools)
    for task in ("t1", "t2")
    for tools in (None, ("Bash",), ("Read", "Write"))
}

judged_steps = st.tuples(
    st.builds(
        lambda kind, verb, name, amount, task: Behavior(
            agent_id="agent",
            task_id=task,
            kind=kind,
            verb=verb if kind == "step.resource" else None,
            step_name=name,
            input={"amount": amount},
        ),
        st.sampled_from(["step.exec", "step.model", "step.resource"]),
        st.sampled_from(["GET", "POST", "DELETE"]),
        st.sampled_from(["Bash", "Read", "Write"]),
        st.integers(0, 200),
        st.sampled_from(["t1", "t2"]),
    ),
    st.sampled_from([None, ("Bash",), ("Read", "Write")]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(judged_steps, min_size=1, max_size=10))
def test_verdicts_fixed_by_a_step_s_identity_are_what_a_fresh_engine_gives(
    judged: list[tuple[Behavior, tuple[str, ...] | None]],
) -> None:
    # A remembered verdict is reused only for a policy that reads nothing but the step's kind,
    # verb, name and agent; one reading the declared tools, the task or the input is judged
    # again on every step.
    engine = PolicyEngine(IDENTITY)
    for behavior, tools in judged:
        ctx = CONTEXTS[(behavior.task_id, tools)]
        fresh = PolicyEngine(IDENTITY).evaluate(behavior, ctx)
        assert engine.evaluate(behavior, ctx) == fresh
        for result in fresh.results:
            alone = PolicyEngine([BY_NAME[result.name]]).evaluate(behavior, ctx).results
            assert alone == (result,)


def test_the_deadline_is_asked_only_while_a_rule_may_still_run() -> None:
    engine = PolicyEngine(IDENTITY[:5] + IDENTITY[6:])
    asked: list[int] = []

    def out_of_time() -> bool:
        asked.append(1)
        return False

    behavior = step(amount=5)
    result = engine.evaluate(behavior, CTX, out_of_time=out_of_time)
    assert result == PolicyEngine(IDENTITY[:5] + IDENTITY[6:]).evaluate(behavior, CTX)
    # Two policies run a rule per step (first-task, mixed): asked after the first only.
    assert len(asked) == 1
    with pytest.raises(EvaluationDeadline) as late:
        engine.evaluate(behavior, CTX, out_of_time=lambda: True)
    assert (late.value.judged, late.value.total) == (6, 7)


lost_values = st.recursive(
    st.one_of(
        st.sampled_from(["ls", "…[max depth]", "…[uncapturable ValueError]", "x…[max depth]"]),
        st.integers(0, 3),
        st.none(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "value"]), inner, max_size=3),
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "value"]), lost_values, max_size=3),
    st.lists(st.sampled_from(["a", "b", "value"]), min_size=1, max_size=3),
)
def test_a_lost_value_on_a_plain_path_is_found_as_the_general_walk_finds_it(
    payload: dict[str, Any], keys: list[str]
) -> None:
    from charter._engine.engine import _lost_along
    from charter._model.paths import parse_path

    behavior = step(**payload)
    simple = parse_path("input." + ".".join(keys))
    general = parse_path("input." + ".".join(keys))
    general._simple = False  # the walk every path shape takes
    assert _lost_along(simple, behavior) == _lost_along(general, behavior)
