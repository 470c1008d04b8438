"""Debian's Chromium driven by playwright, and a watch on what a page does.

Never ``playwright install``: the tests drive /usr/bin/chromium (``ops/setup
--dev`` installs it) through ``executable_path``. ``PageWatch`` records every
request a page makes, its console errors and its uncaught exceptions, so a
test can assert that nothing failed and nothing left loopback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

CHROMIUM = os.environ.get("CRONMAN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass
class PageWatch:
    """What one page did: requests, console errors, exceptions."""

    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def attach(self, page) -> PageWatch:  # noqa: ANN001 (playwright's Page)
        page.on("request", lambda req: self.requests.append(req.url))
        page.on("console", lambda msg: self.errors.append(f"console: {msg.text}")
                if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(f"exception: {exc}"))
        page.on("requestfailed", lambda req: self.errors.append(
            f"request failed: {req.url} {req.failure}"))
        return self

    def off_loopback(self) -> list[str]:
        """Requests whose host is not a loopback address (data: URLs aside)."""
        out = []
        for url in self.requests:
            parts = urlsplit(url)
            if parts.scheme in ("data", "blob", "about"):
                continue
            if parts.hostname not in LOOPBACK and not (parts.hostname or "").startswith("127."):
                out.append(url)
        return out

    def assert_clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.requests, "the page made no request"
        assert self.off_loopback() == [], self.off_loopback()


def launch(playwright):  # noqa: ANN001, ANN201
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def artifact_dir(name: str) -> Path:
    path = ARTIFACTS / name
    path.mkdir(parents=True, exist_ok=True)
    return path
