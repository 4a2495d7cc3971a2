"""Headless Chromium for looking at a report the way a reader does: the browser test and scripts/screenshot.py.

Debian's chromium and chromium-driver (scripts/setup_chromium.sh, `make setup-chromium`) at fixed paths, never
Selenium Manager: it would download a driver and a browser from the network, which CI must not depend on.
selenium is a dev extra, imported only here and only when a browser is asked for."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

# headless and quiet: no GPU or /dev/shm needs (containers), no sandbox (root in CI), and nothing that reaches the
# network on its own (updates, sync, first-run pages), so what the page loads is all the network we see
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


class BrowserMissing(RuntimeError):
    """Chromium, its driver or selenium is not installed; the message says how to install it."""


def browser_problem() -> str | None:
    """Why no browser can be started here, or None."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        # the script, not `make setup-chromium`: its stamp may outlive a removed browser
        return (f"{' and '.join(missing)} not found: run `bash scripts/setup_chromium.sh` as root (it installs "
                "Debian's chromium and chromium-driver; `make test` runs it)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: `.venv/bin/pip install -e '.[dev]'` (make client does)"
    return None


@contextmanager
def chromium_driver(width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    """A headless Chromium with a throwaway profile and a width x height viewport; quit (browser and driver
    processes ended) when the block ends, however it ends."""
    problem = browser_problem()
    if problem:
        raise BrowserMissing(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    # ignore_cleanup_errors: a just-quit Chromium can still be removing its own lock files
    with tempfile.TemporaryDirectory(prefix="layerbench-chromium-", ignore_cleanup_errors=True) as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        # an explicit driver path is what keeps Selenium Manager (and its downloads) out
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        try:
            # headless=new counts a window's (invisible) frame in --window-size: grow the window by the frame so
            # the page itself gets width x height, the first screen a reader sees
            inner_w, inner_h, outer_w, outer_h = driver.execute_script(
                "return [innerWidth, innerHeight, outerWidth, outerHeight]")
            driver.set_window_size(outer_w + width - inner_w, outer_h + height - inner_h)
            yield driver
        finally:
            driver.quit()
