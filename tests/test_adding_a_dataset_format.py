"""Adding a dataset format touches only its own module, its test and its doc page: a format registered here,
and nowhere else, trains through ``pcmr train`` and evaluates through ``pcmr evaluate``, and its loader is
given the model's test-time image transform because the format says it reads image files
(``DatasetSpec.reads_image_files``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests._own_data import make_folder

from pcmr.cli import main
from pcmr.data.folder import load_folder
from pcmr.data.registry import DATASETS, DatasetSpec
from pcmr.data.split import RetrievalSplit

NAME = "throwaway_described"
#: the captions file of the format: what makes it a format of its own (the folder format reads captions.jsonl)
CAPTIONS = "descriptions.jsonl"
#: the transform the run trains at: Resize 28 then the central 24 x 24 square
TRANSFORM = {"image_size": 24, "image_resize": "center_crop", "resize_size": 28}


@pytest.fixture
def registered():
    """The throw-away format registered for one test; every call of its loader is recorded."""
    calls: list[dict[str, Any]] = []

    def load(split: str, *, root: str, **options: Any) -> RetrievalSplit:
        calls.append({"split": split, "root": root, **options})
        return load_folder(root, split, captions_file=f"{root}/{CAPTIONS}", **options)

    DATASETS.register(DatasetSpec(NAME, load, "image files and a descriptions.jsonl (a test's format)",
                                  reads_image_files=True))
    yield calls
    DATASETS.unregister(NAME)


def _described_folder(root, count: int):
    folder = make_folder(root, count, jsonl=True)
    (folder / "captions.jsonl").rename(folder / CAPTIONS)
    return folder


def test_a_registered_format_trains_and_evaluates_with_the_models_transform(registered, tmp_path, capsys):
    training = _described_folder(tmp_path / "train_photos", 20)
    argv = ["train", "pcme", "--out", str(tmp_path), "--name", "run", "--no-progress",
            "--set", f"data.name={NAME}", "--set", f"data.root={training}",
            "--set", "data.options={image_size: 24, image_resize: center_crop, resize_size: 28}",
            "--set", "data.batch_size=8", "--set", "train.epochs=1", "--set", "model.embed_dim=8",
            "--set", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
            "--set", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]
    assert main(argv) == 0, capsys.readouterr().err
    assert {call["split"] for call in registered} >= {"train", "val"}
    assert all({k: call[k] for k in TRANSFORM} == TRANSFORM for call in registered)
    preprocessor = json.loads((tmp_path / "run" / "model" / "preprocessor_config.json").read_text())
    assert {k: preprocessor[k] for k in TRANSFORM} == TRANSFORM  # stored with the model

    registered.clear()
    other = _described_folder(tmp_path / "other_photos", 10)
    out = tmp_path / "eval"
    assert main(["evaluate", str(tmp_path / "run"), "--data", str(other), "--data-name", NAME, "--split", "all",
                 "--similarity", "cosine", "--rerank", "nns", "--no-corruption", "--out", str(out)]) == 0, \
        capsys.readouterr().err
    # another folder of the format: read with the model's transform, not the loader's defaults
    assert registered and all(call["root"] == str(other) for call in registered)
    assert all({k: call[k] for k in TRANSFORM} == TRANSFORM for call in registered)
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert (meta["dataset"], meta["num_images"], meta["num_captions"]) == ("folder", 10, 20)


def test_a_format_that_reads_no_image_files_gets_no_transform(registered, tmp_path):
    """The same loader registered as not reading image files is given nothing of the model's."""
    from pcmr import load
    from pcmr.run_defaults import load_split

    folder = _described_folder(tmp_path / "photos", 10)
    spec = DATASETS.get(NAME)
    DATASETS.unregister(NAME)
    DATASETS.register(DatasetSpec(NAME, spec.loader, spec.description, reads_image_files=False))
    model = load(_tiny_model(tmp_path))
    load_split(str(folder), "all", None, NAME, model=model)
    assert registered and all("image_resize" not in call for call in registered)


def _tiny_model(tmp_path):
    """A saved model with a center-crop transform (untrained weights)."""
    import torch

    from pcmr import Model
    from pcmr.data import Vocabulary
    from pcmr.models import create_model

    torch.manual_seed(0)
    vocabulary = Vocabulary(["a", "red"])
    network = create_model("vsepp", vocab_size=len(vocabulary), embed_dim=8, image_encoder={"cnn_channels": [4, 4, 4, 4]},
                           text_encoder={"word_dim": 8, "hidden_dim": 8})
    model = Model(network, vocabulary, 24, image_resize="center_crop", resize_size=28)
    model.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_the_throwaway_format_is_gone_after_its_test():
    assert NAME not in DATASETS
