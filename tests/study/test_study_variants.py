"""Every variant of a shipped study changes what its recipes train: after folding settings that have no
effect (cutout and word dropout of 0, or augmentation switched off), a recipe's variants still differ."""

from __future__ import annotations

from typing import Any

import pytest

from pcmr.study.backend import resolve_config
from pcmr.study.spec import list_studies, load_study


def _effective(config: Any) -> dict[str, Any]:
    data = config.to_dict()
    data["train"].pop("seed", None)
    data["train"].pop("progress", None)
    loader = dict(data["data"].get("loader_options") or {})
    augment = loader.pop("augment", True)
    erase = loader.pop("erase_ratio", 0.0) or 0.0  # a number, or the release's range [min, max]
    erase = (list(erase) if isinstance(erase, (list, tuple)) else float(erase)) if augment else 0.0
    dropout = float(loader.pop("word_dropout", 0.0) or 0.0) if augment else 0.0
    data["data"]["loader_options"] = {**loader, "erase_ratio": erase, "word_dropout": dropout}
    return data


@pytest.mark.parametrize("study", sorted(list_studies()))
def test_each_variant_changes_the_training(study):
    spec = load_study(list_studies()[study])
    configs: dict[str, dict[str, Any]] = {}
    for run in spec.runs():
        if run.seed == spec.seeds[0]:
            configs.setdefault(run.label, {})[run.variant] = _effective(resolve_config(run.recipe, run.overrides))
    for label, variants in configs.items():
        names = list(variants)
        for i, first in enumerate(names):
            for second in names[i + 1:]:
                assert variants[first] != variants[second], f"{study}: {label} {first} and {second} train alike"
