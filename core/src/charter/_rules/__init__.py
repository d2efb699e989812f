"""Built-in rules; importing this package registers them."""

from charter._rules import basic, compound, registration

__all__ = ["basic", "compound", "registration"]
