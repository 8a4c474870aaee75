"""Every Markdown table of the README and docs/ (generated results included) renders as written: each
row has as many cells as its header. A `|` inside a cell, even inside a code span, splits the cell on
GitHub, so a norm is written `‖x‖` and a difference `abs diff`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SEPARATOR = re.compile(r"(?<!\\)\|")


def _ragged_rows(text: str) -> list[tuple[int, int, int]]:
    """``(line, header cells, row cells)`` of every table row whose width differs from its header's."""
    out, header, fenced = [], None, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            header = None
            continue
        width = len(_SEPARATOR.findall(line))
        if header is None:
            header = width
        elif width != header:
            out.append((number, header - 1, width - 1))
    return out


def test_the_check_finds_a_pipe_inside_a_cell() -> None:
    assert _ragged_rows("| a | b |\n|---|---|\n| `|x|` | 1 |\n") == [(3, 2, 4)]
    assert _ragged_rows("| a | b |\n|---|---|\n| `‖x‖` | 1 |\n```\n| not | a | table |\n```\n") == []


def test_every_table_row_is_as_wide_as_its_header() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    ragged = {str(path.relative_to(ROOT)): rows for path in files
              if (rows := _ragged_rows(path.read_text(encoding="utf-8")))}
    assert ragged == {}, f"table rows of another width than their header (line, header, row): {ragged}"
