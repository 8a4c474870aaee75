"""Fixture of PCME's official release (github.com/naver-ai/pcme): how it trains, not what it computes.

Usage (from the repository root, with a checkout of the release at PATH and torchvision 0.2.2, the
version the release pins, unpacked at TV: ``pip download --no-deps torchvision==0.2.2.post3`` and
unzip the wheel; it is pure Python)::

    PYTHONPATH=src python tools/reference/pcme_release_training.py --checkout PATH --commit HASH \
        --torchvision TV --out tests/fixtures/reference/pcme_training.safetensors

Three parts, each run by the release's own code:

- ``schedule/<setting>``: the learning rate of every epoch of the two training phases. The release's
  ``optimizers.get_optimizer`` and ``optimizers.get_lr_scheduler`` build AdamP and
  ``CosineAnnealingLR`` from its own ``config/coco/pcme_coco.yaml`` and ``config/cub/pcme_cub.yaml``;
  the phases follow ``train_coco.py`` / ``train_cub.py``: ``pretrain`` builds an engine (optimizer and
  scheduler), ``finetune`` multiplies ``learning_rate`` by ``train.finetune_lr_decay`` and builds a
  new engine; ``engine/trainer.py: train`` trains an epoch at the optimizer's lr, then calls
  ``lr_scheduler.step()``. ``coco`` and ``cub`` are the released settings; ``short_coco`` and
  ``short_cub`` the same code with fewer epochs (a test trains pcmr for them).
- ``sampler/``: ``datasets/cub.py: CUBSampler`` on a toy labelled dataset (classes of unequal
  sizes), seeded with ``np.random.seed``: the batches of the first epochs, the inclusion counts of
  every item over many epochs, and how many batches its generator yields before it stops.
- ``transform/``: ``datasets/_transforms.py: imagenet_transform`` (``RandomResizedCrop`` +
  ``RandomHorizontalFlip`` for COCO training; ``Resize`` + ``CenterCrop`` for evaluation and CUB
  training; ``ToTensor`` + ImageNet ``Normalize``) on seeded toy images of awkward sizes, and the
  crop boxes of torchvision 0.2.2's ``RandomResizedCrop.get_params`` for seeded ``random`` states.

Plumbing (never computation): the modules are loaded from their files, so the packages' ``__init__``
files (which import pycocotools, nltk, apex) do not run; ``nltk.tokenize`` is an empty stub (only
captions use it); torchvision 0.2.2 reads ``PIL.PILLOW_VERSION``, which newer Pillow no longer has
(set to ``PIL.__version__``); the release reads configs with munch (``_fixture.AttrDict`` here).
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import types
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import AttrDict, checkout_commit, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/naver-ai/pcme"
#: epochs of the short settings: (pretrain, finetune, T_max, finetune_lr_decay) on the released lr
SHORT = {"short_coco": ("coco", 2, 3, 3, None), "short_cub": ("cub", 2, 3, 4, None)}
#: the toy labelled dataset of the sampler part: class sizes (unequal, 5 classes, 25 items)
CLASS_SIZES = (3, 7, 4, 6, 5)
SAMPLER_EPOCHS = 2000
#: toy images (width, height) and the small sizes of the transform part
IMAGE_SIZES = ((37, 23), (23, 41), (64, 64), (30, 31), (200, 9))
RESIZE, CROP = 20, 16
BOX_SEEDS = 300


def attrs(value):
    """Nested dicts as AttrDicts (the release's munch configs)."""
    if isinstance(value, dict):
        return AttrDict({key: attrs(item) for key, item in value.items()})
    return value


def load_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schedule(optimizers: types.ModuleType, config: AttrDict) -> list[float]:
    """The lr of each epoch of pretrain then finetune, as train_coco.py / train_cub.py run them."""
    lrs = []
    parameters = [torch.nn.Parameter(torch.zeros(2))]
    for phase in ("pretrain", "finetune"):
        if phase == "finetune":  # train_*.py: finetune()
            config.optimizer.learning_rate *= config.train.get("finetune_lr_decay", 0.1)
        optimizer = optimizers.get_optimizer(config.optimizer.name, parameters, config.optimizer)
        scheduler = optimizers.get_lr_scheduler(config.lr_scheduler.name, optimizer, config.lr_scheduler)
        for _ in range(config.train[f"{phase}_epochs"]):  # engine/trainer.py: train()
            lrs.append(optimizer.param_groups[0]["lr"])  # the lr _train_epoch trains with
            optimizer.step()  # _train_epoch's steps (no gradients here: nothing moves)
            scheduler.step()
    return lrs


def schedules(checkout: Path) -> tuple[dict[str, torch.Tensor], dict]:
    optimizers = load_file("release_optimizers", checkout / "optimizers" / "__init__.py")
    tensors, settings = {}, {}
    for name, path in (("coco", "config/coco/pcme_coco.yaml"), ("cub", "config/cub/pcme_cub.yaml")):
        raw = yaml.safe_load((checkout / path).read_text())
        tensors[f"schedule/{name}/lr"] = torch.tensor(schedule(optimizers, attrs(raw)), dtype=torch.float64)
        settings[name] = {"config": path, "lr": raw["optimizer"]["learning_rate"],
                          "pretrain_epochs": raw["train"]["pretrain_epochs"],
                          "finetune_epochs": raw["train"]["finetune_epochs"], "T_max": raw["lr_scheduler"]["T_max"],
                          "finetune_lr_decay": raw["train"]["finetune_lr_decay"]}
    for name, (base, pretrain, finetune, t_max, _) in SHORT.items():
        raw = yaml.safe_load((checkout / settings[base]["config"]).read_text())
        raw["train"].update(pretrain_epochs=pretrain, finetune_epochs=finetune)
        raw["lr_scheduler"]["T_max"] = t_max
        tensors[f"schedule/{name}/lr"] = torch.tensor(schedule(optimizers, attrs(raw)), dtype=torch.float64)
        settings[name] = {**settings[base], "pretrain_epochs": pretrain, "finetune_epochs": finetune, "T_max": t_max}
    return tensors, settings


def sampler(checkout: Path) -> dict[str, torch.Tensor]:
    cub = load_file("release_cub", checkout / "datasets" / "cub.py")
    labels = np.repeat(np.arange(len(CLASS_SIZES)), CLASS_SIZES)
    dataset = types.SimpleNamespace(
        target_classes=set(range(len(CLASS_SIZES))),
        index_to_class={index: int(label) for index, label in enumerate(labels)},
        class_to_indices={c: [int(i) for i in np.flatnonzero(labels == c)] for c in range(len(CLASS_SIZES))},
    )
    batches_sampler = cub.CUBSampler(dataset, len(CLASS_SIZES))
    np.random.seed(0)
    first, counts = [], np.zeros(len(labels), dtype=np.int64)
    for epoch in range(SAMPLER_EPOCHS):
        iterator = iter(batches_sampler)
        for _ in range(len(batches_sampler)):  # the epoch the release's DataLoader reports (len)
            batch = next(iterator)
            counts[batch] += 1
            if epoch < 3:
                first.append(batch)
    yielded = 0
    iterator = iter(batches_sampler)
    try:
        while True:
            next(iterator)
            yielded += 1
    except RuntimeError:  # PEP 479: the generator's `raise StopIteration` (Python >= 3.7)
        stop = 1
    except StopIteration:
        stop = 0
    return {"sampler/labels": torch.from_numpy(labels), "sampler/first_batches": torch.tensor(first),
            "sampler/inclusion_counts": torch.from_numpy(counts),
            "sampler/len": torch.tensor(len(batches_sampler)), "sampler/yielded": torch.tensor(yielded),
            "sampler/stops_with_runtime_error": torch.tensor(stop)}


def transforms(checkout: Path, torchvision: Path) -> dict[str, torch.Tensor]:
    import PIL
    from PIL import Image

    PIL.PILLOW_VERSION = PIL.__version__  # torchvision 0.2.2 imports it (removed in Pillow 7)
    package = types.ModuleType("torchvision")
    package.__path__ = [str(torchvision / "torchvision")]  # its transforms only, not its __init__
    sys.modules["torchvision"] = package
    stub_module("nltk.tokenize", word_tokenize=None)
    release = load_file("release_transforms", checkout / "datasets" / "_transforms.py")
    from torchvision.transforms import RandomResizedCrop

    tensors: dict[str, torch.Tensor] = {}
    generator = np.random.default_rng(0)
    boxes = []
    for width, height in IMAGE_SIZES:
        image = Image.fromarray(generator.integers(0, 256, size=(height, width, 3), dtype=np.uint8), mode="RGB")
        key = f"transform/{width}x{height}"
        tensors[f"{key}/pixels"] = torch.from_numpy(np.asarray(image).copy())
        evaluation = release.imagenet_transform(resize_size=RESIZE, crop_size=CROP, random_resize_crop=False)
        tensors[f"{key}/eval"] = evaluation(image)
        train = release.imagenet_transform(resize_size=RESIZE, crop_size=CROP, random_resize_crop=True)
        for seed in range(4):
            random.seed(seed)
            tensors[f"{key}/train/seed{seed}"] = train(image)
        for seed in range(BOX_SEEDS):
            random.seed(seed)
            boxes.append([width, height, seed, *RandomResizedCrop.get_params(image, (0.08, 1.0), (3 / 4, 4 / 3))])
    tensors["transform/boxes"] = torch.tensor(boxes, dtype=torch.int64)  # [W, H, seed, top, left, h, w]
    return tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--torchvision", type=Path, required=True, help="unpacked torchvision 0.2.2 wheel")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    commit = checkout_commit(args.checkout, args.commit)
    tensors, settings = schedules(args.checkout)
    tensors.update(sampler(args.checkout))
    tensors.update(transforms(args.checkout, args.torchvision))
    write_fixture(args.out, tensors, {
        "repository": REPOSITORY, "commit": commit,
        "files": ["optimizers/__init__.py", "config/coco/pcme_coco.yaml", "config/cub/pcme_cub.yaml",
                  "train_coco.py", "train_cub.py", "engine/trainer.py", "datasets/cub.py",
                  "datasets/_transforms.py"],
        "functions": ["get_optimizer", "get_lr_scheduler", "CUBSampler", "imagenet_transform",
                      "torchvision 0.2.2 RandomResizedCrop.get_params"],
        "schedules": settings, "sampler": {"class_sizes": list(CLASS_SIZES), "epochs": SAMPLER_EPOCHS, "seed": 0},
        "transform": {"image_sizes": [list(s) for s in IMAGE_SIZES], "resize": RESIZE, "crop": CROP,
                      "box_seeds": BOX_SEEDS},
        "torch": torch.__version__, "tolerance": {"rtol": 1e-12, "atol": 1e-6},
    })


if __name__ == "__main__":
    main()
