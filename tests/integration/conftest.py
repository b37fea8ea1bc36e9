"""Integration tests' own fixtures (the services are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.relay_harness import RelayProcess


@pytest.fixture(autouse=True)
def no_relay_outlives_its_test() -> Iterator[None]:
    """Every ``relay run`` child a test started is gone after it, whatever the test did or failed to do:
    a leftover relay would go on reading a test server and loading the machine for the rest of the session."""
    yield
    RelayProcess.stop_started()


@pytest.fixture(scope="session")
def relay_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """deploy/Dockerfile built as ``canal-relay:test``, once per session (no container engine: skipped)."""
    from tests.integration import containers

    containers.require_engine()
    log = tmp_path_factory.mktemp("images") / "relay-image.log"
    containers.build("canal-relay:test", "deploy/Dockerfile", log)
    return "canal-relay:test"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright's browser is Debian's chromium (``playwright install`` cannot download one here),
    headless, with the flags that keep it off the network (../shared/ENVIRONMENT.md). One browser for the
    whole session (pytest-playwright's ``browser`` fixture); each test opens contexts of its own."""
    from relay.dev.services import find_binary
    from relay.errors import ServiceError
    from tests.integration.console_harness import CHROMIUM_FLAGS

    try:
        chromium = find_binary("chromium")
    except ServiceError as exc:
        pytest.skip(str(exc))
    return {**browser_type_launch_args, "executable_path": chromium, "args": CHROMIUM_FLAGS}
