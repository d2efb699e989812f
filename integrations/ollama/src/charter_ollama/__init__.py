"""Charter for the Ollama Python client: govern a `Client`, an `AsyncClient` or the
module-level functions.

    governance = charter_ollama.govern(ollama, policy_file="policies.yaml", agent_id="bot")
    response = ollama.chat(model="llama3.2", messages=[...], tools=[read_file])
    messages += governance.run_tools(response, {"read_file": read_file})

Every chat and generate call (plain or streamed NDJSON) is a ``step.model`` step, judged
before it is sent and recorded after with model, provider, token usage (prompt_eval_count,
eval_count), stop reason (done_reason), latency and text. A blocked call never reaches the
server and raises `BlockedCallError`, an `ollama.ResponseError` with status 403. The tool
calls a response asks for are judged on arrival (`Governance.verdicts`) and run through
Charter by `Governance.run_tools`. `Governance.uninstall()` removes it all.
"""

from ._governance import BlockedCallError, Governance, govern

__all__ = ["BlockedCallError", "Governance", "govern"]
