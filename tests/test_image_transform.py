"""The test-time image transform (Resize + CenterCrop, or a square resize) is recorded with a run's
saved models and used wherever image files reach the model: ``pcmr evaluate --data``, ``pcmr search``
(index and queries), ``pcmr serve`` (through the index) and ``Model.encode_image``."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from _real_layouts import GLOVE_FIXTURE, write_cub_folder
from pcmr import load
from pcmr.cli import main
from pcmr.data.images import FileImages
from pcmr.encode.inputs import encode_image_inputs
from pcmr.search import GalleryIndex
from pcmr.train.loading import load_split, run_config

LAYOUT = {f"00{c}.Bird_{c}": [f"Bird_{c}_{n:04d}.jpg" for n in range(2)] for c in range(1, 5)}
CROP = {"image_size": 32, "image_resize": "center_crop", "resize_size": 40}


@pytest.fixture(scope="module")
def cub_run(tmp_path_factory):
    """A tiny pcme_cub run (Resize 40 + CenterCrop 32) and a second CUB folder to evaluate on."""
    tmp = tmp_path_factory.mktemp("transform")
    root = write_cub_folder(tmp / "cub", LAYOUT, list(LAYOUT)[:2], list(LAYOUT)[2:], [])
    other = write_cub_folder(tmp / "other", LAYOUT, list(LAYOUT)[:2], list(LAYOUT)[2:], [])
    items = [f"data.root={root}", f"train.word_vectors={GLOVE_FIXTURE}", "model.embed_dim=8",
             "model.text_encoder.word_dim=6", "model.image_encoder.kind=cnn", "model.image_encoder.cnn_channels=[4, 4]",
             "data.options.image_size=32", "data.options.resize_size=40", "train.epochs=1", "train.warmup_epochs=0",
             "train.max_steps_per_epoch=1", "data.batch_size=2", "loss.num_samples=2", "eval.similarities=[cosine]"]
    argv = ["train", "pcme_cub", "--out", str(tmp), "--name", "run", "--no-progress",
            *[arg for item in items for arg in ("--set", item)]]
    assert main(argv) == 0
    return tmp / "run", other


def test_run_models_record_the_transform(cub_run, tmp_path):
    run_dir, _ = cub_run
    for folder in ("model", "model_last"):
        preprocessor = json.loads((run_dir / folder / "preprocessor_config.json").read_text())
        assert {k: preprocessor[k] for k in CROP} == CROP and preprocessor["resample"] == "bilinear"
    model = load(run_dir)
    assert model.image_transform == CROP
    model.save_pretrained(tmp_path / "exported")  # a save_pretrained folder keeps it
    assert load(tmp_path / "exported").image_transform == CROP


def test_encode_image_crops_like_the_validation_images(cub_run, tmp_path):
    run_dir, _ = cub_run
    model = load(run_dir)
    pixels = torch.randint(0, 256, (30, 60, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    wide = Image.fromarray(pixels.numpy())  # 60 x 30: a crop and a squash differ
    path = tmp_path / "wide.png"
    wide.save(path)
    cropped = FileImages([str(path)], image_size=32, image_resize="center_crop", resize_size=40).load(0)
    squashed = FileImages([str(path)], image_size=32).load(0)
    assert not torch.allclose(cropped, squashed)
    want = encode_image_inputs(model.network, cropped[None], image_size=None)
    for query in (str(path), wide):
        torch.testing.assert_close(model.encode_image(query).mean, want.mean)


def test_evaluate_and_search_read_another_folder_with_the_runs_transform(cub_run, tmp_path):
    run_dir, other = cub_run
    model = load(run_dir)
    split = load_split(str(other), "test", run_config(model), model=model)
    images = split.images
    assert (images.image_size, images.image_resize, images.resize_size) == (32, "center_crop", 40)
    index = GalleryIndex.build(model, split)
    assert index.model.image_transform == CROP
    query = index.encode_images(split.images.paths[0])  # cropped as the gallery's images were
    torch.testing.assert_close(query.mean[0], index.images.mean[0], rtol=1e-5, atol=1e-6)
    assert index.search_image(split.images.paths[0], k=2) is not None
    out = tmp_path / "eval"
    assert main(["evaluate", str(run_dir), "--data", str(other), "--split", "test", "--out", str(out),
                 "--similarity", "cosine", "--rerank", "nns"]) == 0
    assert (out / "results.json").is_file()


def test_a_model_folder_without_its_image_preprocessing_names_the_missing_file(tiny_run_factory, tmp_path):
    """A pixel model saved without preprocessor_config.json (written by pcmr train since it records the image
    size) cannot bring image files to its size: the error names the file and the way out, not features."""
    run = tiny_run_factory(tmp_path / "run")
    size = load(run).image_size
    assert size is not None
    (run / "model" / "preprocessor_config.json").unlink()
    model = load(run)
    photo = tmp_path / "photo.png"
    Image.new("RGB", (40, 30), (200, 10, 10)).save(photo)
    with pytest.raises(ValueError, match="stores no image preprocessing \\(preprocessor_config.json"):
        model.encode_image(str(photo))
    model.set_image_transform(size)
    assert model.encode_image(str(photo)).mean.shape[0] == 1
