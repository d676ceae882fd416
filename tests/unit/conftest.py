"""Unit tests are pure: whatever an integration test of the same run installed (the key service of
tests/conftest.py's ``infra``), a unit test sees no key service unless it installs its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from schemas import sealing


@pytest.fixture(autouse=True)
def _no_key_service() -> Iterator[None]:
    held = sealing.installed()
    sealing.install(None)
    yield
    sealing.install(held)
