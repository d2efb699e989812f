"""Charter's value classes behave as the frozen dataclasses they replace, to the user and to
the `dataclasses` module, although none of them is created by it."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from charter import Behavior, EvalContext, EvalResult, Policy, Settings
from charter._audit.chain import ChainHead
from charter._engine.engine import Decision
from charter._policy.policy import Severity

_WHEN = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def _behavior(**changes: object) -> Behavior:
    values: dict[str, object] = {
        "agent_id": "a",
        "task_id": "t",
        "kind": "step.exec",
        "step_name": "shell",
        "timestamp": _WHEN,
        "input": {"command": "ls"},
    }
    values.update(changes)
    return Behavior(**values)  # type: ignore[arg-type]


def test_dataclasses_replace_builds_a_checked_copy() -> None:
    b = _behavior()
    changed = dataclasses.replace(b, step_name="other", seq=3)
    assert (changed.step_name, changed.seq, changed.input) == ("other", 3, {"command": "ls"})
    assert changed == b.replace(step_name="other", seq=3)
    assert b.step_name == "shell"
    with pytest.raises(ValueError, match="seq"):
        dataclasses.replace(b, seq=0)
    with pytest.raises(TypeError, match="no field 'colour'"):
        b.replace(colour="red")


def test_fields_follow_the_constructor_with_its_defaults() -> None:
    assert dataclasses.is_dataclass(Behavior) and dataclasses.is_dataclass(_behavior())
    names = [f.name for f in dataclasses.fields(EvalResult)]
    assert names == [
        "decision",
        "risk_score",
        "results",
        "action_id",
        "recorded_seq",
        "reason",
        "monitored",
        "failed_open",
    ]
    defaults = {f.name: f.default for f in dataclasses.fields(Settings)}
    assert defaults["audit_location"] == "sqlite:///.charter/audit.db"
    assert defaults["fail_mode"] == "closed"
    assert dataclasses.fields(Policy)[0].default is dataclasses.MISSING


def test_asdict_and_the_printed_form_list_fields_in_the_constructors_order() -> None:
    result = EvalResult(Decision.ALLOW, 0.0, (), reason="fine")
    assert list(dataclasses.asdict(result)) == [f.name for f in dataclasses.fields(result)]
    assert repr(ChainHead(3, "ab")) == "ChainHead(seq=3, hash='ab')"
    assert repr(result).startswith("EvalResult(decision=")


def test_values_are_frozen_compare_by_fields_and_survive_copy_and_pickle() -> None:
    head = ChainHead(3, "ab")
    with pytest.raises(dataclasses.FrozenInstanceError):
        head.seq = 4  # type: ignore[misc]
    with pytest.raises(AttributeError):  # FrozenInstanceError is an AttributeError
        del head.hash  # type: ignore[misc]
    assert head == ChainHead(3, "ab") and head != ChainHead(3, "ac")
    assert hash(head) == hash(ChainHead(3, "ab"))
    assert head != (3, "ab")
    policy = Policy("p", "max_steps", Severity.HIGH, {"max": 3}, agents=("a",))
    for clone in (copy.copy(policy), copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        assert clone == policy and clone is not policy
    context = EvalContext(agent_id="a", task_id="t", trusted_values=["x"])  # type: ignore[arg-type]
    assert context.trusted_values == ("x",)


def test_where_a_setting_came_from_is_not_part_of_the_settings() -> None:
    from_keyword = Settings.from_sources(env={}, policies=[])
    direct = Settings(policies=())
    assert from_keyword.origin("policies") == "keyword" and direct.origin("policies") == "default"
    assert from_keyword == direct
    assert "origins" not in repr(direct)
    assert from_keyword.replace(fail_mode="open").origin("fail_mode") == "keyword"


def test_none_of_them_imports_dataclasses_until_asked() -> None:
    code = (
        "import sys, charter\n"
        "from charter._engine.engine import EvalResult, Decision\n"
        "r = EvalResult(Decision.ALLOW, 0.0, ())\n"
        "before = 'dataclasses' in sys.modules\n"
        "r.replace(reason='x'); repr(r); r == r\n"
        "middle = 'dataclasses' in sys.modules\n"
        "import dataclasses; dataclasses.replace(r, reason='y')\n"
        "print(before, middle)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_classes_filled_through_their_slot_setters_stay_frozen_values() -> None:
    # Step, Allowed and EvalResult fill their slots through the slots' own setters (built on
    # every gated step); they refuse assignment, compare, copy and pickle like the others.
    from charter.integration import Allowed, Step

    step = Step("step.resource", "GET", "get_weather", {"city": "Oslo"})
    result = EvalResult(Decision.ALLOW, 0.0, (), reason="fine")
    allowed = Allowed(None, "fine", result)
    for value, field in ((step, "kind"), (result, "decision"), (allowed, "reason")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
        assert copy.copy(value) == value == pickle.loads(pickle.dumps(value))
    assert step.properties == {} and step.input == {"city": "Oslo"}
    assert result.replace(reason="other").reason == "other" and result.reason == "fine"


def test_slot_setters_refuse_a_name_that_is_not_a_slot_of_the_class() -> None:
    from charter._model.frozen import slot_setters
    from charter.integration import Step

    with pytest.raises(KeyError, match="colour"):
        slot_setters(Step, "kind", "colour")
