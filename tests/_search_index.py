"""A tiny trained-shape run folder and gallery index shared by the search/serve tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SHAPES = dict(image_size=16, num_train=24, num_val=11, num_test=13, num_test_unseen=1, num_binary_selection=1,
              cache=False)


def make_run(root: Path) -> Path:
    """A run folder as `pcmr train` writes it (untrained weights; the tests need shapes, not accuracy)."""
    from pcmr.data import Vocabulary, load_dataset
    from pcmr.models import create_model, save_model
    from pcmr.train.config import RunConfig, save_config

    root.mkdir(parents=True, exist_ok=True)
    config = RunConfig.from_dict({
        "model": {"name": "pcme", "embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]},
                  "text_encoder": {"word_dim": 8, "hidden_dim": 8}},
        "loss": {"name": "pcme"},
        "data": {"name": "shapes", "options": SHAPES},
    })
    save_config(config, root / "config.yaml")
    vocab = Vocabulary.from_split(load_dataset("shapes", "train", **SHAPES))
    vocab.save(root / "vocab.json")
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), embed_dim=4, image_encoder={"cnn_channels": [4, 8]},
                         text_encoder={"word_dim": 8, "hidden_dim": 8})
    save_model(model, root / "model")
    (root / "similarity_options.json").write_text(json.dumps({"match_prob": {"a": 3.0, "b": 1.0}}))
    return root


def make_index(root: Path, backend: str = "faiss") -> Path:
    """Build ``root/index`` from a fresh run with the CLI (faiss flat index by default)."""
    from pcmr.cli import main

    run = make_run(root / "run")
    args = ["search", str(root / "index"), "--build", str(run)]
    if backend == "faiss":
        args += ["--backend", "faiss", "--index-type", "flat", "--ann-score", "cosine"]
    assert main(args) == 0
    return root / "index"
