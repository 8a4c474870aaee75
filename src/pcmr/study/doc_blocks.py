"""Numbers in prose that cannot drift from the results they quote.

A Markdown file marks each quoted result with an HTML comment (invisible when rendered) and its
generated text up to the closing comment::

    <!-- results table="docs/uncertainty_results/recipes.md" heading="Relevance: exact" -->
    | recipe | ... |
    <!-- /results -->

    rsum <!-- results value="docs/uncertainty_results/results.csv" where="recipe=pcme,variant=exact,similarity=match_prob,rerank=nns,relevance=exact" metric="rsum" -->172.2<!-- /results -->

    <!-- results line="docs/uncertainty_results/claims.md" prefix="Totals:" -->Totals: ...<!-- /results -->

- ``table``: the Markdown table under ``heading`` (a ``#`` heading's text) of a committed table file,
  or its first table without ``heading``.
- ``value``: the mean over the ``results.csv`` rows matching ``where`` (``key=value`` pairs, comma
  separated) of ``metric``, with ``digits`` decimals (default 1); ``stat="range"`` gives
  ``min-max`` instead, ``stat="count"`` the number of rows, ``stat="runs"`` the number of distinct
  ``run`` values among them.
- ``line``: the first line of a file that starts with ``prefix``.
- ``cell``: one cell of a Markdown table of a committed file (e.g. ``claims.md``): the row whose cells
  match ``row`` (``column=value`` pairs separated by ``;``; the first table row that matches) and the
  cell of ``column`` (``heading`` narrows the search to the table under that heading).
- ``answer``: a claim's verdict in ``claims.md`` as a plain answer, for a question the prose asks: the
  row of claim ``claim`` gives its verdict (after Holm's correction where the table has it), which picks
  the answer: ``holds`` -> "Yes: " + the block's ``holds`` phrase, ``reversed`` -> "No, the opposite: " +
  its ``reversed`` phrase, ``equal`` -> "No: " + its ``equal`` phrase, any other verdict says that the
  claim was not decided or not judged and why; then the verdict, the mean difference with its interval,
  the seeds and each cell's verdict, as the table gives them.
- ``papers``: one table of claims per paper over several studies: the ``by_paper.md`` files named (comma
  separated), their counts per paper (judged, decided, inconclusive, other, not judged) added up, with
  the studies each paper's claims come from, in the order the papers first appear.
- ``rejudge``: a committed results folder re-judged under the rules of ``study`` (a study file), labelled
  exploratory (:func:`pcmr.study.rejudge.rejudge_markdown`).

:func:`render` rewrites every block from the files (paths relative to ``root``); :func:`check` says
which blocks differ. ``python tools/results_docs.py`` rewrites README.md and docs/*.md, ``--check``
fails when they differ (the test suite runs it).
"""

from __future__ import annotations

import csv
import math
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from pcmr.study.rejudge import rejudge_markdown

__all__ = ["BlockError", "check", "render"]

_BLOCK = re.compile(r"<!-- results (?P<attrs>[^>]*?) -->(?P<body>.*?)<!-- /results -->", re.S)
_KINDS = ("table", "value", "line", "cell", "answer", "papers", "rejudge")


class BlockError(ValueError):
    """A results block that cannot be rendered; the message names the file, the block and why."""


def _attributes(text: str, where: str) -> dict[str, str]:
    try:
        parts = shlex.split(text)
    except ValueError as exc:
        raise BlockError(f"{where}: cannot read the block's attributes ({exc}); expected key=\"value\" pairs") from None
    out = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise BlockError(f"{where}: attribute {part!r} is not key=\"value\"")
        out[key] = value
    kinds = [k for k in _KINDS if k in out]
    if len(kinds) != 1:
        raise BlockError(f"{where}: a block needs exactly one of {', '.join(_KINDS)}, got {sorted(out)}")
    return out


def _read(root: Path, name: str, where: str) -> str:
    path = root / name
    if not path.is_file():
        raise BlockError(f"{where}: results file {name} not found (paths are relative to {root})")
    return path.read_text(encoding="utf-8")


def _table(text: str, heading: str | None, where: str) -> str:
    lines = text.splitlines()
    start = 0
    if heading is not None:
        found = [i for i, line in enumerate(lines) if line.lstrip("#").strip() == heading and line.startswith("#")]
        if not found:
            raise BlockError(f"{where}: no heading {heading!r}")
        start = found[0] + 1
    rows: list[str] = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows or (heading is not None and line.startswith("#")):
            break
    if not rows:
        raise BlockError(f"{where}: no table" + (f" under {heading!r}" if heading else ""))
    return "\n\n" + "\n".join(rows) + "\n\n"  # blank lines: Markdown sees a table, not HTML


def _value(text: str, attrs: dict[str, str], where: str) -> str:
    conditions = [pair.partition("=") for pair in attrs.get("where", "").split(",") if pair]
    if any(not sep for _, sep, _ in conditions):
        raise BlockError(f"{where}: where must be key=value pairs separated by commas")
    metric, stat = attrs.get("metric"), attrs.get("stat", "mean")
    if stat not in ("count", "runs") and not metric:
        raise BlockError(f"{where}: a value block needs metric=\"COLUMN\"")
    rows = [row for row in csv.DictReader(text.splitlines())
            if all(row.get(key) == value for key, _, value in conditions)]
    if stat == "count":
        return str(len(rows))
    if stat == "runs":
        return str(len({row.get("run") for row in rows}))
    values = []
    for row in rows:
        cell = row.get(str(metric))
        if cell is None:
            raise BlockError(f"{where}: results have no column {metric!r}")
        if cell != "":
            values.append(float(cell))
    if not values:
        raise BlockError(f"{where}: no row matches {attrs.get('where', '')!r} with a value of {metric}")
    digits = int(attrs.get("digits", "1"))
    if stat == "mean":
        return f"{math.fsum(values) / len(values):.{digits}f}"
    if stat == "range":
        return f"{min(values):.{digits}f}-{max(values):.{digits}f}"
    raise BlockError(f"{where}: stat must be mean, range, count or runs, got {stat!r}")


def _line(text: str, prefix: str, where: str) -> str:
    for line in text.splitlines():
        if line.startswith(prefix):
            return line
    raise BlockError(f"{where}: no line starts with {prefix!r}")


def _split_row(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _table_rows(lines: Sequence[str]) -> list[dict[str, str]]:
    """The rows of the Markdown tables among ``lines``, each as ``{column: cell}`` of its own table."""
    header: list[str] = []
    rows = []
    for index, line in enumerate(lines):
        cells = _split_row(line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following and set(following.replace("|", "").strip()) <= set("-: "):
            header = cells  # the line above a separator line heads a table
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue
        rows.append(dict(zip(header, cells)))
    return rows


def _cell(text: str, attrs: dict[str, str], where: str) -> str:
    lines = _table(text, attrs["heading"], where).strip().splitlines() if attrs.get("heading") else \
        [line for line in text.splitlines() if line.startswith("|")]
    wanted = [pair.partition("=") for pair in attrs.get("row", "").split(";") if pair]
    column = attrs.get("column")
    if not column or not wanted or any(not sep for _, sep, _ in wanted):
        raise BlockError(f"{where}: a cell block needs row=\"column=value;...\" and column=\"NAME\"")
    for row in _table_rows(lines):
        if column in row and all(row.get(key.strip()) == value.strip() for key, _, value in wanted):
            return row[column]
    raise BlockError(f"{where}: no table row with {attrs.get('row')!r} and a column {column!r}")


#: what an answer says for a verdict that decides nothing
_UNDECIDED = {
    "inconclusive": "Not decided: its interval allows both answers",
    "unstable": "Not decided: its cells (learning rates, budgets) disagree",
    "not learned": "Not judged: a model it reads did not pass the skill gate",
    "no signal": "Not judged: the uncertainty head's per-item ranks agree too little across seeds",
    "no data": "Not judged: no seed was measured on both sides",
}


def _answer(text: str, attrs: dict[str, str], where: str) -> str:
    claim = attrs.get("claim")
    if not claim or not all(attrs.get(key) for key in ("holds", "reversed", "equal")):
        raise BlockError(f"{where}: an answer block needs claim=\"ID\" and the phrases holds=, reversed= and equal=")
    rows = [row for row in _table_rows([line for line in text.splitlines() if line.startswith("|")])
            if row.get("claim") == claim and "verdict" in row]
    if not rows:
        raise BlockError(f"{where}: no row of claim {claim!r} with a verdict in {attrs['answer']}")
    row = rows[0]
    verdict = row.get("Holm") or row["verdict"]
    if verdict in ("holds", "reversed", "equal"):
        lead = {"holds": "Yes: ", "reversed": "No, the opposite: ", "equal": "No: "}[verdict] + attrs[verdict]
    elif verdict in _UNDECIDED:
        lead = _UNDECIDED[verdict]
    else:
        raise BlockError(f"{where}: claim {claim!r} has the unknown verdict {verdict!r}")
    holm = f", after Holm's correction `{row['Holm']}`" if row.get("Holm") and row["Holm"] != row["verdict"] else ""
    details = [f"verdict `{row['verdict']}`{holm}", f"mean a - b {row.get('mean a-b', '?')} {row.get('CI', '')}".rstrip(),
               f"{row.get('n', '?')} seeds"]
    if row.get("cells"):
        details.append(f"cells: {row['cells']}")
    return f"**{lead}** ({'; '.join(details)})"


#: the counts of ``by_paper.md`` a ``papers`` block adds up
_PAPER_COUNTS = ("judged", "decided", "inconclusive", "other", "not judged")


def _papers(root: Path, names: str, where: str) -> str:
    totals: dict[str, dict[str, int]] = {}
    studies: dict[str, list[str]] = {}
    for name in (n.strip() for n in names.split(",") if n.strip()):
        text = _read(root, name, where)
        study = text.splitlines()[0].removeprefix("# ").split(":", 1)[0] if text else name
        rows = [row for row in _table_rows([line for line in text.splitlines() if line.startswith("|")])
                if "paper" in row]
        if not rows or any(column not in rows[0] for column in _PAPER_COUNTS):
            raise BlockError(f"{where}: {name} has no table with the columns paper, {', '.join(_PAPER_COUNTS)} "
                             "(written before by_paper.md counted them: regenerate the study's report)")
        for row in rows:
            counts = totals.setdefault(row["paper"], dict.fromkeys(_PAPER_COUNTS, 0))
            for column in _PAPER_COUNTS:
                counts[column] += int(row[column])
            studies.setdefault(row["paper"], []).append(study)
    header = ["paper", *_PAPER_COUNTS, "studies"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * len(_PAPER_COUNTS) + "---|"]
    for paper, counts in totals.items():
        lines.append("| " + " | ".join([paper, *(str(counts[c]) for c in _PAPER_COUNTS), ", ".join(studies[paper])])
                     + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def _render_block(root: Path, attrs: dict[str, str], where: str) -> str:
    if "table" in attrs:
        return _table(_read(root, attrs["table"], where), attrs.get("heading"), where)
    if "value" in attrs:
        return _value(_read(root, attrs["value"], where), attrs, where)
    if "cell" in attrs:
        return _cell(_read(root, attrs["cell"], where), attrs, where)
    if "answer" in attrs:
        return _answer(_read(root, attrs["answer"], where), attrs, where)
    if "papers" in attrs:
        return _papers(root, attrs["papers"], where)
    if "rejudge" in attrs:
        folder, study = root / attrs["rejudge"], root / attrs.get("study", "")
        if not (folder / "results.csv").is_file() or not study.is_file():
            raise BlockError(f"{where}: rejudge needs a results folder with results.csv and study=\"FILE\", got "
                             f"{attrs['rejudge']!r} and {attrs.get('study')!r}")
        return "\n\n" + rejudge_markdown(folder, study, attrs["rejudge"]) + "\n"
    return _line(_read(root, attrs["line"], where), attrs.get("prefix", ""), where)


def render(text: str, root: Path, name: str = "document") -> str:
    """``text`` with every results block regenerated from the files under ``root``."""

    def replace(match: re.Match[str]) -> str:
        line = text.count("\n", 0, match.start()) + 1
        attrs = _attributes(match.group("attrs"), f"{name}:{line}")
        body = _render_block(root, attrs, f"{name}:{line}")
        return f"<!-- results {match.group('attrs')} -->{body}<!-- /results -->"

    return _BLOCK.sub(replace, text)


def check(paths: Sequence[Path], root: Path) -> list[str]:
    """The files among ``paths`` whose results blocks differ from what the results give (with the
    first differing line), empty when all agree."""
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        fresh = render(text, root, str(path.relative_to(root)) if path.is_relative_to(root) else str(path))
        if fresh != text:
            old, new = text.splitlines(), fresh.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            stale.append(f"{path}:{first + 1}: {old[first] if first < len(old) else ''!r} -> "
                         f"{new[first] if first < len(new) else ''!r}")
    return stale
