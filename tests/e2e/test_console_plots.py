"""The plots in headless Chromium: a young install's data fills the axis
(the plot starts a step before its first data, not 24 hours back), each
step's values show under the pointer, and the page says lateness counts
scheduled fires only.
"""

from __future__ import annotations

import re

import pytest

from tests.support.console import goto, open_page, until

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

pytest.importorskip("playwright.sync_api")


def first_x(page, selector: str) -> tuple[float, float]:
    """The first point of a chart's line and the chart's width (viewBox units)."""
    d = page.get_attribute(selector + " path.line.fires", "d")
    width = float(page.get_attribute(selector, "viewBox").split()[2])
    match = re.match(r"M([\d.]+),", d or "")
    assert match, d
    return float(match.group(1)), width


def test_plots_zoom_to_their_data_and_show_values_on_hover(console, browser):
    context, page, watch = open_page(browser, console, console.admin, width=1440)
    try:
        goto(page, console, "plots")
        until(page, "document.querySelectorAll('svg.chart').length === 6 && "
                    "document.querySelectorAll('#plots-24h svg.chart path.line.fires').length")
        # The cluster is minutes old: its data starts near the left, not in the last 3 %.
        x, width = first_x(page, "#plots-24h figure:first-child svg.chart")
        assert x < 0.5 * width, (x, width)
        assert "the first data" in page.inner_text("#plots-24h").lower() or \
            "the first data" in page.inner_text("main")
        assert "scheduled fires only" in page.inner_text("main")
        band = page.locator("#plots-1h figure:first-child svg.chart rect.hover").last
        band.hover()
        readout = page.locator("#plots-1h figure:first-child .readout")
        until(page, "document.querySelector('#plots-1h figure .readout').innerText.includes('UTC')")
        text = readout.inner_text()
        assert re.match(r"\d\d:\d\d–\d\d:\d\d UTC: fires/s [\d.]+", text), text
        assert band.locator("title").text_content() == text
        watch.assert_clean()
    finally:
        context.close()
