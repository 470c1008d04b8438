"""One console cluster (``tests.support.console``) and one Chromium for the
whole e2e package: starting them is most of a browser test's time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import launch
from tests.support.console import Console, console_cluster


@pytest.fixture(scope="package")
def console(tmp_path_factory, redis_url) -> Iterator[Console]:
    with console_cluster(tmp_path_factory.mktemp("console"), redis_url) as c:
        yield c


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = launch(pw)
        try:
            yield b
        finally:
            b.close()
