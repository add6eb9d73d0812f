"""Line charts of counter samples as inline SVG, drawn on the server.

Drawn on the server, so that the dashboard needs no external resource nor JavaScript library:
pure functions, every text escaped by ``format_html`` (counter names are anyone's text), colours
from CSS (``currentColor``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from django.utils.html import format_html
from django.utils.safestring import SafeString

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

#: Most divisions of the value axis; fewer when the numbers are small.
MAX_DIVISIONS: Final = 5

#: Room around the plot for the value labels (left) and the time labels (bottom), which the
#: dashboard's stylesheet draws larger, in these units, the narrower the chart is on the screen.
LEFT: Final = 44
RIGHT: Final = 10
TOP: Final = 10
BOTTOM: Final = 30


@dataclass(frozen=True)
class Scale:
    low: int
    high: int
    step: int

    @property
    def ticks(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


def scale(values: Iterable[int]) -> Scale:
    """The value axis: from 0 (or below, for negative samples) to a round number above the top,
    in at most ``MAX_DIVISIONS`` steps of 1, 2 or 5 times a power of ten."""
    present = list(values)
    top = max([0, *present])
    bottom = min([0, *present])
    if top == bottom:
        return Scale(0, 1, 1)
    step = 1
    while True:
        for factor in (1, 2, 5):
            candidate = step * factor
            divisions = math.ceil(top / candidate) + math.ceil(-bottom / candidate)
            if divisions <= MAX_DIVISIONS:
                return Scale(
                    -math.ceil(-bottom / candidate) * candidate,
                    math.ceil(top / candidate) * candidate,
                    candidate,
                )
        step *= 10


def compact(value: int) -> str:
    """1234 → "1.2k", 5000000 → "5M": short enough for the value axis."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(value) >= size:
            shown = f"{value / size:.1f}".removesuffix(".0")
            return f"{shown}{suffix}"
    return str(value)


def runs(values: Sequence[int | None]) -> list[list[tuple[int, int]]]:
    """The stretches of consecutive samples, as (index, value); a missing sample ends one."""
    found: list[list[tuple[int, int]]] = []
    current: list[tuple[int, int]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                found.append(current)
            current = []
        else:
            current.append((index, value))
    if current:
        found.append(current)
    return found


def _join(parts: Iterable[SafeString]) -> SafeString:
    # Each part comes from format_html, so the concatenation is as safe as its parts.
    return SafeString("".join(parts))


def _number(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def line_chart(
    starts: Sequence[int],
    values: Sequence[int | None],
    *,
    title: str,
    label: Callable[[int], str],
    width: int = 640,
    height: int = 180,
    empty: str = "No samples yet",
) -> SafeString:
    """One series over evenly spaced slices; ``values[i]`` belongs to the slice starting at
    ``starts[i]`` (Unix seconds) and is None where the slice has no sample.

    ``label`` turns a slice start into the text of the time axis and of each point's tooltip.
    Each stretch of consecutive samples is a line over a shaded area, and each sample a point,
    so that a lone sample between gaps is still seen.
    """
    if len(starts) != len(values):
        msg = f"line_chart() needs as many starts as values, not {len(starts)} and {len(values)}."
        raise ValueError(msg)
    right, bottom = width - RIGHT, height - BOTTOM
    axis = scale(value for value in values if value is not None)
    span = max(len(values) - 1, 1)

    def x(index: int) -> str:
        return _number(LEFT + (right - LEFT) * index / span)

    def y(value: int) -> str:
        return _number(bottom - (value - axis.low) / (axis.high - axis.low) * (bottom - TOP))

    parts = [
        format_html(
            '<svg class="whos-online-chart" xmlns="http://www.w3.org/2000/svg" '
            'viewBox="0 0 {} {}" role="img" aria-label="{}"><title>{}</title>',
            width,
            height,
            title,
            title,
        )
    ]
    for tick in axis.ticks:
        parts.append(
            format_html(
                '<line class="grid{}" x1="{}" x2="{}" y1="{}" y2="{}" stroke="#8884" />'
                '<text class="value-label" x="{}" y="{}" text-anchor="end" '
                'dominant-baseline="middle">{}</text>',
                " zero" if tick == 0 else "",
                LEFT,
                right,
                y(tick),
                y(tick),
                LEFT - 6,
                y(tick),
                compact(tick),
            )
        )
    if starts:
        ends = sorted({0, len(starts) // 2, len(starts) - 1})
        anchors = {0: "start", len(starts) - 1: "end"}
        for index in ends:
            parts.append(
                format_html(
                    '<text class="time-label" x="{}" y="{}" text-anchor="{}">{}</text>',
                    x(index),
                    height - 4,
                    anchors.get(index, "middle"),
                    label(starts[index]),
                )
            )
    stretches = runs(values)
    base = y(min(max(0, axis.low), axis.high))
    for stretch in stretches:
        line = " ".join(f"{x(index)},{y(value)}" for index, value in stretch)
        if len(stretch) > 1:
            first, last = x(stretch[0][0]), x(stretch[-1][0])
            parts.append(
                format_html(
                    '<polygon class="area" points="{},{} {} {},{}" fill="currentColor" '
                    'fill-opacity="0.12" />'
                    '<polyline class="line" points="{}" fill="none" stroke="currentColor" '
                    'stroke-width="2" stroke-linejoin="round" />',
                    first,
                    base,
                    line,
                    last,
                    base,
                    line,
                )
            )
    for stretch in stretches:
        for index, value in stretch:
            parts.append(
                format_html(
                    '<circle class="point" cx="{}" cy="{}" r="2" fill="currentColor">'
                    "<title>{}: {}</title></circle>",
                    x(index),
                    y(value),
                    label(starts[index]),
                    value,
                )
            )
    if not stretches:
        parts.append(
            format_html(
                '<text class="empty" x="{}" y="{}" text-anchor="middle">{}</text>',
                _number((LEFT + right) / 2),
                _number((TOP + bottom) / 2),
                empty,
            )
        )
    parts.append(SafeString("</svg>"))
    return _join(parts)
