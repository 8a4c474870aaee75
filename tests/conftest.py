"""Fixtures shared by the tests: a tiny run folder as ``pcmr train`` writes it, a gallery index built
from one, the tiny shapes settings, and the ``--set`` overrides of a tiny training."""

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
    untrained PCME weights from seed 0 and its image preprocessing, ``similarity_options.json`` when given): the tests that use it
    need the files and shapes, not accuracy."""
    from pcmr.data import Vocabulary, load_dataset
    from pcmr.encode.inputs import image_input_size
    from pcmr.hub import preprocessor_config
    from pcmr.models import create_model, save_model
    from pcmr.train.config import RunConfig, save_config

    shapes = dict(TINY_SHAPES if shapes is None else shapes)
    root.mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {"model": {"name": "pcme", **TINY_MODEL}, "loss": {"name": "pcme"},
                           "data": {"name": "shapes", "options": shapes}}
    if eval_section is not None:
        raw["eval"] = eval_section
    save_config(RunConfig.from_dict(raw), root / "config.yaml")
    train = load_dataset("shapes", "train", **shapes)
    vocab = Vocabulary.from_split(train)
    vocab.save(root / "vocab.json")
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), **TINY_MODEL)
    extra: dict[str, Any] = {"preprocessor_config": preprocessor_config(image_input_size(train))}
    if vocabulary_in_model:
        extra["vocabulary"] = vocab.to_dict()
    save_model(model, root / "model", extra_json=extra)
    if similarity_options is not None:
        (root / "similarity_options.json").write_text(json.dumps(similarity_options))
    return root


@pytest.fixture(scope="session")
def tiny_run_factory() -> Callable[..., Path]:
    """:func:`make_tiny_run` (call it with a folder and the options a test module needs)."""
    return make_tiny_run


#: ``--set`` overrides of a training of two steps of one epoch, on 12 shapes images with a tiny model
TINY_TRAINING = [
    "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
    "image_size: 32, cache_dir: CACHE}",
    "data.batch_size=10",
    "train.epochs=1",
    "train.max_steps_per_epoch=2",
    "model.embed_dim=8",
    "model.text_encoder={word_dim: 8, hidden_dim: 8}",
    "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
]


def _make_search_run(root: Path) -> Path:
    """A run folder with learned match-probability options (untrained weights; the search tests need
    shapes, not accuracy)."""
    return make_tiny_run(root, similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


def _make_search_index(root: Path, backend: str = "faiss") -> Path:
    """Build ``root/index`` from a fresh run with the CLI (a faiss flat index by default)."""
    from pcmr.cli import main

    run = _make_search_run(root / "run")
    args = ["search", str(root / "index"), "--build", str(run)]
    if backend == "faiss":
        args += ["--backend", "faiss", "--index-type", "flat", "--ann-score", "cosine"]
    assert main(args) == 0
    return root / "index"


@pytest.fixture(scope="session")
def tiny_shapes() -> dict[str, Any]:
    """The settings of the tiny shapes data of :func:`make_tiny_run` (a copy per session)."""
    return dict(TINY_SHAPES)


@pytest.fixture(scope="session")
def search_run_factory() -> Callable[[Path], Path]:
    """``factory(folder)``: a tiny run folder with match-probability options, for the search tests."""
    return _make_search_run


@pytest.fixture(scope="session")
def search_index_factory() -> Callable[..., Path]:
    """``factory(folder, backend="faiss")``: a gallery index built from a tiny run with ``pcmr search``."""
    return _make_search_index


@pytest.fixture(scope="module")
def tiny_training(cache_dir: Path) -> list[str]:
    """``--set`` items of a tiny training (:data:`TINY_TRAINING`, shapes cached in the module's cache
    folder); a test adds its own items after them (a later item wins)."""
    return [item.replace("CACHE", str(cache_dir)) for item in TINY_TRAINING]


def set_args(items: list[str]) -> list[str]:
    """``["--set", item, ...]`` for every item."""
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="session")
def as_set_args() -> Callable[[list[str]], list[str]]:
    """:func:`set_args`: ``--set`` items as command-line arguments."""
    return set_args


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes cache folder shared by the tests of one module (each split generated once)."""
    return tmp_path_factory.mktemp("shapes-cache")


@pytest.fixture
def train_until_crash(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, Path, int], None]:
    """``train_until_crash(config, run_dir, n)``: train until the ``n``-th write of a checkpoint's
    ``LATEST`` pointer raises (a crash after the checkpoint folder is in place, before it is named
    the latest), then restore the writer."""
    from pcmr.train import Trainer
    from pcmr.train import checkpoint as checkpoint_module

    def run(config: Any, run_dir: Path, fail_on_write: int) -> None:
        original = checkpoint_module.atomic_write_text
        calls = {"latest": 0}

        def crashing_write(path: Any, text: str) -> None:
            if Path(path).name == "LATEST":
                calls["latest"] += 1
                if calls["latest"] == fail_on_write:
                    raise KeyboardInterrupt("simulated crash")
            original(path, text)

        monkeypatch.setattr(checkpoint_module, "atomic_write_text", crashing_write)
        try:
            with pytest.raises(KeyboardInterrupt):
                Trainer(config, run_dir).fit()
        finally:
            monkeypatch.setattr(checkpoint_module, "atomic_write_text", original)

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.cuda`` tests need a CUDA GPU: where this machine has none they are deselected (the
    summary line counts them as "deselected"), never collected as skipped placeholders; wherever a GPU is,
    they run with the rest (``pytest -m cuda`` or ``make gpu-check`` runs them alone)."""
    if torch.cuda.is_available():
        return
    needs_gpu = [item for item in items if item.get_closest_marker("cuda") is not None]
    if needs_gpu:
        config.hook.pytest_deselected(items=needs_gpu)
        items[:] = [item for item in items if item.get_closest_marker("cuda") is None]
