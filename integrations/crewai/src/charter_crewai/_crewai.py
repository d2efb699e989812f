"""CrewAI, imported on first use: importing it takes seconds, so `import charter_crewai` does not.

Everything this package needs from CrewAI is looked up here once, so a missing or too old
CrewAI fails in one place with one message that names the install command.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from charter import BlockedError, EvalResult

INSTALL = "pip install charter-crewai"
# The interception dispatcher (kickoff, task, model and tool points; HookAborted passing through
# executors and retries) arrived in 1.15.3, but until 1.15.18 a HookAborted raised before a
# model call was flattened into a retried ValueError, so a blocked model call could not reach
# the caller as a BlockedError. 1.15.19 is the first release where every block does.
MIN_VERSION = (1, 15, 19)
SUPPORTED = ">=1.15.19,<2"


@dataclass(frozen=True, slots=True)
class CrewAI:
    """The CrewAI names the integration uses."""

    version: str
    point: Any  # crewai.hooks.dispatch.InterceptionPoint
    hook_aborted: type[BaseException]
    aborted: type[BlockedError]
    register: Any
    unregister: Any
    global_hooks: Any
    crew_type: type
    base_agent_type: type


def _parse(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version)[:3]
    return tuple(int(p) for p in parts)


@functools.cache
def load() -> CrewAI:
    """CrewAI's hook API. Raises ImportError naming the install command when CrewAI is missing
    or older than the supported range."""
    try:
        from crewai import Crew
        from crewai.agents.agent_builder.base_agent import BaseAgent
        from crewai.hooks.dispatch import (
            HookAborted,
            InterceptionPoint,
            get_global_hook_list,
            register,
            unregister,
        )
    except ImportError as exc:
        try:
            found = metadata.version("crewai")
        except metadata.PackageNotFoundError:
            found = None
        which = f"crewai {found} is installed but lacks" if found else "CrewAI is not installed"
        raise ImportError(
            f"charter_crewai needs CrewAI {SUPPORTED} with its interception hooks; {which} "
            f"them ({exc}). Install the integration with `{INSTALL}`."
        ) from exc
    version = metadata.version("crewai")
    if _parse(version) < MIN_VERSION:
        raise ImportError(
            f"charter_crewai supports CrewAI {SUPPORTED}; crewai {version} is installed. "
            f"Upgrade with `{INSTALL} --upgrade` (or pip install 'crewai{SUPPORTED}')."
        )
    return CrewAI(
        version=version,
        point=InterceptionPoint,
        hook_aborted=HookAborted,
        aborted=_aborted_type(HookAborted),
        register=register,
        unregister=unregister,
        global_hooks=get_global_hook_list,
        crew_type=Crew,
        base_agent_type=BaseAgent,
    )


def _aborted_type(hook_aborted: type[Exception]) -> type[BlockedError]:
    # CrewAI swallows every exception a hook raises except HookAborted, and re-raises
    # HookAborted past its executors, retries and kickoff; Charter's callers catch
    # BlockedError. One class that is both keeps the block on the path CrewAI does not
    # swallow and gives the user the exception Charter documents.
    class CharterBlocked(BlockedError, hook_aborted):  # type: ignore[valid-type,misc]
        """A step Charter blocked, raised through CrewAI's hooks (a charter.BlockedError)."""

        def __init__(
            self,
            reason: str,
            result: EvalResult | None = None,
            step_name: str = "",
            kind: str = "",
        ) -> None:
            BlockedError.__init__(self, reason, result, step_name, kind)
            self.source = "charter"

    CharterBlocked.__module__ = __name__
    return CharterBlocked
