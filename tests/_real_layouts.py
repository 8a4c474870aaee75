"""Small generated dataset folders in the real layouts (Karpathy COCO, CUB Captions), for the tests that
train the real-data recipes through the command and check the CUB split against the release."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

#: words of the generated captions (all in tests/fixtures/glove/glove.tiny.6d.txt but "zebra")
COLOURS = ("red", "blue", "yellow", "black", "white")
GLOVE_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "glove" / "glove.tiny.6d.txt"


def write_image(path: Path, seed: int, size: tuple[int, int] = (20, 14)) -> None:
    """A small random RGB JPEG (width, height)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def write_coco_folder(root: Path, counts: Mapping[str, int] = {"train": 8, "restval": 2, "val": 4, "test": 4}) -> Path:
    """``root/dataset_coco.json`` (Karpathy's format) and ``root/images/<filepath>/<file>``, 2 captions per image."""
    records, number = [], 0
    for split, count in counts.items():
        for _ in range(count):
            colour = COLOURS[number % len(COLOURS)]
            folder = "train2014" if split == "train" else "val2014"
            sentences = [f"a {colour} bird has a small beak", f"the {colour} wing of this bird"]
            records.append({"filepath": folder, "filename": f"COCO_{number:06d}.jpg", "imgid": number, "split": split,
                            "cocoid": 100 + number,
                            "sentences": [{"raw": raw, "tokens": raw.split(), "imgid": number, "sentid": 10 * number + j}
                                          for j, raw in enumerate(sentences)]})
            write_image(root / "images" / folder / f"COCO_{number:06d}.jpg", number)
            number += 1
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset_coco.json").write_text(json.dumps({"images": records, "dataset": "coco"}))
    return root


def write_cub_folder(root: Path, layout: Mapping[str, Sequence[str]], trainval: Sequence[str], test: Sequence[str],
                     seen_test: Sequence[str] | None = None, class_ids: Mapping[str, int] | None = None) -> Path:
    """A CUB Captions folder (pcmr's layout, docs/datasets.md): ``CUB_200_2011/{images.txt, classes.txt,
    image_class_labels.txt, images/}``, ``text_c10/``, the class split files and, when given,
    ``seen_test_images.txt``. ``layout``: class folder -> image file names."""
    cub = root / "CUB_200_2011"
    cub.mkdir(parents=True, exist_ok=True)
    class_ids = dict(class_ids or {directory: int(directory.split(".")[0]) for directory in layout})
    images, labels, number = [], [], 0
    for directory, names in layout.items():
        stem = directory.split(".", 1)[1].lower().replace("_", " ")
        colour = COLOURS[class_ids[directory] % len(COLOURS)]
        for name in names:
            number += 1
            images.append(f"{number} {directory}/{name}")
            labels.append(f"{number} {class_ids[directory]}")
            write_image(cub / "images" / directory / name, number)
            text = root / "text_c10" / directory / name.replace(".jpg", ".txt")
            text.parent.mkdir(parents=True, exist_ok=True)
            text.write_text(f"this {colour} bird has a small beak\na {stem} with {colour} wing\n")
    (cub / "classes.txt").write_text("".join(f"{cid} {d}\n" for d, cid in sorted(class_ids.items(), key=lambda x: x[1])))
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "trainvalclasses.txt").write_text("".join(f"{c}\n" for c in trainval))
    (root / "testclasses.txt").write_text("".join(f"{c}\n" for c in test))
    if seen_test is not None:
        (root / "seen_test_images.txt").write_text("".join(f"{c}\n" for c in seen_test))
    return root
