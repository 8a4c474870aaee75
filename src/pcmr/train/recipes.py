"""Finding recipes (one YAML per method of the papers).

A recipe is named by its file stem (``pcme`` -> ``pcme.yaml``). Folders are searched in
order: ``$PCMR_CONFIGS``, ``./configs`` (your own recipes, which shadow the shipped ones of
the same name) and the recipes shipped inside the package (``pcmr/recipes/``, package data,
so they are there after a plain ``pip install``): the methods of the papers on the built-in data,
and in ``pcmr/recipes/real_data/`` the releases' settings on real datasets (``pcme_coco``,
``pcme_cub``), which need the dataset folder and a word-vector file.
"""

from __future__ import annotations

import os
from pathlib import Path

from pcmr.config import ConfigError
from pcmr.suggest import unknown_name

__all__ = ["REAL_DATA_DIR", "find_recipe", "list_recipes", "recipe_dirs", "shipped_recipe_dir"]

#: the sub-folder of the shipped recipes that train on real datasets (not on the built-in data)
REAL_DATA_DIR = "real_data"


def shipped_recipe_dir() -> Path:
    """The folder of the recipes shipped with pcmr (``pcmr/recipes``)."""
    return Path(__file__).resolve().parents[1] / "recipes"


def recipe_dirs() -> list[Path]:
    """Folders searched for recipes, first match wins."""
    dirs = []
    if os.environ.get("PCMR_CONFIGS"):
        dirs.append(Path(os.environ["PCMR_CONFIGS"]))
    dirs.append(Path.cwd() / "configs")
    dirs.append(shipped_recipe_dir())
    dirs.append(shipped_recipe_dir() / REAL_DATA_DIR)
    unique: list[Path] = []
    for folder in dirs:
        if folder.is_dir() and folder.resolve() not in [d.resolve() for d in unique]:
            unique.append(folder)
    return unique


def list_recipes() -> dict[str, Path]:
    """Recipe name -> YAML path, over :func:`recipe_dirs` (earlier folders shadow later ones)."""
    found: dict[str, Path] = {}
    for folder in reversed(recipe_dirs()):
        for path in sorted(folder.glob("*.yaml")):
            found[path.stem] = path
    return dict(sorted(found.items()))


def find_recipe(name_or_path: str) -> Path:
    """A YAML path as given, or the path of the recipe with that name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        raise ConfigError(f"config file not found: {name_or_path}")
    recipes = list_recipes()
    if name_or_path in recipes:
        return recipes[name_or_path]
    if not recipes:
        raise ConfigError(f"recipe '{name_or_path}' not found: no recipes found (set PCMR_CONFIGS) and no such "
                          f"YAML file")
    raise ConfigError(unknown_name("recipe", name_or_path, recipes) + ", or a YAML path")
