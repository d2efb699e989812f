"""Charter for LlamaIndex: govern agents, agent workflows, tools, model calls and retrieval.

    agent = FunctionAgent(tools=[...], llm=llm)
    governance = charter_llamaindex.govern(agent, policy_file="policies.yaml", agent_id="docs")
    response = await agent.run(user_msg="...")

Each run is a Charter task; every model call of the agent's LLM a step.model step; every tool
call a step mapped by charter-templates (query-engine and retriever tools are reads whose
output is untrusted content). Steps are judged before they run and recorded after. A refused
tool call returns an error ToolOutput the model reads and the run continues; a refused model
call raises charter.BlockedError. A policy that asks pauses the workflow with an
InputRequiredEvent; answer with ``handler.ctx.send_event(charter_llamaindex.approve(event))``
(or `deny`, `edit`). Importing this package does not import LlamaIndex; `govern` does.
"""

from ._governance import TASK_KEY, Governance, govern, govern_tools
from ._llama import approve, deny, edit

__all__ = ["TASK_KEY", "Governance", "approve", "deny", "edit", "govern", "govern_tools"]
