"""Charter for CrewAI: govern a crew's (or an agent's) kickoffs, tasks, model calls and tools.

    crew = Crew(agents=[...], tasks=[...])
    charter_crewai.govern(crew, policy_file="policies.yaml", agent_id="research-crew")
    crew.kickoff(inputs={...})

Each kickoff is a Charter task; each CrewAI task a step.self step; each model call a
step.model step; each tool call a step mapped by charter-templates. Steps are judged before
they run and recorded after. A blocked tool never runs and the agent reads why; a blocked
model call, task or kickoff raises charter.BlockedError. Importing this package does not
import CrewAI; `govern` does (and names ``pip install charter-crewai`` when it is missing).
"""

from ._governance import Governance, govern

__all__ = ["Governance", "govern"]
