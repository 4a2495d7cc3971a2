"""harness/reporting/document.py without a browser: report.md and report.html say the same thing from the same tables,
the
HTML is one self-contained file (images inline) that shows no Markdown, and verdict cells are coloured.
tests/integration/test_report_browser.py opens write_sample's document in Chromium."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from harness.reporting.document import Document, Table, html_document, inline, write_document

TITLE = "layerbench: ray vs vllm <sample>"
BULLETS = ["**overhead** at c=64: the `proxy` adds 3 ms", "plain & simple"]
TABLES: list[Table] = [
    ("Decision", "Δ is **stack − baseline**; `p` from a t-test, x < y",
     ["level", "Δ tok/s", "verdict"],
     [["c=1", "**-3.1%**", "overhead"], ["c=4", "+0.2%", "within noise"],
      ["c=16", "+4.0%", "gain (p<0.05)"], ["c=64", "`n/a`", "a \\| b"]]),
    ("Latency", "", ["level", "TTFT p95 ms"], [["c=1", "12.5"], ["c=64", "**80.1**"]]),
]
DETAILS: list[Table] = [("CPU", "cores from `/proc`", ["process", "cores"], [["proxy", "1.5"], ["engine", "3.9"]])]
IMAGES = ["ttft_p95.png", "throughput.png"]


def write_sample(out_dir: Path) -> Path:
    """The sample document (two tiny PNGs, a folded details table) written into out_dir; returns report.html."""
    from matplotlib.image import imsave  # not pyplot: a PNG file is all that is needed

    out_dir.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(IMAGES):
        imsave(out_dir / name, np.full((3, 4 + i, 3), 0.2 * (i + 1)))
    write_document(out_dir, Document(TITLE, BULLETS, TABLES, IMAGES, DETAILS))
    return out_dir / "report.html"


def shown(cell: str) -> str:
    """A cell as a reader should see it: no Markdown markers, the table's escaped pipe as a pipe."""
    return cell.replace("**", "").replace("`", "").replace("\\|", "|")


@dataclass
class HtmlTable:
    folded: bool  # inside <details>
    rows: list[list[tuple[str | None, str]]] = field(default_factory=list)  # (class, text) per cell, header first

    def texts(self) -> list[list[str]]:
        return [[text for _, text in row] for row in self.rows]


class Page(HTMLParser):
    """What a browser would show of report.html, read without one: the body's text, tables, images, details."""

    def __init__(self, doc: str):
        super().__init__()  # convert_charrefs: text arrives unescaped, as displayed
        self.text: list[str] = []
        self.tables: list[HtmlTable] = []
        self.images: list[str] = []
        self.details: list[dict[str, str | None]] = []
        self.summaries: list[str] = []
        self._head = self._summary = False
        self._depth = 0  # open <details>
        self._cell: list | None = None
        self.feed(doc)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "head":
            self._head = True
        elif tag == "details":
            self._depth += 1
            self.details.append(a)
        elif tag == "summary":
            self._summary = True
            self.summaries.append("")
        elif tag == "table":
            self.tables.append(HtmlTable(folded=self._depth > 0))
        elif tag == "tr":
            self.tables[-1].rows.append([])
        elif tag in ("td", "th"):
            self._cell = [a.get("class"), ""]
        elif tag == "img":
            self.images.append(a["src"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "head":
            self._head = False
        elif tag == "details":
            self._depth -= 1
        elif tag == "summary":
            self._summary = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1].rows[-1].append((self._cell[0], self._cell[1]))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._head:  # <title> and <style>: not body text
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell[1] += data
        if self._summary:
            self.summaries[-1] += data

    @property
    def body_text(self) -> str:
        return "".join(self.text)


@pytest.fixture
def sample(tmp_path: Path) -> tuple[str, Page, Path]:
    html_path = write_sample(tmp_path)
    return (tmp_path / "report.md").read_text(), Page(html_path.read_text()), tmp_path


def test_markdown_and_html_show_the_same_tables(sample):
    md, page, _ = sample
    html_tables = page.tables
    assert len(html_tables) == len(TABLES) + len(DETAILS)
    for (title, caption, header, rows), got in zip([*TABLES, *DETAILS], html_tables, strict=True):
        assert f"## {title}" in md and title in page.body_text
        if caption:
            assert caption in md and shown(caption) in page.body_text
        for row in [header, *rows]:
            assert "| " + " | ".join(row) + " |" in md.splitlines()
        assert got.texts() == [[shown(c) for c in row] for row in [header, *rows]]


def test_images_are_inline_in_html_and_linked_in_markdown(sample):
    md, page, out = sample
    assert len(page.images) == len(IMAGES)
    for name, src in zip(IMAGES, page.images, strict=True):
        assert f"]({name})" in md  # relative: report.md sits next to its PNGs
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix), src[:60]
        assert base64.b64decode(src[len(prefix):]) == (out / name).read_bytes()
    html = (out / "report.html").read_text()
    assert not any(name in html for name in IMAGES), "the HTML links a PNG file: it is no longer one file"
    assert "http://" not in html and "https://" not in html


def test_details_come_after_the_plots_in_markdown_and_are_folded_in_html(sample):
    md, page, _ = sample
    assert md.index(f"## {TABLES[-1][0]}") < md.index("## Plots") < md.index(f"## {DETAILS[0][0]}")
    assert [t.folded for t in page.tables] == [False] * len(TABLES) + [True] * len(DETAILS)
    assert page.summaries == [d[0] for d in DETAILS]
    assert all("open" not in d for d in page.details), "details must start folded"


@pytest.mark.parametrize(("text", "html"), [
    ("**x**", "<b>x</b>"),
    ("`x`", "<code>x</code>"),
    ("a **b** and `c` d", "a <b>b</b> and <code>c</code> d"),
    ("x < y & z", "x &lt; y &amp; z"),
    ("`<tag>` **<b>**", "<code>&lt;tag&gt;</code> <b>&lt;b&gt;</b>"),
    ("a \\| b", "a | b"),
    ("**diagnosis: …; try `make sweep OPT=a=1,2`**", "<b>diagnosis: …; try <code>make sweep OPT=a=1,2</code></b>"),
])
def test_inline_converts_bold_and_code_and_escapes(text: str, html: str):
    assert inline(text) == html


@pytest.mark.parametrize(("cell", "cls"), [
    ("overhead", "bad"), ("overhead: +3.1%", "bad"), ("gain", "good"), ("gain (p<0.05)", "good"),
    ("within noise", "neutral"), ("12.5", None), ("overheads", None),  # only the verdict word, not a prefix of one
])
def test_verdict_cells_are_coloured(tmp_path: Path, cell: str, cls: str | None):
    page = Page(html_document(tmp_path, Document("t", [], [("T", "", ["level", "verdict"], [["c=1", cell]])])))
    assert page.tables[0].rows[1] == [(None, "c=1"), (cls, cell)]


def test_html_body_shows_no_markdown(sample):
    _, page, _ = sample
    text = page.body_text
    for artefact in ("**", "`", "\\|"):
        assert artefact not in text, f"{artefact!r} left in the HTML's text"
    assert "<sample>" in text  # escaped in the source, shown as typed
