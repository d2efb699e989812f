"""A CrewAI crew governed by Charter, offline: no network, no API key.

    uv run python examples/crewai_crew.py

A research crew's model is scripted (charter_crewai.testing.ScriptedLLM), so the run is the
same every time: the agent searches the web (allowed), then tries to delete a file, which
examples/policies.yaml says needs a person's approval. The console approver asks when you run
this in a terminal and denies when nobody can answer (CI, a pipe); a denied delete never runs,
the agent reads why and finishes its task. The audit trail is printed and verified.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# CrewAI phones home and writes under HOME when it is imported; keep this run to itself.
SCRATCH = tempfile.mkdtemp(prefix="charter-crewai-example-")
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    OTEL_SDK_DISABLED="true",
    CREWAI_TRACING_ENABLED="false",
    CREWAI_STORAGE_DIR=os.path.join(SCRATCH, "crewai"),
    HOME=SCRATCH,
)
# CrewAI leaves a lock file per crew in the temp folder; keep them in the scratch one too.
tempfile.tempdir = SCRATCH

import charter  # noqa: E402
import charter_crewai  # noqa: E402
from charter_crewai.testing import ScriptedLLM, final_answer, react_tool_call  # noqa: E402
from crewai import Agent, Crew, Task  # noqa: E402
from crewai.tools import tool  # noqa: E402

POLICIES = Path(__file__).with_name("policies.yaml")
AUDIT = f"sqlite:///{SCRATCH}/audit.db"
deleted: list[str] = []


@tool("search_web")
def search_web(query: str) -> str:
    """Search the web and return the top result."""
    return f"Top result for {query!r}: governance keeps agents inside agreed limits."


@tool("delete_file")
def delete_file(path: str) -> str:
    """Delete the file at path."""
    deleted.append(path)
    return f"deleted {path}"


def main() -> None:
    llm = ScriptedLLM(
        model="scripted-research-model",
        responses=[
            react_tool_call("search_web", {"query": "agent governance"}),
            react_tool_call("delete_file", {"path": "notes/draft.md"}),
            final_answer("Governance keeps agents inside agreed limits; the draft was kept."),
        ],
        usage={"prompt_tokens": 400, "completion_tokens": 60, "total_tokens": 460},
    )
    researcher = Agent(
        role="researcher",
        goal="Summarise what the web says about a topic",
        backstory="A careful analyst who cites sources.",
        llm=llm,
        tools=[search_web, delete_file],
    )
    summary = Task(
        description="Summarise current thinking on {topic} in one sentence.",
        expected_output="One sentence.",
        agent=researcher,
    )
    crew = Crew(agents=[researcher], tasks=[summary], name="research-crew")

    governance = charter_crewai.govern(
        crew,
        policy_file=str(POLICIES),
        agent_id="research-crew",
        audit_location=AUDIT,
        approver=charter.console_approver,
    )
    result = crew.kickoff(inputs={"topic": "agent governance"})
    governance.uninstall()  # flushes the audit trail

    print(f"answer: {result.raw}")
    print(f"files deleted: {deleted or 'none'}")
    print(f"audit trail ({AUDIT}):")
    store = charter.open_store(AUDIT)
    try:
        for record in store.read_task(governance.task_ids[-1]):
            outcome = record["meta"].get("charter.outcome", "")
            kind = f"{record['kind']} {record['verb'] or ''}"
            print(f"  {record['seq']:>2}  {kind:<22} {record['step_name'][:44]:<44} {outcome}")
    finally:
        store.close()
    print(f"verify: {charter.verify(AUDIT)}")


if __name__ == "__main__":
    main()
