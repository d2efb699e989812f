"""Built-in rules; importing this package registers them."""

from charter._policy.rules import (
    basic,
    capabilities,
    compound,
    guards,
    history,
    registration,
    shell,
)

__all__ = ["basic", "capabilities", "compound", "guards", "history", "registration", "shell"]
