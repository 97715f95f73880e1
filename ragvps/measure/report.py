"""The evaluation as one self-contained HTML page: the metrics table, and the recall@k curves of every mode
on one chart (inline SVG)."""

from __future__ import annotations

from html import escape

from ragvps.measure.evaluate import EvalReport

COLOURS = {"vector": "#1f77b4", "keyword": "#ff7f0e", "hybrid": "#2ca02c"}
W, H, PAD, LEGEND = 640, 320, 40, 110


def curves_svg(curves: dict[str, list[float]]) -> str:
    """recall@k for k = 1..depth, every mode on one chart (so they compare at a glance), with a legend."""
    n = max([2, *(len(c) for c in curves.values())])

    def x(k: int) -> float:
        return PAD + (k - 1) * (W - 2 * PAD - LEGEND) / (n - 1)

    def y(r: float) -> float:
        return H - PAD - r * (H - 2 * PAD)

    parts = [
        f'<svg class="curve" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="recall@k curves of {escape(", ".join(curves))}">',
        f'<text x="{(W - LEGEND) / 2}" y="18" text-anchor="middle" font-weight="bold">recall@k</text>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{PAD}" x2="{W - PAD - LEGEND}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{PAD - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:g}</text>'
        )
    for k in sorted({1, 5, 10, 20, 30, n}):
        parts.append(f'<text x="{x(k):.1f}" y="{H - PAD + 16}" text-anchor="middle" font-size="11">{k}</text>')
    parts.append(f'<text x="{(W - LEGEND) / 2}" y="{H - 6}" text-anchor="middle" font-size="11">k (documents)</text>')
    for i, (mode, values) in enumerate(curves.items()):
        colour = COLOURS.get(mode, "#333")
        points = " ".join(f"{x(k):.1f},{y(r):.1f}" for k, r in enumerate(values, start=1))
        dash = ' stroke-dasharray="6 3"' if i % 2 else ""
        parts.append(
            f'<polyline data-mode="{escape(mode)}" fill="none" stroke="{colour}" stroke-width="2.5"{dash} '
            f'points="{points}"/>'
        )
        ly = PAD + 8 + 20 * i
        lx = W - LEGEND - PAD + 20
        parts.append(
            f'<line x1="{lx}" x2="{lx + 24}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2.5"{dash}/>'
            f'<text class="legend" x="{lx + 30}" y="{ly + 4}" font-size="12">{escape(mode)} '
            f"{values[-1] if values else 0:.2f}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def render(report: EvalReport, title: str = "ragvps eval") -> str:
    """The whole page: no scripts, no stylesheets or fonts from the network."""
    k = report.k
    rows = "\n".join(
        f"<tr><td>{escape(mode)}</td><td>{s.recall:.3f}</td><td>{s.mrr:.3f}</td><td>{s.ndcg:.3f}</td>"
        f"<td>{s.no_hit}</td></tr>"
        for mode, s in report.modes.items()
    )
    charts = curves_svg({mode: s.curve for mode, s in report.modes.items()})
    missed = [q for q in report.per_question if all(r is None for r in q["first_rank"].values())]
    missed_rows = "\n".join(
        f"<li>{escape(q['question'])} <small>(wanted: {escape(', '.join(q['relevant']))})</small></li>"
        for q in missed[:50]
    )
    warnings = "".join(f"<li>{escape(w)}</li>" for w in report.warnings)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }} .charts {{ display: flex; flex-wrap: wrap; gap: 1em; }}
</style></head><body>
<h1>{escape(title)}</h1>
<p>{report.questions} questions from {escape(report.source)}; documents ranked by their best chunk among the
top {report.depth} chunks of each mode.</p>
{f"<ul class='warnings'>{warnings}</ul>" if warnings else ""}
<table><thead><tr><th>mode</th><th>recall@{k}</th><th>MRR@{k}</th><th>nDCG@{k}</th>
<th>no hit in top {report.depth}</th></tr></thead>
<tbody>
{rows}
</tbody></table>
<h2>recall@k, k = 1..{report.depth}</h2>
<div class="charts">
{charts}
</div>
<h2>Questions no mode answered ({len(missed)})</h2>
<ul>{missed_rows}</ul>
</body></html>
"""
