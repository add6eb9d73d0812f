"""What each benchmark hands back: a markdown section, and how it fares against its targets."""

from __future__ import annotations

from dataclasses import dataclass, field


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
