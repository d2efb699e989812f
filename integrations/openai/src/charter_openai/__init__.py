"""Charter for the OpenAI Python SDK: govern an `OpenAI` or `AsyncOpenAI` client.

    client = openai.OpenAI()
    governance = charter_openai.govern(client, policy_file="policies.yaml", agent_id="bot")
    response = client.chat.completions.create(model="gpt-4o-mini", messages=[...], tools=[...])
    messages += governance.run_tools(response, {"get_weather": get_weather})

Every Chat Completions and Responses API call (plain, streamed, ``with_raw_response``,
``with_streaming_response``) is a ``step.model`` step, judged before it is sent and recorded
after with model, provider, token usage, stop reason, latency and text. A blocked call never
reaches the network and raises `BlockedCallError`, the SDK's own 403 refusal. The tool calls a
response asks for are judged on arrival (`Governance.verdicts`) and run through Charter by
`Governance.run_tools`. `Governance.uninstall()` removes it all.
"""

from ._governance import BlockedCallError, Governance, govern

__all__ = ["BlockedCallError", "Governance", "govern"]
