"""What each benchmark hands back: a markdown section, and how it fares against its targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench import stats

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class Target:
    goal: str
    measured: str
    met: bool


@dataclass
class Section:
    title: str
    intro: str
    tables: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def markdown(self) -> str:
        notes = "\n".join(f"- {note}" for note in self.notes)
        parts = [f"#### {self.title}", self.intro, *self.tables, notes]
        return "\n\n".join(part for part in parts if part)


def targets_table(targets: Sequence[Target]) -> str:
    """The targets and how each fares, as the last table of a run."""
    rows = [[t.goal, t.measured, "met" if t.met else "**not met**"] for t in targets]
    return "#### Targets\n\n" + stats.table(["target", "measured", ""], rows) + "\n"
