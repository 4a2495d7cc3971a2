"""Presentation only: one document written as Markdown and as a single self-contained HTML file from the same
data, for every report (compare, capacity, sweep, `make report`'s summary).

Order, the decision first: the headline bullets, the lead chart, the warnings folded under one line that counts
them, the context bullets, the decision tables, the plots, then the details (CPU, observability, long metric and
port lists), which Markdown puts last and HTML folds away (<details>). The title, the headline and the lead chart
are the first screen (1280×900). The HTML
carries its images inline (base64 PNG) and loads nothing from the network, so it can be shared as one file.
Cells may use Markdown's **bold** and `code`: HTML renders them, never shows them; a verdict cell is coloured."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.reporting.caveats import Folded
from harness.reporting.format import markdown_table

Table = tuple[str, str, list[str], list[list[str]]]  # (title, caption, header, rows)

# a cell that is (or starts with) one of these is coloured: the reader's eye goes to the verdicts first
VERDICTS = {"overhead": "bad", "gain": "good", "mixed": "bad", "**mixed**": "bad", "equivalent": "neutral",
            "inconclusive": "neutral",
            "host-bound": "neutral", "unchecked": "neutral", "client-bound": "neutral", "within noise": "neutral",
            "no interval": "neutral", "missing": "neutral", "**no**": "bad", "yes": "good", "**overhead**": "bad",
            "**gain**": "good", "**equivalent**": "neutral", "**inconclusive**": "neutral"}

_STYLE = (
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1180px;"
    "padding:0 1em;color:#1d1d1f}h1{font-size:1.45em;margin:.2em 0 .6em}h2{font-size:1.15em;margin:1.6em 0 .4em;"
    "border-bottom:1px solid #e3e3e3;padding-bottom:.2em}ul.headline{padding-left:1.2em}ul.headline li{margin:.2em 0}"
    "table{border-collapse:collapse;margin:.4em 0 1.2em;font-variant-numeric:tabular-nums}"
    "td,th{border:1px solid #d7d7d7;padding:3px 8px;text-align:right;vertical-align:top}"
    "th{background:#f4f4f6;font-weight:600}td:first-child,th:first-child{text-align:left}"
    "p.caption{color:#555;margin:.2em 0 .4em;max-width:75em}code{background:#f2f2f4;padding:0 3px;border-radius:3px}"
    ".bad{background:#fde2e1;color:#8a1c13}.good{background:#dff3e2;color:#155d27}.neutral{background:#f1f1f1}"
    "figure{display:inline-block;margin:6px;vertical-align:top;width:48%}figure img{width:100%}"
    "figcaption{color:#555;font-size:.9em}details{margin:.6em 0}summary{cursor:pointer;font-weight:600;"
    "font-size:1.05em;margin:.4em 0}figure.lead{display:block;width:560px;margin:.2em 0 .4em 1.2em}"
    "details.warnings summary{font-weight:400;font-size:1em;color:#7a4b00}details.warnings ul{margin:.2em 0}"
)


NOTES_TITLE = "How this was measured"


@dataclass(frozen=True)
class Document:
    """One report's content, in reading order: the title, the headline bullets (without "- "), the decision tables,
    the plots (PNG file names in the output folder), then the details: tables for the specialist, and notes,
    bullets on how it was measured, which a reader needs less than the headline (both after the plots, folded away
    in HTML). The first screen: chart, a PNG shown right after the bullets (not again among the plots); folded,
    the warnings under their count; more, bullets of context after them."""

    title: str
    bullets: Sequence[str]
    tables: Sequence[Table]
    images: Sequence[str] = ()
    details: Sequence[Table] = ()
    notes: Sequence[str] = ()
    chart: str | None = None
    folded: Folded | None = None
    more: Sequence[str] = ()


def write_document(out_dir: Path, doc: Document, name: str = "report") -> Path:
    """<name>.md and <name>.html in out_dir (doc's images are PNG files already in out_dir); returns the .md's
    path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    title, bullets, tables, images, details, notes = (doc.title, doc.bullets, doc.tables, doc.images, doc.details,
                                                      doc.notes)
    md = [f"# {title}", "", *[f"- {b}" for b in bullets], ""]
    if doc.chart:
        md += [f"![{doc.chart}]({doc.chart})", ""]
    if doc.folded or doc.more:
        md += ([f"- **{doc.folded.summary}**", *[f"  - {w}" for w in doc.folded.items]] if doc.folded else [])
        md += [*[f"- {b}" for b in doc.more], ""]
    for t in tables:
        md += _md_table(t)
    if images:
        md += ["## Plots", "", *[f"![{i}]({i})" for i in images], ""]  # the file name: what links and tests find
    if notes:
        md += [f"## {NOTES_TITLE}", "", *[f"- {b}" for b in notes], ""]
    for t in details:
        md += _md_table(t)
    (out_dir / f"{name}.md").write_text("\n".join(md))
    (out_dir / f"{name}.html").write_text(html_document(out_dir, doc))
    return out_dir / f"{name}.md"


def html_document(image_dir: Path, doc: Document) -> str:
    """The document as one HTML page, its images (files in image_dir) inline."""
    title, bullets, tables, images, details, notes = (doc.title, doc.bullets, doc.tables, doc.images, doc.details,
                                                      doc.notes)
    h = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
         f"<meta name='viewport' content='width=device-width,initial-scale=1'><style>{_STYLE}</style></head><body>",
         f"<h1>{html.escape(title)}</h1>", "<ul class='headline'>", *[f"<li>{inline(b)}</li>" for b in bullets],
         "</ul>"]
    if doc.chart:
        h.append(f"<figure class='lead'><img alt='{html.escape(_alt(doc.chart))}' "
                 f"src='{_data_uri(image_dir / doc.chart)}'></figure>")
    if doc.folded:
        h.append(f"<details class='warnings'><summary>⚠ {inline(doc.folded.summary)}</summary><ul>"
                 + "".join(f"<li>{inline(w)}</li>" for w in doc.folded.items) + "</ul></details>")
    if doc.more:
        h += ["<ul class='headline'>", *[f"<li>{inline(b)}</li>" for b in doc.more], "</ul>"]
    for t in tables:
        h.append(_html_table(t))
    if images:
        h.append("<h2>Plots</h2>")
        h += [f"<figure><img alt='{html.escape(_alt(i))}' src='{_data_uri(image_dir / i)}'>"
              f"<figcaption>{html.escape(_alt(i))}</figcaption></figure>" for i in images]
    if notes:
        h.append(f"<details><summary>{NOTES_TITLE}</summary><ul>" + "".join(f"<li>{inline(b)}</li>" for b in notes)
                 + "</ul></details>")
    for t in details:
        h.append(f"<details><summary>{html.escape(t[0])}</summary>{_html_table(t, heading=False)}</details>")
    h.append("</body></html>")
    return "\n".join(h)


def _md_table(t: Table) -> list[str]:
    name, caption, header, rows = t
    return [f"## {name}", "", *([caption, ""] if caption else []), markdown_table(header, rows), ""]


def _html_table(t: Table, heading: bool = True) -> str:
    name, caption, header, rows = t
    out = [f"<h2>{html.escape(name)}</h2>" if heading else "",
           f"<p class='caption'>{inline(caption)}</p>" if caption else "",
           "<table><thead><tr>" + "".join(f"<th>{inline(c)}</th>" for c in header) + "</tr></thead><tbody>"]
    out += ["<tr>" + "".join(_td(c) for c in r) + "</tr>" for r in rows]
    out.append("</tbody></table>")
    return "".join(out)


def _td(cell: str) -> str:
    text = cell.strip()
    cls = next((c for word, c in VERDICTS.items() if text == word or text.startswith(word + " ")
                or text.startswith(word + ":") or text.startswith(word + ",")), None)
    return f"<td class='{cls}'>{inline(cell)}</td>" if cls else f"<td>{inline(cell)}</td>"


_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")


def inline(text: str) -> str:
    """Markdown's **bold** and `code` as HTML, everything else escaped; a table's escaped \\| as |."""
    text = text.replace("\\|", "|")
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        # bold may hold code (a diagnosis's `make sweep ...`), never the reverse
        out.append(f"<b>{inline(m[1])}</b>" if m[1] is not None else f"<code>{html.escape(m[2])}</code>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _alt(name: str) -> str:
    """A plot's file name as words: `ttft_p95.png` -> `ttft p95`."""
    return Path(name).stem.replace("_", " ")


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
