"""Medians with their range, and ratios to a baseline, as the tables print them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

T = TypeVar("T")


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements, and the smallest and largest of them."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no measurements")
        return cls(statistics.median(values), min(values), max(values))

    def show(self, fmt: Callable[[float], str]) -> str:
        return f"{fmt(self.median)} ({fmt(self.low)}–{fmt(self.high)})"


def ratios(values: Sequence[float], baselines: Sequence[float]) -> Spread:
    """Ratios of each measurement to the baseline measured in the same repetition."""
    return Spread.of([value / base for value, base in zip(values, baselines, strict=True)])


def rotated(items: Sequence[T], by: int) -> list[T]:
    """``items`` from index ``by`` (modulo their number) on, wrapping round: repetition ``by``
    runs them in this order, so that each takes its turn at going first."""
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def ratio(value: float) -> str:
    return f"{value:.2f}"


def number(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, ready to paste into the README."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
