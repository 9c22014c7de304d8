"""Line charts as inline SVG, drawn on the server: no JavaScript, nothing from a CDN.

The dashboards draw a few lines of at most a day of minutes; SVG text in the
page is all that takes, renders in every browser, and is easy to test.
Hovering a point shows its value (an SVG ``<title>``).
"""

from __future__ import annotations

from datetime import datetime

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from limits.traffic.dashboards import Series

__all__ = ["PALETTE", "line_chart"]

#: Distinguishable colours (Tableau 10), in the order lines are drawn.
PALETTE = (
    "#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 12, 12, 28


def line_chart(
    series: Series, *, label: str, width: int = 760, height: int = 220
) -> SafeString:
    """An SVG chart of ``series``: one coloured line per name, a legend, y from 0 to the max."""
    plot_w, plot_h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    peak = max((max(values) for values in series.lines.values()), default=0) or 1
    step = plot_w / max(1, len(series.minutes) - 1)

    def x(i: int) -> float:
        return _LEFT + i * step

    def y(value: int) -> float:
        return _TOP + plot_h - value / peak * plot_h

    parts = [_axes(series.minutes, peak, width, height, x, y)]
    for colour, (name, values) in zip(
        PALETTE * 10, sorted(series.lines.items()), strict=False
    ):
        parts.append(_line(name, values, series.minutes, colour, x, y))
    svg = format_html(
        '<svg class="sluice-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" '
        'width="100%" preserveAspectRatio="xMinYMin meet">{}</svg>{}',
        label,
        width,
        height,
        mark_safe("".join(parts)),  # built from format_html / escaped pieces only
        _legend(series),
    )
    return svg


def _axes(minutes: list[datetime], peak: int, width: int, height: int, x, y) -> str:
    bottom = height - _BOTTOM
    parts = [
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{width - _RIGHT}" y2="{bottom}" class="axis"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" class="axis"/>',
    ]
    for value in sorted({0, peak // 2, peak}):
        parts.append(
            f'<text x="{_LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:,}</text>'
        )
    ticks = max(1, len(minutes) // 6)
    for i in range(0, len(minutes), ticks):
        parts.append(
            f'<text x="{x(i):.1f}" y="{bottom + 18}" text-anchor="middle">'
            f"{minutes[i]:%H:%M}</text>"
        )
    return "".join(parts)


def _line(
    name: str, values: list[int], minutes: list[datetime], colour: str, x, y
) -> str:
    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
    dots = "".join(
        format_html(
            '<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{} {}: {}</title></circle>',
            f"{x(i):.1f}",
            f"{y(v):.1f}",
            colour,
            name,
            f"{minutes[i]:%H:%M}",
            v,
        )
        for i, v in enumerate(values)
        if v
    )
    return format_html(
        '<polyline fill="none" stroke="{}" stroke-width="2" points="{}"><title>{}</title></polyline>{}',
        colour,
        points,
        name,
        mark_safe(dots),
    )


def _legend(series: Series) -> SafeString:
    items = "".join(
        format_html(
            '<li><span class="swatch" style="background:{}"></span>{} <small>({})</small></li>',
            colour,
            name,
            f"{sum(values):,}",
        )
        for colour, (name, values) in zip(
            PALETTE * 10, sorted(series.lines.items()), strict=False
        )
    )
    return mark_safe(f'<ul class="sluice-legend">{items}</ul>') if items else escape("")
