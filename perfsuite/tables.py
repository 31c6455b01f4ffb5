"""The one table model of perfsuite's output: a frozen Table, rendered for a terminal, as Markdown (the
reports, ``$GITHUB_STEP_SUMMARY``) through tabulate. Callers build rows; nothing else pads or pipes.

A root module: it imports no stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tabulate import tabulate

LEFT, RIGHT = "left", "right"


@dataclass(frozen=True)
class Table:
    """headers and rows of cells (shown as ``str``); ``alignments`` per column, LEFT or RIGHT (default:
    every column LEFT)."""

    headers: tuple[str, ...]
    rows: tuple[tuple, ...]
    alignments: tuple[str, ...] = ()

    def __post_init__(self):
        width = len(self.headers)
        for index, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"Table row {index}: expected {width} cells ({', '.join(self.headers)}), "
                                 f"found {len(row)}: {row!r}")
        if self.alignments and (len(self.alignments) != width or set(self.alignments) - {LEFT, RIGHT}):
            raise ValueError(f"Table alignments: expected {width} of {LEFT!r}/{RIGHT!r}, found {self.alignments!r}")

    @classmethod
    def of(cls, headers: Sequence[str], rows: Sequence[Sequence], alignments: Sequence[str] = ()) -> Table:
        return cls(tuple(headers), tuple(tuple(row) for row in rows), tuple(alignments))

    def _cells(self, escape=str):
        return [[escape(str(cell)) for cell in row] for row in self.rows]

    def _align(self) -> list[str]:
        return list(self.alignments or (LEFT,) * len(self.headers))

    def terminal(self) -> list[str]:
        """Plain columns separated by two spaces, a dashed rule under the headers; one string per line."""
        text = tabulate(self._cells(), headers=list(self.headers), tablefmt="simple", colalign=self._align(),
                        disable_numparse=True)
        return [line.rstrip() for line in text.splitlines()]

    def markdown(self) -> str:
        """A GitHub-flavoured Markdown table ('|' in cells escaped)."""
        return tabulate(self._cells(lambda text: text.replace("|", "\\|")), headers=list(self.headers),
                        tablefmt="github", colalign=self._align(), disable_numparse=True)


def step_summary(title: str, tables: Sequence[tuple[str, Table]], notes: Sequence[str]) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY``: a heading, each (subtitle, table), then the notes as a list."""
    lines = [f"### {title}", ""]
    for subtitle, table in tables:
        lines += ([f"#### {subtitle}", ""] if subtitle else []) + [table.markdown(), ""]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines).rstrip() + "\n"
