"""Fixtures shared by the tests: a tiny run folder as ``pcmr train`` writes it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

#: tiny built-in shapes data, not cached (each test module builds it in a moment)
TINY_SHAPES: dict[str, Any] = dict(image_size=16, num_train=24, num_val=11, num_test=13, num_test_unseen=1,
                                   num_binary_selection=1, cache=False)
TINY_MODEL: dict[str, Any] = {"embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]},
                              "text_encoder": {"word_dim": 8, "hidden_dim": 8}}


def make_tiny_run(root: Path, *, shapes: dict[str, Any] | None = None, eval_section: dict[str, Any] | None = None,
                  similarity_options: dict[str, Any] | None = None, vocabulary_in_model: bool = False) -> Path:
    """A run folder as ``pcmr train`` writes it (``config.yaml``, ``vocab.json``, ``model/`` with
    untrained PCME weights from seed 0, ``similarity_options.json`` when given): the tests that use it
    need the files and shapes, not accuracy."""
    from pcmr.data import Vocabulary, load_dataset
    from pcmr.models import create_model, save_model
    from pcmr.train.config import RunConfig, save_config

    shapes = dict(TINY_SHAPES if shapes is None else shapes)
    root.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {"model": {"name": "pcme", **TINY_MODEL}, "loss": {"name": "pcme"},
                           "data": {"name": "shapes", "options": shapes}}
    if eval_section is not None:
        raw["eval"] = eval_section
    save_config(RunConfig.from_dict(raw), root / "config.yaml")
    vocab = Vocabulary.from_split(load_dataset("shapes", "train", **shapes))
    vocab.save(root / "vocab.json")
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), **TINY_MODEL)
    save_model(model, root / "model", extra_json={"vocabulary": vocab.to_dict()} if vocabulary_in_model else None)
    if similarity_options is not None:
        (root / "similarity_options.json").write_text(json.dumps(similarity_options))
    return root


@pytest.fixture(scope="session")
def tiny_run_factory() -> Callable[..., Path]:
    """:func:`make_tiny_run` (call it with a folder and the options a test module needs)."""
    return make_tiny_run


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes cache folder shared by the tests of one module (each split generated once)."""
    return tmp_path_factory.mktemp("shapes-cache")
