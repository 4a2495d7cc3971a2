"""Presentation only: one document (bullets, tables, images) written as Markdown and as HTML from the same data,
for the reports of `capacity` and `sweep`. A table is (title, caption, header, rows)."""

from __future__ import annotations

import html
from pathlib import Path

from harness.output import markdown_table

Table = tuple[str, str, list[str], list[list[str]]]


def write_document(out_dir: Path, title: str, bullets: list[str], tables: list[Table], images: list[str]) -> Path:
    """report.md and report.html in out_dir; bullets may use **bold**; returns report.md's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", "", *[f"- {b}" for b in bullets], ""]
    for name, caption, header, rows in tables:
        md += [f"## {name}", "", *([caption, ""] if caption else []), markdown_table(header, rows), ""]
    if images:
        md += ["## Plots", "", *[f"![{i}]({i})" for i in images], ""]
    (out_dir / "report.md").write_text("\n".join(md))
    h = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
         "<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
         "margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}"
         "td:first-child{text-align:left}img{max-width:48%;margin:4px}</style>",
         f"<h1>{html.escape(title)}</h1><ul>", *[f"<li>{_bold(b)}</li>" for b in bullets], "</ul>"]
    for name, caption, header, rows in tables:
        h.append(f"<h2>{html.escape(name)}</h2>" + (f"<p>{html.escape(caption)}</p>" if caption else ""))
        h.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in header) + "</tr>")
        h += ["<tr>" + "".join(f"<td>{_bold(c)}</td>" for c in r) + "</tr>" for r in rows]
        h.append("</table>")
    if images:
        h += ["<h2>Plots</h2>", *[f"<img src='{i}' alt='{i}'>" for i in images]]
    (out_dir / "report.html").write_text("\n".join(h))
    return out_dir / "report.md"


def _bold(text: str) -> str:
    """Markdown's **x** as <b>x</b>, everything else escaped."""
    parts = html.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
