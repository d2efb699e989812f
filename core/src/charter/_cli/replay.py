"""`charter replay`: re-judge recorded tasks under another policy set.

Each chain (one task of one agent) is replayed with a fresh PolicyEngine: its records are fed
back in seq order, every step that was judged when it ran (it carries ``meta["charter.eval"]``)
is judged again just before its record enters the history, and the two decisions are compared.
The history is the one that really happened: a step the new policies would block still ran
then, and a step they would allow was still blocked, so later verdicts are judged against the
real past, not a simulated one. Rules never read the clock (time rules use each step's own
timestamp), so a replay under the same policies reproduces the recorded decisions.

What was recorded is what is judged: secrets were masked before storage, and payloads stored
in the metadata_only or sha256 payload modes keep no values for field rules to read.

Limits that count outside the task (``scope: agent`` or ``scope: {per: ...}``) were judged on
counts read from the store's shared counters, which the task's own records cannot rebuild:
each such step carries them in ``meta["charter.shared"]``, the replay judges it with those
same counts and every Change names them (`Change.outside`). A policy that counts outside the
task but whose count was not recorded with the step (a new policy) cannot be judged and says
so, as it would live.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from charter._audit.base import AuditStore
    from charter._audit.report import TaskSummary
    from charter._model.behavior import Behavior
    from charter._policy.policy import Policy

__all__ = ["Change", "ReplayOptions", "old_decision", "replay_chain", "run_replay"]

_PROGRESS_MIN_RECORDS = 2_000


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What to replay and how to report it (see `charter replay --help`)."""

    policies: Sequence[Policy]
    label: str
    task_ids: Sequence[str] = ()
    agent: str | None = None
    environment: str | None = None
    project_root: str | None = None
    trusted_values: Sequence[str] = ()
    show_all: bool = False
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    """One re-judged step: `old` is the recorded policy decision, `new` the replayed one."""

    agent_id: str
    task_id: str
    seq: int
    kind: str
    step_name: str
    old: str
    old_reason: str
    new: str
    new_reason: str
    answered: str | None = None
    outside: tuple[dict[str, Any], ...] = ()

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "seq": self.seq,
            "kind": self.kind,
            "step_name": self.step_name,
            "old": self.old,
            "old_reason": self.old_reason,
            "new": self.new,
            "new_reason": self.new_reason,
            "answered": self.answered,
            "outside": [dict(o) for o in self.outside],
        }

    def outside_text(self) -> str:
        """The counts from outside the task, in words ("" when there were none)."""
        return "; ".join(
            f"{', '.join(o['policies'])}: {o['count']} across the {o['scope']}"
            for o in self.outside
        )


def old_decision(record: dict[str, Any], gates: dict[str, str]) -> tuple[str, str, str | None]:
    """(policy decision, reason, how a person answered) recorded with `record`.

    A step a person refused was recorded as blocked, but the policies asked: a replay judges
    it with the refusal (a step.gate) already in the history, so `ask` is what compares.
    """
    verdict = record["meta"]["charter.eval"]
    decision = str(verdict.get("decision", ""))
    reason = str(verdict.get("reason", ""))
    answer = gates.get(str(record.get("action_id")))
    if answer == "deny" and decision == "block":
        return "ask", reason, "denied"
    if answer == "pass" or verdict.get("approved"):
        return decision, reason, "approved"
    return decision, reason, None


def _outside(meta: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """What ``meta["charter.shared"]`` says was counted outside the task, per counter."""
    found = meta.get("charter.shared")
    counts = found.get("counts") if isinstance(found, dict) else None
    out: list[dict[str, Any]] = []
    for c in counts if isinstance(counts, list) else ():
        if isinstance(c, dict) and isinstance(c.get("key"), str):
            names = c.get("policies")
            out.append(
                {
                    "policies": [str(n) for n in names] if isinstance(names, list) else [],
                    "scope": str(c.get("scope", "")),
                    "count": c.get("before"),
                }
            )
    return tuple(out)


def _intent(b: Behavior) -> Behavior:
    """The step as it was judged: no output, no seq, no marker Charter added afterwards."""
    meta = {k: v for k, v in b.meta.items() if not k.startswith("charter.")}
    return b.replace(output=None, seq=None, meta=meta)


def replay_chain(
    records: list[dict[str, Any]], options: ReplayOptions
) -> tuple[list[Change], str | None]:
    """Replay one chain; returns (one Change per judged step, why it stopped early or None)."""
    from charter._engine.engine import PolicyEngine
    from charter._model.behavior import Behavior
    from charter._model.context import EvalContext
    from charter._runtime.shared import shared_counts

    engine = PolicyEngine(options.policies)
    changes: list[Change] = []
    gates: dict[str, str] = {}
    context: EvalContext | None = None
    from charter._audit.base import is_intent_record

    # A write-ahead intent is judged once, with its outcome; alone (the step's outcome never
    # came) it is the only record of the step.
    settled = {r.get("action_id") for r in records if not is_intent_record(r)}
    for record in records:
        seq = record.get("seq")
        if is_intent_record(record) and record.get("action_id") in settled:
            continue
        try:
            b = Behavior.from_dict(record)
            if context is None:
                context = EvalContext(
                    agent_id=b.agent_id,
                    task_id=b.task_id,
                    environment=options.environment,
                    project_root=options.project_root,
                    trusted_values=tuple(options.trusted_values),
                )
            verdict = b.meta.get("charter.eval")
            if isinstance(verdict, dict) and b.kind.value.startswith("step."):
                old, old_reason, answered = old_decision(record, gates)
                result = engine.evaluate(_intent(b), context, shared=shared_counts(b.meta))
                changes.append(
                    Change(
                        b.agent_id,
                        b.task_id,
                        int(seq) if isinstance(seq, int) else 0,
                        b.kind.value + (f" {b.verb.value}" if b.verb else ""),
                        b.step_name,
                        old,
                        old_reason,
                        result.decision.value,
                        result.reason,
                        answered,
                        _outside(b.meta),
                    )
                )
            if b.kind.value == "step.gate":
                gate = b.properties.get("gate")
                output = b.output or {}
                if isinstance(gate, dict) and isinstance(gate.get("action_id"), str):
                    gates[gate["action_id"]] = str(output.get("decision", ""))
            engine.record(b)
        except Exception as exc:  # one unreadable chain must not stop the others
            return changes, f"stopped at seq {seq}: {type(exc).__name__}: {exc}"
    return changes, None


def _chains(store: AuditStore, options: ReplayOptions) -> list[TaskSummary]:
    summaries = store.list_tasks(options.agent)
    if not options.task_ids:
        return summaries
    wanted = set(options.task_ids)
    chosen = [
        s for s in summaries if s.task_id in wanted or any(s.task_id.startswith(w) for w in wanted)
    ]
    return chosen


def run_replay(store: AuditStore, options: ReplayOptions, out: Console, err: Console) -> int:
    """Replay the chosen chains of `store` and print the report; returns how many changed.

    Exits 2 (SystemExit) when --task names nothing in the store.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    chains = _chains(store, options)
    if options.task_ids and not chains:
        err.print(
            f"charter: no task {', '.join(options.task_ids)} in {store.location}", markup=False
        )
        raise SystemExit(2)
    total = sum(s.steps for s in chains)
    results: list[Change] = []
    problems: list[str] = []
    progress = Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records"),
        console=err,
        transient=True,
        disable=total < _PROGRESS_MIN_RECORDS or not err.is_terminal,
    )
    with progress:
        bar = progress.add_task("replay", total=total)
        for summary in chains:
            records = store.read_task(summary.task_id, summary.agent_id)
            changes, problem = replay_chain(records, options)
            results.extend(changes)
            if problem:
                problems.append(f"task {summary.task_id} (agent {summary.agent_id}): {problem}")
            progress.advance(bar, len(records))
    changed = [c for c in results if c.changed]
    if options.as_json:
        import click

        for c in results if options.show_all else changed:
            click.echo(json.dumps(c.to_dict(), sort_keys=True))
    else:
        _print_report(results, changed, chains, problems, options, store.location, out)
    for problem in problems:
        err.print(f"charter: could not replay {problem}", markup=False)
    return len(changed)


_RANK = {"allow": 0, "warn": 1, "ask": 2, "block": 3}


def _print_report(
    results: list[Change],
    changed: list[Change],
    chains: list[TaskSummary],
    problems: list[str],
    options: ReplayOptions,
    location: str,
    out: Console,
) -> None:
    from rich.table import Table
    from rich.text import Text

    from charter._cli._common import short_reason

    out.print(
        f"Replayed {len(chains)} task(s), {len(results)} judged step(s) from {location} "
        f"under {options.label}",
        markup=False,
    )
    rows = results if options.show_all else changed
    if rows and not out.is_terminal:
        from charter._cli._common import plain_table

        plain = [
            [
                c.task_id[:12],
                str(c.seq),
                f"{c.kind} {c.step_name}",
                c.old + (f" ({c.answered})" if c.answered else ""),
                c.new,
                short_reason(c.new_reason) if c.new != "allow" else "",
            ]
            for c in rows
        ]
        headers = ["task", "seq", "step", "was", "now", "why now"]
        out.print(
            plain_table(headers, plain, ("seq",)), markup=False, highlight=False, soft_wrap=True
        )
    elif rows:
        table = Table()
        for column in ("task", "seq", "step", "was", "now", "why now"):
            table.add_column(column, no_wrap=column not in ("why now",))
        for c in rows:
            was = c.old + (f" ({c.answered})" if c.answered else "")
            colour = "red" if _RANK.get(c.new, 0) > _RANK.get(c.old, 0) else "green"
            table.add_row(
                Text(c.task_id[:12]),
                Text(str(c.seq)),
                Text(f"{c.kind} {c.step_name}"),
                Text(was),
                Text(c.new, style=colour if c.changed else ""),
                Text(short_reason(c.new_reason) if c.new != "allow" else ""),
            )
        out.print(table)
    outside = [c for c in results if c.outside]
    if outside:
        out.print(
            f"{len(outside)} judged step(s) were judged on counts from outside their task "
            "(shared limits, kept in the store and recorded with each step):",
            markup=False,
        )
        for c in rows if rows else outside[:1]:
            if c.outside:
                out.print(
                    f"  task {c.task_id[:12]} seq {c.seq} {c.step_name}: {c.outside_text()}",
                    markup=False,
                    highlight=False,
                )
    stricter = sum(1 for c in changed if _RANK.get(c.new, 0) > _RANK.get(c.old, 0))
    looser = len(changed) - stricter
    if changed:
        out.print(f"{len(changed)} decision(s) would change: {stricter} stricter, {looser} looser")
    else:
        out.print("no decision would change")
    if problems:
        out.print(f"{len(problems)} task(s) could not be replayed to the end (see stderr)")
