"""Shared fixtures for the core tests."""

from __future__ import annotations

# Fails any test in which Charter swallowed an internal error, unless the test is marked
# @pytest.mark.allow_internal_errors (see charter.testing).
from charter.testing import charter_internal_errors  # noqa: F401

# A real PostgreSQL server in a temporary folder for the postgresql:// store's tests (one per
# session, a fresh database per test).
from charter.testing.postgresql import postgresql_server, postgresql_url  # noqa: F401
