"""docs/models.md, "Recipes against their papers and releases": every recipe has a table, every table
has the columns field | paper | release (file:line) | pcmr | verdict, and every row whose field is a
config key states in its pcmr column the value the recipe YAML of each recipe in the heading holds."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pcmr.losses.registry import get_loss_entry
from pcmr.models.factory import resolve_config
from pcmr.train import load_config
from pcmr.train.recipes import list_recipes

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
HEADER = "| field | paper | release (file:line) | pcmr | verdict |"
KEY = re.compile(r"^`((?:model|loss|data|train)\.[a-z_.]+)`$")


def tables() -> list[tuple[list[str], list[list[str]]]]:
    """(recipe names of the heading, rows) of every table of the section."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Recipes against their papers and releases"):]
    found = []
    for block in re.split(r"\n### ", section)[1:]:
        heading, _, body = block.partition("\n")
        names = [n for n in re.findall(r"`([a-z_]+)`", heading) if n in list_recipes()]
        lines = body.splitlines()
        if HEADER not in lines:
            found.append((names, []))
            continue
        start = lines.index(HEADER) + 2
        rows = []
        for line in lines[start:]:
            if not line.startswith("|"):
                break
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        found.append((names, rows))
    return found


def recipe_value(name: str, key: str) -> Any:
    """The value a run of recipe ``name`` uses for ``key``: the recipe's, else the model family's or the
    loss's default."""
    config = load_config(list_recipes()[name])
    section, *path = key.split(".")
    model = dataclasses.asdict(resolve_config(config.model.name, **config.model.options))
    entry = get_loss_entry(config.loss.name)
    loss = {**dataclasses.asdict(entry.config()), **entry.fixed, **config.loss.options, "name": config.loss.name}
    value: Any = {"model": model, "loss": loss, "data": config.data.__dict__, "train": config.train.__dict__}[section]
    for part in path:
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def test_every_recipe_has_a_table_with_the_five_columns():
    covered = {name for names, rows in tables() if rows for name in names}
    assert covered == set(list_recipes())
    for names, rows in tables():
        assert names and rows, f"table of {names} missing or without the columns {HEADER}"
        assert all(len(row) == 5 for row in rows), names
        assert all(row[4] for row in rows), f"{names}: every row has a verdict"


CHECKS = [(name, row[0].strip("`"), row[3]) for names, rows in tables() for row in rows if KEY.match(row[0])
          for name in names]


@pytest.mark.parametrize("recipe, key, cell", CHECKS, ids=[f"{r}:{k}" for r, k, _ in CHECKS])
def test_the_pcmr_column_is_the_recipe_value(recipe, key, cell):
    stated = re.match(r"^`([^`]*)`", cell)
    assert stated, f"{recipe} {key}: the pcmr column must start with the value in backticks, got {cell!r}"
    want = yaml.safe_load(stated.group(1))
    got = recipe_value(recipe, key)
    if isinstance(want, float) or isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-3), f"{recipe}: {key} is {got!r}, the table says {want!r}"
    else:
        assert got == want, f"{recipe}: {key} is {got!r}, the table says {want!r}"
