"""The HTML report as a reader sees it: opened in headless Chromium (harness/reporting/browser.py), it renders, shows
every
plot, fetches nothing (one file you can mail or attach), shows no Markdown and colours its verdicts.

Pages: a committed example's compare report written again through write_report (the real report, from
reports/examples/<run>/summary.json, which a fresh clone has; one: the examples share every line of code, and
plotting costs seconds each), and render's sample document (folded details, **bold** and `code` in every place).
A missing browser fails, it does not skip: `make test` installs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.reporting.browser import browser_problem, chromium_driver
from tests.reporting.test_render import IMAGES, TITLE, write_sample

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

pytestmark = pytest.mark.slow

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "reports" / "examples").glob("*-compare-*/summary.json"))

# where the decision (the headline's first line) and the lead chart end, against the window's height
FIRST_SCREEN = """
const li = document.querySelector('ul.headline li'), img = document.querySelector('figure.lead img');
return {decision: li.textContent, decisionBottom: li.getBoundingClientRect().bottom,
        chart: img && img.alt, chartBottom: img ? img.getBoundingClientRect().bottom : null,
        height: window.innerHeight};
"""

# everything about the loaded page in one round trip
PAGE_STATE = """
const css = e => getComputedStyle(e).backgroundColor;
return {
  images: Array.from(document.images, i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth})),
  fetched: performance.getEntriesByType('resource').map(e => e.name),
  sources: Array.from(document.querySelectorAll('[src], link[href]'),
                      e => e.getAttribute('src') ?? e.getAttribute('href')),
  verdicts: Array.from(document.querySelectorAll('td.bad, td.good, td.neutral'),
                       td => ({cls: td.className, text: td.textContent, background: css(td)})),
  openDetails: document.querySelectorAll('details[open]').length,
};
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    problem = browser_problem()
    if problem:  # CI installs Chromium (make test -> $(STAMPS)/chromium): a skip here would hide a broken report
        pytest.fail(f"the report's browser test needs Chromium: {problem}", pytrace=False)
    with chromium_driver(1280, 900) as driver:  # quits browser and driver however the tests end
        yield driver


def check_page(driver: WebDriver, html: Path, images: int) -> None:
    """html as Chromium shows it; images: how many PNGs the report was written with."""
    from selenium.webdriver.common.by import By

    driver.get(html.resolve().as_uri())  # returns after the load event: every image has loaded or failed
    assert driver.title, "the page has no <title>"
    assert driver.find_element(By.TAG_NAME, "h1").text == driver.title
    rows = driver.find_elements(By.CSS_SELECTOR, "table tbody tr")
    assert rows and rows[0].is_displayed(), "no table with rows on the page"

    state = driver.execute_script(PAGE_STATE)
    broken = [i["alt"] for i in state["images"] if not (i["complete"] and i["width"] > 0)]
    assert not broken, f"images that did not load: {broken}"
    assert len(state["images"]) == images, f"{len(state['images'])} images shown, {images} written"
    # the one-file promise: nothing came from the network or from files beside it (data: URIs are not fetched)
    fetched = [name for name in state["fetched"] if not name.startswith("data:")]
    assert not fetched, f"the page fetched {fetched}"
    linked = [s[:80] for s in state["sources"] if not s.startswith("data:")]
    assert not linked, f"the page links resources instead of carrying them: {linked}"

    assert state["verdicts"], "no verdict cell got a colour class"
    plain = [v for v in state["verdicts"] if v["background"] in ("rgba(0, 0, 0, 0)", "transparent")]
    assert not plain, f"verdict cells with a class but no colour: {plain}"

    assert state["openDetails"] == 0, "details must start folded"
    driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    text = driver.find_element(By.TAG_NAME, "body").text  # what is visible, the details now included
    for artefact in ("**", "`", "](", "\\|"):
        assert artefact not in text, f"Markdown {artefact!r} shown: …{text[max(text.find(artefact) - 60, 0):][:120]}…"


def test_compare_report_in_chromium(browser: WebDriver, tmp_path: Path):
    from harness.reporting.report import write_report
    from harness.schemas import CompareSummary

    assert EXAMPLES, "no reports/examples/*/summary.json: the browser test has no real report to open"
    summary = EXAMPLES[-1]  # the newest: the most a first screen has had to hold
    write_report(CompareSummary.model_validate_json(summary.read_text()), tmp_path)
    plots = list(tmp_path.glob("*.png"))
    assert plots, "the compare report drew no plots: nothing for the image checks to check"
    check_page(browser, tmp_path / "report.html", images=len(plots))
    assert browser.title.startswith("layerbench: ")
    # the first screen answers: the decision sentence and the delta chart end above the fold of a 1280x900 window
    fold = browser.execute_script(FIRST_SCREEN)
    assert " against bare vLLM " in fold["decision"], fold["decision"]
    assert fold["chart"] is not None, "no lead chart on the page"
    assert fold["decisionBottom"] <= fold["height"] and fold["chartBottom"] <= fold["height"], fold


def test_sample_document_in_chromium(browser: WebDriver, tmp_path: Path):
    from selenium.webdriver.common.by import By

    check_page(browser, write_sample(tmp_path), images=len(IMAGES))
    assert browser.title == TITLE
    # inline() made real markup, not text that looks like it
    assert browser.find_elements(By.CSS_SELECTOR, "td b") and browser.find_elements(By.CSS_SELECTOR, "td code")
