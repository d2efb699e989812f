"""`charter test`: policy tests in YAML, a sequence of steps with the decision each must get.

A test file (``*_test.yaml``) names its policies, an optional evaluation context, and tests;
each test is one task, run from a fresh PolicyEngine. Every step is judged, compared with its
``expect``, and then recorded the way the Governor records it: an allowed or warned step runs
(its ``output`` is recorded as an ok outcome, or ``outcome: failed``), a blocked step is
recorded as blocked, and an asked step is answered by the step's ``approve`` (a step.gate is
recorded, the step is judged again and runs unless that blocks), else denied. Later steps are
judged against that history, so flow, provenance, approval, budget and loop rules can all be
tested. Timestamps are fixed (``start``, then ``wait`` seconds per step, default 1), so time
rules are deterministic. Tests judge what enforce mode decides; monitor mode changes nothing.

The format is documented in the README section "Testing policies: charter test".
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

    from charter._engine.engine import EvalResult, PolicyEngine
    from charter._model.behavior import Behavior
    from charter._model.context import EvalContext
    from charter._policy.policy import Policy

__all__ = [
    "TestFileError",
    "TestResults",
    "find_test_files",
    "junit_xml",
    "load_test_file",
    "run_test_files",
]

DECISIONS = ("allow", "warn", "ask", "block")
DEFAULT_START = "2025-01-06T09:00:00Z"  # a Monday morning: time rules see a working day
DEFAULT_AGENT = "charter-test"
_FILE_KEYS = {
    "policies",
    "baseline",
    "context",
    "templates",
    "start",
    "tests",
    "description",
    "grant",
}
_TEST_KEYS = {"name", "steps", "context", "start", "description", "grant"}
_STEP_KEYS = {
    "kind",
    "verb",
    "name",
    "tool",
    "user",
    "integration",
    "input",
    "properties",
    "output",
    "outcome",
    "outcome_properties",
    "expect",
    "approve",
    "at",
    "wait",
    "description",
}
_EXPECT_KEYS = {"decision", "violated", "violates", "reason"}
_CONTEXT_KEYS = {
    "agent_id",
    "environment",
    "risk_classification",
    "agent_name",
    "agent_purpose",
    "agent_owner",
    "declared_tools",
    "project_root",
    "trusted_values",
}
_OUTCOMES = ("ok", "failed", "abandoned")


class TestFileError(ValueError):
    """A test file cannot be used; `problems` lists every problem with its location."""

    __test__ = False  # not a pytest class, despite the name

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Expect:
    """`violated`: exactly these policies are violated; `violates`: at least these."""

    decision: str | None = None
    violated: tuple[str, ...] | None = None
    violates: tuple[str, ...] | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    label: str
    kind: str
    verb: str | None
    name: str
    input: dict[str, Any] | None
    properties: dict[str, Any]
    output: dict[str, Any] | None
    outcome: str
    outcome_properties: dict[str, Any]
    expect: Expect | None
    approve: bool | None
    at: datetime | None
    wait: float


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    steps: tuple[Step, ...]
    context: dict[str, Any]
    start: datetime
    grant: Any = None  # the task's capability grant (a charter.Grant), recorded at its start


@dataclass(frozen=True, slots=True)
class TestFile:
    __test__ = False

    path: Path
    policies: tuple[Policy, ...]
    cases: tuple[Case, ...]


@dataclass
class _Problems:
    items: list[str] = field(default_factory=list)

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")


# -- finding and loading ---------------------------------------------------------------------


def find_test_files(paths: Sequence[Path]) -> list[Path] | str:
    """Test files under `paths` (files as given, directories searched for *_test.yaml and
    *_test.yml), sorted; or a message saying why there is nothing to run."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(p for p in path.rglob("*_test.y*ml") if p.suffix in (".yaml", ".yml"))
        elif path.is_file():
            found.append(path)
        else:
            return f"{path} does not exist"
    if not found:
        return f"no test files (*_test.yaml) under {', '.join(str(p) for p in paths)}"
    return sorted(set(found))


def _timestamp(value: Any, where: str, problems: _Problems) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        problems.add(where, "must be an ISO 8601 time such as 2025-01-06T09:00:00Z")
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        problems.add(where, f"{value!r} is not an ISO 8601 time such as 2025-01-06T09:00:00Z")
        return None
    if ts.tzinfo is None:
        problems.add(where, f"{value!r} has no time zone; end it with Z or an offset")
        return None
    return ts.astimezone(UTC)


def _unknown(data: Mapping[str, Any], allowed: set[str], where: str, problems: _Problems) -> None:
    for key in sorted(set(data) - allowed):
        problems.add(
            f"{where}.{key}" if where else key, f"unknown key; use {', '.join(sorted(allowed))}"
        )


def _context(data: Any, where: str, problems: _Problems) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.add(where, "must be a mapping of context fields")
        return {}
    _unknown(data, _CONTEXT_KEYS, where, problems)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("declared_tools", "trusted_values"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                problems.add(f"{where}.{key}", "must be a list of strings")
                continue
            out[key] = tuple(value)
        elif key in _CONTEXT_KEYS:
            if not isinstance(value, str):
                problems.add(f"{where}.{key}", "must be a string")
                continue
            out[key] = value
    return out


def _expect(value: Any, where: str, problems: _Problems) -> Expect | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = {"decision": value}
    if not isinstance(value, dict):
        problems.add(where, "must be a decision (allow, warn, ask, block) or a mapping")
        return None
    _unknown(value, _EXPECT_KEYS, where, problems)
    decision = value.get("decision")
    if decision is not None and decision not in DECISIONS:
        problems.add(f"{where}.decision", f"{decision!r} is not one of {', '.join(DECISIONS)}")
    names: dict[str, tuple[str, ...] | None] = {}
    for key in ("violated", "violates"):
        found = value.get(key)
        if found is not None and (
            not isinstance(found, list) or not all(isinstance(v, str) for v in found)
        ):
            problems.add(f"{where}.{key}", "must be a list of policy names ([] for none)")
            found = None
        names[key] = tuple(found) if found is not None else None
    reason = value.get("reason")
    if reason is not None and not isinstance(reason, str):
        problems.add(f"{where}.reason", "must be text the reason contains")
        reason = None
    if decision is None and reason is None and not any(v is not None for v in names.values()):
        problems.add(where, "expects nothing; give decision, violated, violates or reason")
    return Expect(decision, names["violated"], names["violates"], reason)


def _object(value: Any, where: str, problems: _Problems) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.add(where, "must be a mapping")
        return None
    return value


def _step(raw: Any, index: int, where: str, integration: str, problems: _Problems) -> Step | None:
    if not isinstance(raw, dict):
        problems.add(where, "must be a mapping (kind/tool/user, input, expect, ...)")
        return None
    _unknown(raw, _STEP_KEYS, where, problems)
    forms = [k for k in ("kind", "tool", "user") if k in raw]
    if len(forms) != 1:
        problems.add(where, "give exactly one of kind (a behavior), tool (a tool call) or user")
        return None
    data = _object(raw.get("input"), f"{where}.input", problems)
    props = _object(raw.get("properties"), f"{where}.properties", problems) or {}
    output = _object(raw.get("output"), f"{where}.output", problems)
    after = _object(raw.get("outcome_properties"), f"{where}.outcome_properties", problems) or {}
    verb = raw.get("verb")
    if forms[0] != "kind":
        for key in ("verb", "name") if forms[0] == "tool" else ("verb",):
            if key in raw:
                problems.add(f"{where}.{key}", f"only a kind step takes {key}")
    if forms[0] == "user":
        text = raw["user"]
        if not isinstance(text, str):
            problems.add(f"{where}.user", "must be the text of the user's message")
            return None
        kind, verb, name = "step.message", "GET", str(raw.get("name", "user_prompt"))
        data = data if data is not None else {"text": text}
        output = output if output is not None else {"text": text}
        props = _merge({"message": {"role": "user"}}, props)
        label = f"user {text!r:.60}"
    elif forms[0] == "tool":
        name = raw["tool"]
        if not isinstance(name, str) or not name:
            problems.add(f"{where}.tool", "must be the tool's name")
            return None
        which = raw.get("integration", integration)
        data = data if data is not None else {}
        resolved = _resolve_tool(str(which), name, data, f"{where}.tool", problems)
        if resolved is None:
            return None
        kind, verb, template_props = resolved
        props = _merge(template_props, props)
        label = f"tool {name}"
    else:
        kind = raw["kind"]
        given = raw.get("name")
        if not isinstance(given, str) or not given:
            problems.add(f"{where}.name", "a behavior step needs the step's name")
            return None
        name = given
        label = f"{kind}{' ' + str(verb) if verb else ''} {name}"
    outcome = raw.get("outcome", "ok")
    if outcome not in _OUTCOMES:
        problems.add(f"{where}.outcome", f"{outcome!r} is not one of {', '.join(_OUTCOMES)}")
    approve = raw.get("approve")
    if approve is not None and not isinstance(approve, bool):
        problems.add(f"{where}.approve", "must be true or false")
        approve = None
    wait = raw.get("wait", 1)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
        problems.add(f"{where}.wait", "must be a number of seconds (0 or more)")
        wait = 1
    at = _timestamp(raw["at"], f"{where}.at", problems) if "at" in raw else None
    if not _valid_behavior(str(kind), verb, name, data, props, output, where, problems):
        return None
    return Step(
        index=index,
        label=label,
        kind=str(kind),
        verb=str(verb) if verb is not None else None,
        name=name,
        input=data,
        properties=props,
        output=output,
        outcome=str(outcome),
        outcome_properties=after,
        expect=_expect(raw.get("expect"), f"{where}.expect", problems),
        approve=approve,
        at=at,
        wait=float(wait),
    )


def _valid_behavior(
    kind: str,
    verb: Any,
    name: str,
    data: dict[str, Any] | None,
    props: dict[str, Any],
    output: dict[str, Any] | None,
    where: str,
    problems: _Problems,
) -> bool:
    from charter._model.behavior import Behavior

    try:
        # A string on purpose: Behavior checks it and says which kinds exist.
        Behavior(
            agent_id="check",
            task_id="check",
            kind=cast(Any, kind),
            verb=verb,
            step_name=name,
            input=data,
            output=output,
            properties=props,
        )
    except ValueError as exc:
        problems.add(where, str(exc))
        return False
    return True


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_tool(
    integration: str, name: str, args: dict[str, Any], where: str, problems: _Problems
) -> tuple[str, str | None, dict[str, Any]] | None:
    try:
        import charter_templates  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        problems.add(where, "tool steps need charter-templates: pip install charter-templates")
        return None
    kind, verb, properties, _ = charter_templates.resolve(integration, name, args)
    return str(kind), verb, dict(properties)


def load_test_file(path: Path, default_policies: Sequence[str] = ()) -> TestFile:
    """Read and check one test file; raises TestFileError listing every problem."""
    import yaml

    from charter._model.errors import PolicyLoadError
    from charter._policy.manifest import _loader, load_manifest_policies

    problems = _Problems()
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader())
    except (OSError, UnicodeDecodeError) as exc:
        raise TestFileError([f"cannot be read: {exc}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise TestFileError([f"invalid YAML{at}: {getattr(exc, 'problem', None) or exc}"]) from None
    if not isinstance(data, dict):
        raise TestFileError(["must be a mapping with policies (or baseline) and tests"])
    _unknown(data, _FILE_KEYS, "", problems)

    manifests: list[str] = []
    raw_policies = data.get("policies")
    if raw_policies is not None:
        items = [raw_policies] if isinstance(raw_policies, str) else raw_policies
        if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
            problems.add("policies", "must be a manifest path or a list of them")
        else:
            manifests.extend(str(path.parent / p) for p in items)
    baseline = data.get("baseline")
    if baseline is not None:
        try:
            import charter_baseline  # type: ignore[import-not-found, unused-ignore]

            manifests.append(str(charter_baseline.baseline_path(str(baseline))))
        except ImportError:
            problems.add("baseline", "needs charter-baseline: pip install charter-baseline")
        except ValueError as exc:
            problems.add("baseline", str(exc))
    if raw_policies is None and baseline is None:
        if default_policies:
            manifests.extend(default_policies)
        else:
            problems.add("policies", "name the manifests to test (or baseline:, or --policy)")
    policies: tuple[Policy, ...] = ()
    if manifests:
        try:
            policies = tuple(load_manifest_policies(manifests))
        except PolicyLoadError as exc:
            problems.items.extend(f"policies: {p}" for p in exc.problems)

    file_context = _context(data.get("context"), "context", problems)
    integration = data.get("templates", "generic")
    if not isinstance(integration, str):
        problems.add("templates", "must be an integration name, e.g. generic or claude_code")
        integration = "generic"
    file_start = _timestamp(data.get("start", DEFAULT_START), "start", problems)
    file_grant = _grant(data.get("grant"), "grant", problems)
    raw_tests = data.get("tests")
    cases: list[Case] = []
    if not isinstance(raw_tests, list) or not raw_tests:
        problems.add("tests", "must be a non-empty list of tests")
        raw_tests = []
    names: set[str] = set()
    for i, raw in enumerate(raw_tests):
        where = f"tests[{i}]"
        if not isinstance(raw, dict):
            problems.add(where, "must be a mapping with name and steps")
            continue
        _unknown(raw, _TEST_KEYS, where, problems)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            problems.add(f"{where}.name", "every test needs a name")
            name = where
        elif name in names:
            problems.add(f"{where}.name", f"{name!r} is used twice in this file")
        names.add(name)
        raw_steps = raw.get("steps")
        if not isinstance(raw_steps, list) or not raw_steps:
            problems.add(f"{where}.steps", "must be a non-empty list of steps")
            continue
        steps = [
            _step(s, j, f"{where}.steps[{j}]", integration, problems)
            for j, s in enumerate(raw_steps)
        ]
        start = (
            _timestamp(raw["start"], f"{where}.start", problems) if "start" in raw else file_start
        )
        context = {**file_context, **_context(raw.get("context"), f"{where}.context", problems)}
        grant = _grant(raw["grant"], f"{where}.grant", problems) if "grant" in raw else file_grant
        kept = tuple(s for s in steps if s is not None)
        cases.append(Case(name, kept, context, start or _default(), grant))
    if problems.items:
        raise TestFileError(problems.items)
    return TestFile(path, policies, tuple(cases))


def _grant(value: Any, where: str, problems: _Problems) -> Any:
    """The test's capability grant (None when not given); problems are listed, not raised."""
    if value is None:
        return None
    from charter._policy.capabilities import Grant, GrantError

    try:
        return Grant.from_document(value, where)
    except GrantError as exc:
        for problem in exc.problems:
            head, _, rest = problem.partition(": ")
            problems.add(head, rest or problem)
        return None


def _default() -> datetime:
    return datetime.fromisoformat(DEFAULT_START.replace("Z", "+00:00"))


# -- running ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepRun:
    """What happened to one step: the first decision, its violations, and what was recorded."""

    step: Step
    decision: str
    violated: tuple[str, ...]
    reason: str
    then: str
    mismatches: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True, slots=True)
class CaseRun:
    case: Case
    steps: tuple[StepRun, ...]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not any(s.mismatches for s in self.steps)


def _compare(expect: Expect | None, result: EvalResult) -> tuple[tuple[str, str, str], ...]:
    if expect is None:
        return ()
    found: list[tuple[str, str, str]] = []
    violated = sorted(r.name for r in result.violations)
    if expect.decision is not None and expect.decision != result.decision.value:
        found.append(("decision", expect.decision, result.decision.value))
    if expect.violated is not None and sorted(expect.violated) != violated:
        found.append(("violated", _list(sorted(expect.violated)), _list(violated)))
    if expect.violates is not None and not set(expect.violates) <= set(violated):
        found.append(("violates", _list(sorted(expect.violates)), _list(violated)))
    if expect.reason is not None and expect.reason not in result.reason:
        found.append(("reason", f"... {expect.reason} ...", result.reason))
    return tuple(found)


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(items) + "]"


class _Task:
    """One test's task in a fresh engine, recorded the way the Governor records steps."""

    def __init__(self, policies: Sequence[Policy], case: Case) -> None:
        from charter._engine.engine import PolicyEngine
        from charter._model.behavior import ActionKind, Behavior
        from charter._model.context import EvalContext

        ctx = dict(case.context)
        agent = ctx.pop("agent_id", DEFAULT_AGENT)
        task_id = "test-" + uuid.uuid4().hex[:12]
        from charter._policy.capabilities import GRANT_META, GrantLayer, layers_meta

        self.engine: PolicyEngine = PolicyEngine(policies)
        self.context: EvalContext = EvalContext(agent_id=agent, task_id=task_id, **ctx)
        self.clock = case.start
        meta = {}
        if case.grant is not None:
            meta[GRANT_META] = layers_meta([GrantLayer("test", case.grant)])
        self.engine.record(
            Behavior(
                agent_id=agent,
                task_id=task_id,
                kind=ActionKind.TASK_START,
                step_name="task",
                timestamp=self.clock,
                meta=meta,
            )
        )

    def _behavior(self, step: Step) -> Behavior:
        from charter._model.behavior import ActionKind, Behavior, Verb

        self.clock = step.at if step.at is not None else self.clock + timedelta(seconds=step.wait)
        return Behavior(
            agent_id=self.context.agent_id,
            task_id=self.context.task_id,
            kind=ActionKind(step.kind),
            verb=Verb(step.verb) if step.verb is not None else None,
            step_name=step.name,
            action_id=uuid.uuid4().hex,
            timestamp=self.clock,
            input=step.input,
            properties=step.properties,
        )

    def _gate(self, b: Behavior, approved: bool) -> None:
        from charter._runtime.approval import Approval, gate_record

        why = "approve: true" if approved else "approve: false (or not given)"
        self.engine.record(
            gate_record(b, Approval(approved, "charter-test", why), timestamp=b.timestamp)
        )

    def run(self, step: Step) -> StepRun:
        from charter._engine.engine import Decision

        b = self._behavior(step)
        first = self.engine.evaluate(b, self.context)
        if first.decision is Decision.ASK:
            self._gate(b, bool(step.approve))
            runs = bool(step.approve)
            then = "asked, denied"
            if runs:
                # One approval round, as the Governor does: only a block stops it now.
                runs = self.engine.evaluate(b, self.context).decision is not Decision.BLOCK
                then = "asked, approved, ran" if runs else "asked, approved, then blocked"
        else:
            runs = first.decision is not Decision.BLOCK
            then = f"ran ({step.outcome})" if runs else "blocked"
        if runs:
            self.engine.register_intent(b)
            done = b
            if step.outcome_properties:
                # What integrations learn only once a step ran (a model call's token usage).
                done = b.replace(properties=_merge(b.properties, step.outcome_properties))
            self.engine.record(done.completed(step.output or {}, outcome=step.outcome))
        else:
            self.engine.record(b.completed(None, outcome="blocked"))
        return StepRun(
            step,
            first.decision.value,
            tuple(sorted(r.name for r in first.violations)),
            first.reason,
            then,
            _compare(step.expect, first),
        )


def run_case(policies: Sequence[Policy], case: Case) -> CaseRun:
    """Run one test; an exception from the engine (a step it refuses) fails the test."""
    runs: list[StepRun] = []
    try:
        task = _Task(policies, case)
        for step in case.steps:
            runs.append(task.run(step))
    except Exception as exc:
        at = len(runs)
        return CaseRun(case, tuple(runs), f"step {at + 1}: {type(exc).__name__}: {exc}")
    return CaseRun(case, tuple(runs))


@dataclass(slots=True)
class TestResults:
    """What a run of test files found, for --json and --junit: per file, its load problems or
    its cases (each with the seconds it took)."""

    files: list[tuple[Path, list[str], list[tuple[CaseRun, float]]]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """{"passed", "failed", "errors", "files": [{"file", "problems", "tests": [...]}]}."""
        out_files = []
        passed = failed = 0
        for path, problems, cases in self.files:
            tests = []
            for run, seconds in cases:
                passed += run.passed
                failed += not run.passed
                tests.append(
                    {
                        "name": run.case.name,
                        "passed": run.passed,
                        "error": run.error,
                        "seconds": round(seconds, 6),
                        "steps": [
                            {
                                "step": s.step.index + 1,
                                "label": s.step.label,
                                "decision": s.decision,
                                "violated": list(s.violated),
                                "reason": s.reason,
                                "then": s.then,
                                "mismatches": [
                                    {"key": k, "want": w, "got": g} for k, w, g in s.mismatches
                                ],
                            }
                            for s in run.steps
                        ],
                    }
                )
            out_files.append({"file": str(path), "problems": problems, "tests": tests})
        errors = sum(1 for _, problems, _ in self.files if problems)
        return {"passed": passed, "failed": failed, "errors": errors, "files": out_files}


def _failure_text(run: CaseRun) -> str:
    lines = []
    for s in run.steps:
        for key, want, got in s.mismatches:
            lines.append(f"step {s.step.index + 1} ({s.step.label}): {key}: want {want}, got {got}")
    if run.error:
        lines.append(f"error: {run.error}")
    return "\n".join(lines)


def junit_xml(results: TestResults) -> bytes:
    """The results as JUnit XML: one testsuite per file, one testcase per test; a file that
    cannot be loaded is a testsuite with one errored testcase naming its problems."""
    import xml.etree.ElementTree as ET

    data = results.to_dict()
    root = ET.Element("testsuites", name="charter test")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for (path, problems, cases), info in zip(results.files, data["files"], strict=True):
        suite = ET.SubElement(root, "testsuite", name=str(path))
        counts = {"tests": 0, "failures": 0, "errors": 0}
        elapsed = 0.0
        if problems:
            case = ET.SubElement(suite, "testcase", classname=str(path), name="load", time="0")
            error = ET.SubElement(case, "error", message=f"{len(problems)} problem(s) in {path}")
            error.text = "\n".join(problems)
            counts["tests"] += 1
            counts["errors"] += 1
        for (run, seconds), test in zip(cases, info["tests"], strict=True):
            elapsed += seconds
            case = ET.SubElement(
                suite, "testcase", classname=str(path), name=test["name"], time=f"{seconds:.6f}"
            )
            counts["tests"] += 1
            if not run.passed:
                text = _failure_text(run)
                kind = (
                    "error" if run.error and not any(s.mismatches for s in run.steps) else "failure"
                )
                node = ET.SubElement(case, kind, message=text.splitlines()[0] if text else kind)
                node.text = text
                counts["errors" if kind == "error" else "failures"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{elapsed:.6f}")
    for key, value in totals.items():
        root.set(key, str(value))
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def run_test_files(
    files: Sequence[Path],
    default_policies: Sequence[str],
    pattern: str | None,
    verbose: bool,
    out: Console,
    on_case: Callable[[CaseRun], None] | None = None,
    results: TestResults | None = None,
) -> bool:
    """Run every test in `files` and print the report; returns True when everything passed.
    `results`, when given, receives every file's problems or cases."""
    import time

    from rich.markup import escape

    try:
        select = re.compile(pattern) if pattern else None
    except re.error as exc:
        out.print(f"--run {pattern!r}: not a regular expression ({exc})", markup=False)
        return False
    passed = failed = errors = 0
    for path in files:
        try:
            loaded = load_test_file(path, default_policies)
        except TestFileError as exc:
            errors += 1
            if results is not None:
                results.files.append((path, list(exc.problems), []))
            out.print(f"[red]ERROR[/red] {escape(str(path))}: {len(exc.problems)} problem(s)")
            for problem in exc.problems:
                out.print(f"  - {problem}", markup=False)
            continue
        ran: list[tuple[CaseRun, float]] = []
        if results is not None:
            results.files.append((path, [], ran))
        for case in loaded.cases:
            if select is not None and not select.search(case.name):
                continue
            started = time.perf_counter()
            result = run_case(loaded.policies, case)
            ran.append((result, time.perf_counter() - started))
            if on_case is not None:
                on_case(result)
            if result.passed:
                passed += 1
                out.print(f"[green]PASS[/green] {escape(f'{path}: {case.name}')}", highlight=False)
            else:
                failed += 1
                out.print(f"[red]FAIL[/red] {escape(f'{path}: {case.name}')}", highlight=False)
            if verbose or not result.passed:
                _print_steps(result, verbose, out)
    total = passed + failed
    line = f"PASS: {passed}/{total}"
    if failed:
        line += f", FAIL: {failed}/{total}"
    if errors:
        line += f", ERROR: {errors} file(s)"
    out.print("-" * 40)
    colour = "green" if not failed and not errors else "red"
    out.print(f"[{colour}]{line}[/{colour}]")
    return not failed and not errors and total > 0


def _print_steps(result: CaseRun, verbose: bool, out: Console) -> None:
    from rich.markup import escape

    for run in result.steps:
        if not verbose and not run.mismatches:
            continue
        mark = "[red]✗[/red]" if run.mismatches else "[green]✓[/green]"
        text = (
            f"step {run.step.index + 1} ({run.step.label}): {run.decision}"
            + (f" [{', '.join(run.violated)}]" if run.violated else "")
            + f", {run.then}"
        )
        out.print(f"  {mark} {escape(text)}", highlight=False)
        for key, want, got in run.mismatches:
            out.print(f"[red]      - {escape(f'{key}: {want}')}[/red]", highlight=False)
            out.print(f"[green]      + {escape(f'{key}: {got}')}[/green]", highlight=False)
        if run.mismatches and ("reason" not in {k for k, _, _ in run.mismatches}):
            from charter._cli._common import short_reason

            out.print(f"        reason: {short_reason(run.reason)}", markup=False)
    if result.error:
        out.print(f"  [red]error[/red] {escape(result.error)}", highlight=False)
