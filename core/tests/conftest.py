"""Shared fixtures for the core tests."""

from __future__ import annotations

# Fails any test in which Charter swallowed an internal error, unless the test is marked
# @pytest.mark.allow_internal_errors (see charter.testing).
from charter.testing import charter_internal_errors  # noqa: F401
