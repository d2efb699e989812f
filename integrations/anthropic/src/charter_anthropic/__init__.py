"""Charter for the Anthropic Python SDK: govern an `Anthropic` or `AsyncAnthropic` client.

    client = anthropic.Anthropic()
    governance = charter_anthropic.govern(client, policy_file="policies.yaml", agent_id="bot")
    message = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=[...])
    messages.append(governance.run_tools(message, {"get_weather": get_weather}))

Every Messages call (plain, streamed, raw, beta) is a ``step.model`` step, judged before it is
sent and recorded after with model, provider, token usage, stop reason, latency and text. A
blocked call never reaches the network and raises `BlockedCallError`, the SDK's own 403
refusal. The tool_use blocks a message asks for are judged on arrival
(`Governance.verdicts`) and run through Charter by `Governance.run_tools`; the SDK's own tool
runner runs governed copies of its tools. `Governance.uninstall()` removes it all.
"""

from ._governance import BlockedCallError, Governance, govern

__all__ = ["BlockedCallError", "Governance", "govern"]
