"""Sessions for the whole workspace.

`uv run nox` runs lint, types and tests inside the workspace environment that `uv run` has
just synced (fast, and exactly what the README promises). The framework-version sessions build
their own environments with uv so that the oldest supported framework releases are tested too.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "types", "tests"]
nox.options.default_venv_backend = "uv"

# Directories holding Python sources and tests, checked by ruff.
SOURCES = ["core", "packages", "integrations", "tests", "examples", "bench", "noxfile.py"]


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.run("ruff", "check", *SOURCES)
    session.run("ruff", "format", "--check", *SOURCES)


@nox.session(venv_backend="none")
def types(session: nox.Session) -> None:
    """mypy (strict) on the core distribution."""
    session.run("mypy")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """pytest over every distribution's tests and the cross-package tests."""
    # Exit code 5 means "no tests collected": a package without tests yet must not fail the run.
    session.run("pytest", *session.posargs, success_codes=[0, 5])


# The oldest framework releases each integration supports, tested in environments of their own
# (the default `tests` session covers the latest releases that uv.lock pins).
OLDEST = {
    "crewai": ["crewai==1.15.19"],
    "langchain": ["langchain-core==1.0.0", "langchain==1.0.0", "langgraph==1.0.0"],
    "openai": ["openai==1.66.0"],
    "anthropic": ["anthropic==1.0.0"],
    "ollama": ["ollama==0.4.0"],
    "langgraph": [
        "langgraph==1.2.0",
        "langgraph-prebuilt==1.1.0",
        "langchain-core==1.4.0",
        "langgraph-checkpoint==4.1.0",
        "langgraph-checkpoint-sqlite",
    ],
    # pydantic 2.14 breaks LlamaIndex's own restore of a saved agent context (its memory is
    # lost): the oldest run pins the pydantic release uv.lock tests the latest with.
    "llamaindex": [
        "llama-index-core==0.14.12",
        "llama-index-workflows==2.23.0",
        "pydantic==2.12.5",
    ],
}


@nox.session(python="3.11")
@nox.parametrize("integration", sorted(OLDEST))
def oldest(session: nox.Session, integration: str) -> None:
    """One integration's tests against the oldest framework releases it supports."""
    session.install("-e", "core", "-e", "packages/templates", "-e", f"integrations/{integration}")
    session.install("pytest", "hypothesis", "vcrpy", "pytest-recording", *OLDEST[integration])
    session.run("pytest", f"integrations/{integration}/tests")


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmarks: print figures, assert nothing."""
    for script in (
        "bench/engine.py",
        "bench/capabilities.py",
        "bench/governor.py",
        "bench/claude_hook.py",
        "bench/langchain_agent.py",
        "bench/langgraph_graph.py",
        "bench/crewai_crew.py",
        "bench/llamaindex_agent.py",
        "bench/writer_batches.py",
        "bench/task_end.py",
        "bench/report.py",
        "bench/shell_view.py",
        "bench/model_clients.py",
        "bench/serve.py",
        "bench/shared_limits.py",
        "bench/otlp_export.py",
        "bench/pg_append.py",
        "bench/provenance.py",
        "bench/checkpoints.py",
        "bench/agt_compare.py",
        "bench/footprint.py",
    ):
        session.run("python", script)
