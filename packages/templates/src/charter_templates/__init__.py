"""Charter templates: YAML data saying how each framework's tool events map onto behaviors.

`resolve` turns (integration, tool name, args) into a `Resolution` (kind, verb, properties,
effect); `load_templates` reads the built-in templates merged with a user file. The code only
interprets the templates in ``charter_templates/data``; see the package README for the format.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._load import (
    builtin_sources,
    default_templates,
    load_templates,
    template_documents,
    templates_from_documents,
)
from ._model import EFFECT_CLASSES, Resolution, TemplateError
from ._resolve import TemplateSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "EFFECT_CLASSES",
    "Resolution",
    "TemplateError",
    "TemplateSet",
    "builtin_sources",
    "load_templates",
    "resolve",
    "template_documents",
    "templates_from_documents",
]


def resolve(
    integration: str,
    name: str,
    args: Mapping[str, Any] | None = None,
    *,
    overrides: TemplateSet | None = None,
) -> Resolution:
    """Map one tool event onto a behavior; never raises and never returns an invalid pair.

    `integration` picks the template (``claude_code``; any name without a template of its own,
    such as ``langchain``, uses ``generic``). `name` is the tool's name; `args` its arguments,
    of which only named string (or list-of-string) fields are copied into properties. Names
    that no template knows resolve to ``step.unknown`` with effect ``non_idempotent``.
    `overrides` is a set from `load_templates(path)` (built-ins already merged in) used instead
    of the built-in set.
    """
    templates = overrides if overrides is not None else default_templates()
    return templates.resolve(integration, name, args)
