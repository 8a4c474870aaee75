"""pcmr's PCME training against the release's own code (naver-ai/pcme): the two-phase learning rate
(optimizers.get_lr_scheduler with the release's configs, phases as train_coco.py / train_cub.py run
them), CUBSampler batches and the image transforms (datasets/_transforms.py with torchvision 0.2.2).
Fixture: tools/reference/pcme_release_training.py."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import torch
from PIL import Image

from _reference import load_fixture
from pcmr.data.batching import PairBatchSampler
from pcmr.data.images import (
    ArrayImages,
    FileImages,
    center_crop,
    normalize_pixels,
    random_resized_crop_box,
    resize_shorter_side,
)
from pcmr.data.split import RetrievalSplit
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.recipes import list_recipes
from pcmr.train.schedules import learning_rate_factor

TENSORS, PROVENANCE = load_fixture("pcme_training")

#: the pcme recipe's documented overrides for the release's two settings (pcme.yaml's header)
SETTINGS = {
    "coco": ["train.epochs=60", "train.warmup_epochs=30", "train.lr=2e-4", "train.finetune_lr_factor=0.1",
             "train.cosine_epochs=30"],
    "cub": ["train.epochs=60", "train.warmup_epochs=10", "train.cosine_epochs=50"],
}


class PythonDraws:
    """The draws of pcmr's transforms taken from Python's ``random`` (what torchvision 0.2.2 calls)."""

    def __init__(self, seed: int) -> None:
        self.generator = random.Random(seed)

    def uniform(self, low: float, high: float) -> float:
        return self.generator.uniform(low, high)

    def integers(self, low: int, high: int) -> int:
        return self.generator.randint(low, high - 1)

    def random(self) -> float:
        return self.generator.random()


@pytest.mark.parametrize("setting", ["coco", "cub"])
def test_recipe_lr_is_the_releases_at_every_step(setting):
    recipe = list_recipes()["pcme"]
    header = recipe.read_text()
    for override in SETTINGS[setting]:  # the overrides tested are the ones the recipe documents
        assert re.search(rf"--set {re.escape(override)}(\s|$)", header), override
    config = load_config(recipe, SETTINGS[setting]).train
    release = TENSORS[f"schedule/{setting}/lr"].tolist()
    assert len(release) == config.epochs
    for epoch, want in enumerate(release):
        for step in (0, 1, 56):  # constant within an epoch, as the release steps per epoch
            got = config.lr * learning_rate_factor(config, epoch, step, 57)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-20), (epoch, step)


def test_old_schedule_differed_from_the_release():
    """The settings the recipe had before (constant warm-up, one cosine counted in steps) do not give
    the release's lr: the test above is not vacuous."""
    config = load_config(list_recipes()["pcme"], SETTINGS["coco"] + [
        "train.warmup_schedule=constant", "train.finetune_lr_factor=1.0", "train.schedule_every=step",
        "train.cosine_epochs=null"]).train
    release = TENSORS["schedule/coco/lr"].tolist()
    got = [config.lr * learning_rate_factor(config, epoch, 0, 10) for epoch in range(60)]
    assert not np.allclose(got, release, rtol=1e-6)


def short_run_overrides(cache_dir, setting: str) -> list[str]:
    info = PROVENANCE["schedules"][setting]
    return [
        "data.options={num_train: 12, num_val: 6, num_test: 6, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=10",
        f"train.epochs={info['pretrain_epochs'] + info['finetune_epochs']}",
        f"train.warmup_epochs={info['pretrain_epochs']}",
        f"train.cosine_epochs={info['T_max']}",
        f"train.lr={info['lr']}",
        f"train.finetune_lr_factor={info['finetune_lr_decay']}",
        "train.max_steps_per_epoch=2",
        "train.log_every=1",
        "train.checkpoint_every_steps=1",
        "train.keep_checkpoints=20",
        "train.validate_every=0",
        "train.progress=false",
        "loss.num_samples=2",
        "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ]


def test_short_run_logs_the_releases_lr_and_restarts_the_optimizer(tmp_path, cache_dir):
    """A pcme run of the short COCO-like setting (2 warm-up + 3 fine-tune epochs, T_max 3, fine-tune lr
    x 0.1): the lr of every logged step is the release's lr of that epoch, and the fine-tune phase's
    optimizer starts with fresh moments (AdamP's step count restarts at 1)."""
    from pcmr.train.checkpoint import list_checkpoints, load_checkpoint

    config = load_config(list_recipes()["pcme"], short_run_overrides(cache_dir, "short_coco"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    Trainer(config, run_dir).fit()
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    steps = [e for e in events if e["event"] == "step"]
    release = TENSORS["schedule/short_coco/lr"].tolist()
    assert len(steps) == 2 * len(release)
    for event in steps:
        assert event["lr"] == pytest.approx(release[event["epoch"]], rel=1e-12), event  # epoch: 0-based
    restarts = [e for e in events if e["event"] == "optimizer_restart"]
    assert [(e["epoch"], e["global_step"]) for e in restarts] == [(2, 4)]
    by_step = {load_checkpoint(p).state["progress"]["global_step"]: p for p in list_checkpoints(run_dir / "checkpoints")}
    for global_step, count in ((4, 4), (5, 1), (6, 2)):  # end of the warm-up; then the fresh AdamP
        state = load_checkpoint(by_step[global_step]).optimizer["state"]
        assert {int(s["step"]) for s in state.values()} == {count}, global_step


def toy_split(labels: np.ndarray) -> RetrievalSplit:
    count = len(labels)
    one_hot = torch.zeros(count, int(labels.max()) + 1, dtype=torch.bool)
    one_hot[torch.arange(count), torch.from_numpy(labels)] = True
    return RetrievalSplit(name="toy", split="train", images=ArrayImages(np.zeros((count, 2, 2, 3), dtype=np.uint8)),
                          caption_texts=[f"caption {i}" for i in range(count)], caption_image=np.arange(count),
                          image_labels=one_hot)


def test_one_per_class_batches_as_the_releases_cub_sampler():
    labels = TENSORS["sampler/labels"].numpy()
    sizes = np.bincount(labels)
    release_batches = TENSORS["sampler/first_batches"].numpy()
    epochs = PROVENANCE["sampler"]["epochs"]
    sampler = PairBatchSampler(toy_split(labels), len(sizes), mode="one_per_class", seed=3)
    assert len(sampler) == int(TENSORS["sampler/len"])  # the release's len: N // classes
    counts = np.zeros(len(labels), dtype=np.int64)
    for _ in range(epochs):
        for batch in sampler:
            items = [caption for caption, _ in batch]
            assert sorted(labels[items].tolist()) == list(range(len(sizes)))  # one pair per class
            counts[items] += 1
    for batch in release_batches:  # the release's batches have the same form
        assert sorted(labels[batch].tolist()) == list(range(len(sizes)))
    # every item is in a batch with probability 1 / (its class size), in the release and in pcmr
    batches = epochs * len(sampler)
    expected = batches / sizes[labels]
    spread = np.sqrt(expected * (1 - 1 / sizes[labels]))
    for name, got in (("release", TENSORS["sampler/inclusion_counts"].numpy()), ("pcmr", counts)):
        assert np.abs(got - expected).max() < 4.5 * spread.max(), name


def test_one_per_class_smaller_batches_and_errors():
    labels = np.repeat(np.arange(6), [2, 3, 1, 4, 2, 3])
    sampler = PairBatchSampler(toy_split(labels), 4, mode="one_per_class", seed=1)
    assert len(sampler) == len(labels) // 4
    for batch in sampler:
        classes = labels[[caption for caption, _ in batch]]
        assert len(batch) == 4 and len(set(classes.tolist())) == 4
    with pytest.raises(ValueError, match="exceeds the 6 classes"):
        PairBatchSampler(toy_split(labels), 7, mode="one_per_class")
    unlabelled = toy_split(labels)
    unlabelled.image_labels = None
    with pytest.raises(ValueError, match="needs class labels"):
        PairBatchSampler(unlabelled, 3, mode="one_per_class")


def fixture_images():
    for width, height in PROVENANCE["transform"]["image_sizes"]:
        key = f"transform/{width}x{height}"
        yield key, Image.fromarray(TENSORS[f"{key}/pixels"].numpy(), mode="RGB")


def test_random_resized_crop_box_is_torchvision_0_2s():
    for width, height, seed, top, left, h, w in TENSORS["transform/boxes"].tolist():
        assert random_resized_crop_box(width, height, PythonDraws(seed)) == (top, left, h, w), (width, height, seed)


def test_training_and_evaluation_transforms_are_the_releases(tmp_path):
    resize, crop = PROVENANCE["transform"]["resize"], PROVENANCE["transform"]["crop"]
    for key, image in fixture_images():
        evaluation = normalize_pixels(np.asarray(center_crop(resize_shorter_side(image, resize), crop)))
        torch.testing.assert_close(evaluation, TENSORS[f"{key}/eval"], rtol=0, atol=1e-6)
        path = tmp_path / f"{key.replace('/', '_')}.png"
        image.save(path)
        files = FileImages([str(path)], crop, image_resize="center_crop", resize_size=resize)
        torch.testing.assert_close(files.load(0), TENSORS[f"{key}/eval"], rtol=0, atol=1e-6)
        for seed in range(4):
            got = files.load_random_resized_crop(0, PythonDraws(seed))
            torch.testing.assert_close(got, TENSORS[f"{key}/train/seed{seed}"], rtol=0, atol=1e-6)
