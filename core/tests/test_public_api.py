"""The public API is exactly `__all__` in every public module (names without a leading `_`)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import charter
import pytest


def public_modules() -> list[str]:
    names = ["charter"]
    for info in pkgutil.walk_packages(charter.__path__, "charter."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


@pytest.mark.parametrize("module_name", public_modules())
def test_all_equals_the_public_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:  # every exported name resolves (charter loads lazily)
        getattr(module, name)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert sorted(module.__all__) == sorted(public)


def test_every_public_name_is_documented() -> None:
    for name in charter.__all__:
        obj = getattr(charter, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, f"charter.{name} has no docstring"


def test_import_charter_stays_light() -> None:
    """Hooks import charter on every call: nothing heavy loads before it is used."""
    heavy = (
        "yaml",
        "re2",
        "asyncio",
        "sqlite3",
        "charter._runtime.runner",
        "charter._engine.engine",
    )
    code = f"import sys, charter; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        charter.Nope  # noqa: B018
