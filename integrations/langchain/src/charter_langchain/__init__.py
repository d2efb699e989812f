"""Charter for LangChain: govern any Runnable with a callback handler, and v1 agents with a
middleware.

```python
handler = CharterCallbackHandler(policy_file="policies.yaml", agent_id="support-bot")
chain.invoke(inputs, config={"callbacks": [handler]})

agent = create_agent(model, tools, middleware=[CharterMiddleware(policy_file="policies.yaml")])
```

The public API is exactly ``__all__``. A missing framework raises ImportError naming the
install command when the name that needs it is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._errors import BlockedStepError
    from ._handler import CharterCallbackHandler
    from ._middleware import CharterMiddleware

__all__ = ["BlockedStepError", "CharterCallbackHandler", "CharterMiddleware"]

_HOMES = {
    "BlockedStepError": "._errors",
    "CharterCallbackHandler": "._handler",
    "CharterMiddleware": "._middleware",
}
_FRAMEWORKS = ("langchain_core", "langchain", "langgraph")


def __getattr__(name: str) -> Any:
    # Imported on first use so that `import charter_langchain` works without the framework
    # and the error says how to install it, instead of a bare ModuleNotFoundError.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'charter_langchain' has no attribute {name!r}")
    try:
        module = importlib.import_module(home, __name__)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in _FRAMEWORKS:
            raise
        raise ImportError(
            f"charter_langchain.{name} needs {exc.name.split('.')[0]} (LangChain v1), which "
            "is not installed: pip install charter-langchain"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
