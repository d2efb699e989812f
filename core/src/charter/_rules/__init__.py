"""Built-in rules; importing this package registers them."""

from charter._rules import basic, compound, guards, history, registration  # noqa: F401  (registers on import)

__all__ = ["basic", "compound", "registration"]
