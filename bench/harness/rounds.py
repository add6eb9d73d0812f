"""Interleaved rounds and their statistics.

The machines these run on are shared, and other work comes and goes within seconds: every
variant is measured once per round, in an order that rotates, and judged by its ratio to a
baseline measured in the same round (median and range over the rounds), never by absolute
figures from different moments.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from bench.harness.report import progress

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Sequence

T = TypeVar("T")
K = TypeVar("K", bound="Hashable")
R = TypeVar("R")


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


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``Spread.of(values).show(fmt)``, or a dash for no values."""
    return Spread.of(values).show(fmt) if values else "—"


def ratios(values: Sequence[float], baselines: Sequence[float]) -> Spread:
    """Ratios of each measurement to the baseline measured in the same round."""
    return Spread.of([value / base for value, base in zip(values, baselines, strict=True)])


def minus(values: Sequence[float], baselines: Sequence[float]) -> list[float]:
    """Each measurement less the baseline measured in the same round."""
    return [value - base for value, base in zip(values, baselines, strict=True)]


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def rotated(items: Sequence[T], by: int) -> list[T]:
    """``items`` from index ``by`` (modulo their number) on, wrapping round: round ``by`` runs
    them in this order, so that each takes its turn at going first."""
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def interleaved(
    cells: Sequence[K], rounds: int, measure: Callable[[K], R], *, label: str = "", step: int = 1
) -> dict[K, list[R]]:
    """``measure`` every cell once per round, round ``r`` in the order rotated by ``r × step``;
    each cell's results by round."""
    found: dict[K, list[R]] = {cell: [] for cell in cells}
    for number in range(rounds):
        if label:
            progress(f"{label}, round {number + 1} of {rounds}…")
        for cell in rotated(cells, number * step):
            found[cell].append(measure(cell))
    return found


def sandwich(base: T, others: Sequence[T], rounds: int) -> list[T]:
    """base, A, base, B, base, … over ``rounds`` rounds, the others in a rotating order: every
    other cell runs between two cells of the baseline."""
    order = [base]
    for number in range(rounds):
        for other in rotated(others, number):
            order += [other, base]
    return order


def neighbour_ratios(
    ran: Sequence[tuple[K, R]], base: K, metric: Callable[[R], float]
) -> dict[K, list[float]]:
    """Over a ``sandwich`` that ran: each cell's ``metric`` over the mean of the baseline cells
    either side of it; a baseline cell's over those either side of its neighbours (the noise
    floor: the baseline against itself)."""
    found: dict[K, list[float]] = {}
    for index, (key, result) in enumerate(ran):
        step = 2 if key == base else 1
        if index - step < 0 or index + step >= len(ran):
            continue
        mean = (metric(ran[index - step][1]) + metric(ran[index + step][1])) / 2
        if mean > 0:
            found.setdefault(key, []).append(metric(result) / mean)
    return found
