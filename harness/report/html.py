"""A self-contained HTML report page: sortable tables, embedded PNG plots, provenance; no network needed."""

from __future__ import annotations

import base64
import html
from typing import Any

from attnbench.report.plot import Plot
from attnbench.report.table import Table

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1400px; color: #222; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ccc; }
nav a { margin-right: 0.8rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border-bottom: 1px solid #e2e2e2; padding: 0.25rem 0.55rem; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; }
td.key, th.key { text-align: left; }
td.num:last-child { white-space: normal; min-width: 8rem; }
td.best { background: #eaf6ea; }
p.note { font-size: 0.8rem; color: #555; max-width: 1100px; }
figure { display: inline-block; margin: 0.5rem 1rem 1.5rem 0; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #444; }
"""

SORT_SCRIPT = """
(function () {
  function key(td) {
    const text = td.textContent.trim();
    if (text === "" || text === "\\u2014") return null;
    const m = text.replace(/,/g, "").match(/^[-+]?(\\d+\\.?\\d*|\\.\\d+)(e[-+]?\\d+)?/i);
    return {num: m ? parseFloat(m[0]) : null, text: text};
  }
  function compare(a, b, asc) {
    if (a === null || b === null) return (a === null) - (b === null);  // missing always last
    let r;
    if (a.num !== null && b.num !== null) r = a.num - b.num;
    else if (a.num !== null || b.num !== null) r = a.num !== null ? -1 : 1;
    else r = a.text.localeCompare(b.text, undefined, {numeric: true});
    return asc ? r : -r;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    const headers = table.tHead.rows[0].cells;
    Array.from(headers).forEach(function (th, col) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        const asc = th.getAttribute("aria-sort") !== "ascending";
        Array.from(headers).forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", asc ? "ascending" : "descending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) { return compare(key(a.cells[col]), key(b.cells[col]), asc); });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def table_html(table: Table) -> str:
    """One sortable <table>, best cells bold, with its notes below."""
    head = "".join(
        f'<th class="{"key" if i < table.key_columns else "num"}">{_e(c)}</th>'
        for i, c in enumerate(table.text.columns)
    )
    rows = []
    for r, values in enumerate(table.text.itertuples(index=False)):
        cells = []
        for c, value in enumerate(values):
            classes = ["key" if c < table.key_columns else "num"] + (["best"] if table.best.iat[r, c] else [])
            inner = f"<strong>{_e(value)}</strong>" if table.best.iat[r, c] else _e(value)
            cells.append(f'<td class="{" ".join(classes)}">{inner}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in table.notes)
    return (
        f'<h2 id="{_e(table.name)}">{_e(table.title)}</h2>\n<div class="scroll">'
        f'<table class="sortable" id="table-{_e(table.name)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>{notes}"
        f'<p class="note">Files: tables/{_e(table.name)}.csv, .md, .tex</p>'
    )


def plot_html(plot: Plot) -> str:
    """A figure with the PNG embedded as base64 and a link to the SVG beside the page."""
    data = base64.b64encode(plot.png.read_bytes()).decode("ascii")
    return (
        f'<figure id="plot-{_e(plot.name)}"><img alt="{_e(plot.title)}" src="data:image/png;base64,{data}">'
        f'<figcaption>{_e(plot.title)} (<a href="plots/{_e(plot.svg.name)}">SVG</a>)</figcaption></figure>'
    )


def provenance_value(key: str, value: Any) -> str:
    """One provenance entry as short text (lists joined, cell counts and reasons spelled out)."""
    if key == "reasons":
        return "; ".join(f"{r['count']} × {r['status']}: {r['reason']}" for r in value) or "none"
    if key == "cells":
        return ", ".join(f"{n} {status}" for status, n in value.items())
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    if value is None:
        return "—"
    if key == "not_run_cell_ids" and len(value) > 20:
        return ", ".join(value[:20]) + f", … ({len(value) - 20} more)"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    return str(value)


def provenance_html(provenance: list[dict[str, Any]]) -> str:
    """One table per run: where, when and with what the results were produced, and the cell counts."""
    parts = []
    for run in provenance:
        rows = "".join(
            f'<tr><th class="key">{_e(key)}</th><td class="key">{_e(provenance_value(key, value))}</td></tr>'
            for key, value in run.items()
        )
        parts.append(f'<h3>Run {_e(run["run"])}</h3><table class="provenance">{rows}</table>')
    return '<h2 id="provenance">Provenance</h2>' + "".join(parts)


def cell_counts(provenance: list[dict[str, Any]]) -> str:
    """'24 result files: 24 ok, ...; 9 of them unchosen sweep trials (...)', summed over runs."""
    totals: dict[str, int] = {}
    for run in provenance:
        for status, n in run["cells"].items():
            totals[status] = totals.get(status, 0) + n
    files = totals.pop("result files", 0)
    unchosen = totals.pop("unchosen sweep trials", 0)
    text = f"{files} result files: " + ", ".join(f"{n} {status}" for status, n in totals.items())
    if unchosen:
        text += (
            f"; {unchosen} of them are sweep trials not chosen on validation, shown only in the sweep table "
            "(every other table shows each label's chosen trial)"
        )
    return text


def render_page(
    title: str,
    tables: list[Table],
    plots: list[Plot],
    provenance: list[dict[str, Any]],
    summary_lines: list[str] | None = None,
) -> str:
    """The whole page as one string: inline CSS and JS, images as data URIs."""
    nav = " ".join(f'<a href="#{_e(t.name)}">{_e(t.title)}</a>' for t in tables)
    nav += ' <a href="#plots">Plots</a> <a href="#provenance">Provenance</a>'
    summary = cell_counts(provenance)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{_e(title)}</h1>",
            f"<p>Built from stored cell results only (nothing re-run). Cells: {_e(summary)}. "
            "Click a column header to sort; missing values (—) stay last.</p>",
            *(
                [f'<ul class="summary">{"".join(f"<li>{_e(s)}</li>" for s in summary_lines)}</ul>']
                if summary_lines
                else []
            ),
            f"<nav>{nav}</nav>",
            *[table_html(t) for t in tables],
            '<h2 id="plots">Plots</h2>',
            *([plot_html(p) for p in plots] or ["<p>No plots: no plottable results.</p>"]),
            provenance_html(provenance),
            f"<script>{SORT_SCRIPT}</script>",
            "</body></html>",
            "",
        ]
    )
