"""`charter report`: an audit trail as one self-contained HTML file a person can look at.

The page has no network access and needs none: its CSS and JavaScript are inline, and the
trail is embedded as JSON. `collect_report` reads a store into plain JSON-able data (the
overview figures computed here, once, so the page stays fast on large stores); `render_report`
turns that data into the page.

Records are agent-controlled text, so nothing from a record ever becomes markup: the JSON is
embedded in ``<script type="application/json">`` blocks with ``<``, ``>`` and ``&`` escaped
(no record can close the block), and the page's script inserts record text only as text nodes.
Each task's records sit in a block of their own, parsed only when the task is opened, and
long lists are paginated, so a store of 100,000 records opens quickly.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from charter._audit.base import is_intent_record

if TYPE_CHECKING:
    from charter._audit.base import AuditStore
    from charter._audit.report import TaskSummary

__all__ = ["ReportFilter", "collect_report", "parse_since", "render_report", "step_tree"]

DECISIONS = ("allow", "warn", "ask", "block")
_GIST = 160
_BINS = 48
_RELATIVE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


@dataclass(frozen=True, slots=True)
class ReportFilter:
    """Which tasks a report holds: one agent's, one task (id or unique prefix), and tasks with
    a record at or after `since` (an aware UTC datetime)."""

    agent: str | None = None
    task: str | None = None
    since: datetime | None = None


def parse_since(value: str, now: datetime) -> datetime:
    """`value` as an aware UTC datetime: an ISO 8601 date or time (UTC when it names no zone)
    or a duration before `now` such as ``30m``, ``24h``, ``7d``, ``2w``.

    Raises ValueError with a message naming the accepted forms.
    """
    relative = _RELATIVE.match(value)
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        return now - timedelta(**{_UNITS[unit]: amount})
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"--since {value!r} is neither an ISO date/time (2025-01-31, 2025-01-31T09:00Z) "
            "nor a duration (30m, 24h, 7d, 2w)"
        ) from None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def _stamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp


def _short(value: Any, limit: int = _GIST) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _eval(record: Mapping[str, Any]) -> dict[str, Any]:
    verdict = (record.get("meta") or {}).get("charter.eval")
    return verdict if isinstance(verdict, dict) else {}


def _violated(verdict: Mapping[str, Any]) -> list[str]:
    names = []
    for v in verdict.get("violations") or ():
        if isinstance(v, dict) and v.get("violated", True) and isinstance(v.get("name"), str):
            names.append(v["name"])
    return names


def _outcome(record: Mapping[str, Any]) -> str:
    outcome = (record.get("meta") or {}).get("charter.outcome")
    if isinstance(outcome, str) and outcome:
        return outcome
    kind = str(record.get("kind", ""))
    if kind == "task.error":
        return "failed"
    return "ok" if kind.startswith("step.") else ""


def _error(record: Mapping[str, Any]) -> str:
    """The error text of a failed step or task, as recorded (``output.error``)."""
    out = record.get("output")
    if not isinstance(out, dict):
        return ""
    err = out.get("error")
    if isinstance(err, dict):
        kind = err.get("type")
        message = err.get("message")
        return f"{kind}: {message}" if kind and message else str(message or kind or "")
    return str(err) if err else ""


def _framework(record: Mapping[str, Any]) -> dict[str, Any]:
    fw = (record.get("properties") or {}).get("framework")
    return fw if isinstance(fw, dict) else {}


def _run_labels(records: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """(run id -> parent run id, run id -> label) over the framework ids of one task."""
    parents: dict[str, str] = {}
    labels: dict[str, str] = {}
    for r in records:
        fw = _framework(r)
        run, parent = fw.get("run_id"), fw.get("parent_run_id")
        if isinstance(run, str) and run:
            labels.setdefault(run, str(r.get("step_name") or run[:8]))
            if isinstance(parent, str) and parent and parent != run:
                parents.setdefault(run, parent)
    return parents, labels


def _path(
    record: Mapping[str, Any], parents: dict[str, str], labels: dict[str, str]
) -> list[list[str]]:
    """Where a record sits inside its task: [kind, label] groups, outermost first."""
    fw = _framework(record)
    path: list[list[str]] = []
    parent = fw.get("parent_run_id")
    chain: list[str] = []
    seen: set[str] = set()
    while isinstance(parent, str) and parent and parent not in seen:
        seen.add(parent)
        chain.append(parent)
        parent = parents.get(parent)
    path.extend(["run", labels.get(run, run[:12])] for run in reversed(chain))
    if isinstance(fw.get("crew"), str) and fw["crew"]:
        path.append(["crew", fw["crew"]])
    if isinstance(fw.get("task"), str) and fw["task"]:
        path.append(["crew task", fw["task"]])
    if isinstance(fw.get("node"), str) and fw["node"]:
        path.append(["node", fw["node"]])
    sub = fw.get("agent_type") or fw.get("agent_id")
    if isinstance(sub, str) and sub and fw.get("agent_id"):
        path.append(["sub-agent", sub])
    return path


def step_tree(records: list[dict[str, Any]]) -> list[Any]:
    """The nested timeline of one task's records, in record order.

    Returns a list of items: an int is the index of a record; a dict ``{"kind", "label",
    "items"}`` is a group (a framework run, a graph node, a crew and its tasks, a sub-agent)
    holding consecutive records that share it. Records keep their order: a group that is
    left and entered again appears twice.
    """
    parents, labels = _run_labels(records)
    root: list[Any] = []
    stack: list[tuple[list[str], list[Any]]] = []
    for index, record in enumerate(records):
        path = _path(record, parents, labels)
        keep = 0
        while keep < len(stack) and keep < len(path) and stack[keep][0] == path[keep]:
            keep += 1
        del stack[keep:]
        for group in path[keep:]:
            items: list[Any] = []
            holder = stack[-1][1] if stack else root
            holder.append({"kind": group[0], "label": group[1], "items": items})
            stack.append((group, items))
        (stack[-1][1] if stack else root).append(index)
    return root


def _gaps(
    agent: str, task: str, records: Iterable[Mapping[str, Any]], declared: Mapping[Any, Any]
) -> list[dict[str, Any]]:
    """Missing seq ranges of one chain (records that should be there and are not), each with
    the cause its declaration gives (`declared`: verify's gaps by (agent, task, first seq));
    a hole nobody declared has cause "undeclared" (verify reports it as a break)."""
    seqs = sorted({r["seq"] for r in records if isinstance(r.get("seq"), int)})
    gaps = []
    expected = 1
    for seq in seqs:
        if seq > expected:
            known = declared.get((agent, task, expected))
            gaps.append(
                {
                    "agent": agent,
                    "task": task,
                    "first": expected,
                    "last": seq - 1,
                    "cause": known.cause if known is not None else "undeclared",
                    "detail": known.detail if known is not None else "",
                }
            )
        expected = max(expected, seq + 1)
    return gaps


def _select(summaries: list[TaskSummary], wanted: ReportFilter) -> list[TaskSummary]:
    chosen = summaries
    if wanted.task:
        exact = [s for s in chosen if s.task_id == wanted.task]
        chosen = exact or [s for s in chosen if s.task_id.startswith(wanted.task)]
        if not chosen:
            raise LookupError(f"no task {wanted.task!r} in the store; `charter tasks` lists them")
    if wanted.since is not None:
        since = wanted.since
        chosen = [
            s
            for s in chosen
            if (stamp := _stamp(s.last_timestamp) or _stamp(s.first_timestamp)) is None
            or stamp >= since
        ]
    return chosen


def collect_report(store: AuditStore, wanted: ReportFilter, generated: datetime) -> dict[str, Any]:
    """Everything the page shows, as JSON-able data: ``summary`` (overview, task list, step
    index) and ``tasks`` (each task's records, without their hash fields, and its tree).

    Raises LookupError when `wanted.task` names no stored task; StoreError from the store.
    """
    summaries = _select(store.list_tasks(wanted.agent), wanted)
    one = {s.task_id for s in summaries}
    report = store.verify(one.pop() if wanted.task and len(one) == 1 else None)
    declared = {(g.agent_id, g.task_id, g.first): g for g in report.gaps}
    broken: dict[tuple[str, str], str] = {}
    for b in report.breaks:
        broken.setdefault((b.agent_id, b.task_id), f"seq {b.seq}: {b.reason}: {b.detail}")

    tasks_out: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    approvals: list[dict[str, Any]] = []
    gaps: list[dict[str, Any]] = []
    policies: Counter[str] = Counter()
    policy_decisions: dict[str, Counter[str]] = defaultdict(Counter)
    per_agent: dict[str, Counter[str]] = defaultdict(Counter)
    stamps: list[tuple[datetime, str]] = []
    kinds: set[str] = set()

    for t_index, summary in enumerate(summaries):
        stored = store.read_task(summary.task_id, summary.agent_id)
        # A write-ahead intent (sync durability) is shown only while its outcome is missing;
        # its seq still counts, so it is never taken for a gap.
        settled = {r.get("action_id") for r in stored if not is_intent_record(r)}
        records = [r for r in stored if not (is_intent_record(r) and r.get("action_id") in settled)]
        gates = {
            str(((r.get("properties") or {}).get("gate") or {}).get("action_id")): r
            for r in records
            if r.get("kind") == "step.gate"
        }
        counts: Counter[str] = Counter()
        compact: list[dict[str, Any]] = []
        start_name = ""
        for r_index, r in enumerate(records):
            kind = str(r.get("kind", ""))
            kinds.add(kind)
            verdict = _eval(r)
            decision = str(verdict.get("decision") or "")
            violated = _violated(verdict)
            outcome = _outcome(r)
            error = _error(r)
            if kind == "task.start" and not start_name:
                start_name = str(r.get("step_name") or "")
            entry: dict[str, Any] = {
                key: r.get(key)
                for key in ("seq", "timestamp", "kind", "verb", "step_name", "action_id")
            }
            entry.update(
                input=r.get("input"),
                output=r.get("output"),
                properties=r.get("properties") or {},
                decision=decision,
                reason=str(verdict.get("reason") or ""),
                policies=violated,
                outcome=outcome,
                error=error,
            )
            if verdict.get("enforcement") == "monitor":
                entry["monitor"] = True
            gate = gates.get(str(r.get("action_id"))) if r.get("action_id") else None
            if gate is not None and kind != "step.gate":
                given = gate.get("output")
                answer = given if isinstance(given, dict) else {}
                entry["approval"] = {
                    "decision": answer.get("decision"),
                    "by": answer.get("by"),
                    "why": answer.get("why"),
                    "seq": gate.get("seq"),
                    "timestamp": gate.get("timestamp"),
                }
            elif verdict.get("approved"):
                entry["approval"] = {"decision": "pass", "by": verdict.get("approved_by")}
            if kind == "step.gate":
                raw = r.get("output")
                answer = raw if isinstance(raw, dict) else {}
                gate_props = (r.get("properties") or {}).get("gate") or {}
                counts["asked"] += 1
                counts["approved" if answer.get("decision") == "pass" else "denied"] += 1
                approvals.append(
                    {
                        "task": t_index,
                        "record": r_index,
                        "seq": r.get("seq"),
                        "timestamp": r.get("timestamp"),
                        "decision": answer.get("decision"),
                        "by": answer.get("by"),
                        "why": answer.get("why"),
                        "step": gate_props.get("step_name"),
                        "policies": gate_props.get("policies") or [],
                        "gate_kind": gate_props.get("kind"),
                    }
                )
            compact.append(entry)
            if decision:
                counts[decision] += 1
                stamp = _stamp(r.get("timestamp"))
                if stamp is not None and decision in DECISIONS:
                    stamps.append((stamp, decision))
            if outcome == "failed":
                counts["failed"] += 1
            for name in violated:
                policies[name] += 1
                policy_decisions[name][decision or "recorded"] += 1
            gist = _short(r.get("input")) if kind != "step.gate" else _short(r.get("output"))
            rows.append(
                [
                    t_index,
                    r_index,
                    r.get("seq"),
                    r.get("timestamp"),
                    kind,
                    decision,
                    outcome,
                    violated,
                    str(r.get("step_name") or ""),
                    gist,
                    "" if decision in ("", "allow") else _short(verdict.get("reason"), 300),
                ]
            )
        chain_gaps = _gaps(summary.agent_id, summary.task_id, stored, declared)
        for gap in chain_gaps:
            gap["task_index"] = t_index
        gaps.extend(chain_gaps)
        agent_counts = per_agent[summary.agent_id]
        agent_counts["tasks"] += 1
        agent_counts["records"] += len(records)
        for key, value in counts.items():
            agent_counts[key] += value
        tasks_out.append({"records": compact, "tree": step_tree(compact)})
        summary_row: dict[str, Any] = {
            "agent": summary.agent_id,
            "task": summary.task_id,
            "name": start_name,
            "first": summary.first_timestamp,
            "last": summary.last_timestamp,
            "records": len(records),
            "closed": summary.closed,
            "last_kind": summary.last_kind,
            "counts": dict(counts),
            "verified": (summary.agent_id, summary.task_id) not in broken,
            "break": broken.get((summary.agent_id, summary.task_id), ""),
            "gaps": len(chain_gaps),
        }
        tasks_out[-1]["summary"] = summary_row

    loose_breaks = [
        f"{b.reason}: {b.detail}" for b in report.breaks if not b.agent_id and not b.task_id
    ]
    summary_out = {
        "generated": generated.isoformat().replace("+00:00", "Z"),
        "location": store.location,
        "filter": {
            "agent": wanted.agent,
            "task": wanted.task,
            "since": wanted.since.isoformat().replace("+00:00", "Z") if wanted.since else None,
        },
        "tasks": [t["summary"] for t in tasks_out],
        "agents": [{"agent": agent, **dict(counts)} for agent, counts in sorted(per_agent.items())],
        "timeline": _timeline(stamps),
        "policies": [
            {"name": name, "count": count, "decisions": dict(policy_decisions[name])}
            for name, count in policies.most_common()
        ],
        "approvals": approvals,
        "verification": {
            "ok": report.ok,
            "chains": report.chains_checked,
            "records": report.steps_checked,
            "warnings": list(report.warnings),
            "unattributed": loose_breaks,
        },
        "gaps": gaps,
        "kinds": sorted(kinds),
        "columns": [
            "task",
            "record",
            "seq",
            "timestamp",
            "kind",
            "decision",
            "outcome",
            "policies",
            "step",
            "gist",
            "reason",
        ],
        "steps": rows,
    }
    return {
        "summary": summary_out,
        "tasks": [{k: t[k] for k in ("records", "tree")} for t in tasks_out],
    }


def _timeline(stamps: list[tuple[datetime, str]]) -> dict[str, Any]:
    """Decisions per time bin: up to `_BINS` equal bins between the first and last stamp."""
    if not stamps:
        return {"start": None, "end": None, "bins": []}
    first = min(s for s, _ in stamps)
    last = max(s for s, _ in stamps)
    span = (last - first).total_seconds()
    count = _BINS if span > 0 else 1
    width = span / count if span > 0 else 1.0
    bins: list[dict[str, Any]] = [
        {"start": (first + timedelta(seconds=i * width)).isoformat().replace("+00:00", "Z")}
        | dict.fromkeys(DECISIONS, 0)
        for i in range(count)
    ]
    for stamp, decision in stamps:
        index = min(int((stamp - first).total_seconds() / width), count - 1)
        bins[index][decision] += 1
    return {
        "start": first.isoformat().replace("+00:00", "Z"),
        "end": last.isoformat().replace("+00:00", "Z"),
        "bins": bins,
    }


def _embed(value: Any) -> str:
    """JSON that is safe inside a ``<script type="application/json">`` block: no record can
    close the block or open a comment, whatever text it holds."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _asset(name: str) -> str:
    return files("charter._cli").joinpath(name).read_text(encoding="utf-8")


def render_report(data: Mapping[str, Any]) -> str:
    """The HTML page for `collect_report`'s data: one file, no external resource."""
    blocks = [
        f'<script type="application/json" id="charter-task-{i}">{_embed(t)}</script>'
        for i, t in enumerate(data["tasks"])
    ]
    page = _asset("report.html")
    head, _, tail = page.partition("<!--DATA-->")
    summary = (
        f'<script type="application/json" id="charter-summary">{_embed(data["summary"])}</script>'
    )
    return "".join([head, summary, "\n", "\n".join(blocks), tail])
