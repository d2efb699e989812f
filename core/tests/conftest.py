"""Shared fixtures for the core tests."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NoReturn

import orjson
import pytest
from charter._model import fastjson

# Fails any test in which Charter swallowed an internal error, unless the test is marked
# @pytest.mark.allow_internal_errors (see charter.testing).
from charter.testing import charter_internal_errors  # noqa: F401

# A real PostgreSQL server in a temporary folder for the postgresql:// store's tests (one per
# session, a fresh database per test).
from charter.testing.postgresql import postgresql_server, postgresql_url  # noqa: F401


@pytest.fixture(scope="module", params=["orjson", "young"])
def json_codec(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a module's tests twice: encoding and decoding through orjson (a long-lived
    process), and with orjson refusing every value and text, as `charter._model.fastjson`
    does in a young process before it loads orjson. What is written and read must not
    depend on which; module-scoped so that hypothesis tests can use it."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "orjson":
            sorted_dumps = functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
            patch.setattr(fastjson, "dumps_sorted", sorted_dumps)
            patch.setattr(fastjson, "loads", orjson.loads)
        else:

            def refuse(value: object) -> NoReturn:
                raise _Refusal("orjson is not loaded")

            patch.setattr(fastjson, "dumps_sorted", refuse)
            patch.setattr(fastjson, "loads", refuse)
        yield request.param


class _Refusal(ValueError, TypeError):
    """What orjson raises for a value (TypeError) or a text (ValueError) it refuses."""
