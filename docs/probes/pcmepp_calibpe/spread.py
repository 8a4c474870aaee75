"""How spread out a trained run's embeddings are on its test split: the mean squared distance between
the means of two different images (and of two different captions; 0 when every item maps to one point,
about 2 for unit-norm means spread over the sphere), the mean distance of an image's mean to its own
captions' means, and the mean log-variance of each side.

    python docs/probes/pcmepp_calibpe/spread.py RUN [RUN ...] > spread.csv
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import torch

import pcmr
from pcmr.data import load_dataset
from pcmr.encode.inputs import encode_split


def _pairwise(means: torch.Tensor) -> float:
    distances = torch.cdist(means, means).pow(2)
    count = means.shape[0]
    return float(distances.sum() / (count * (count - 1)))


def spread(run: Path) -> dict[str, object]:
    overrides = json.loads((run / "study.json").read_text())["overrides"]
    options = {key.split(".", 2)[2]: value for key, value in overrides.items() if key.startswith("data.options.")}
    split = load_dataset("shapes", "test", **options)
    model = pcmr.load(run, which="model_last")
    images, captions = encode_split(model.network, split, model.text_vocabulary)
    owner = torch.as_tensor(split.caption_image)
    positive = (images.mean[owner] - captions.mean).pow(2).sum(dim=1).mean()
    row: dict[str, object] = {"run": run.name, "image_pair_sq_distance": f"{_pairwise(images.mean):.4f}",
                              "caption_pair_sq_distance": f"{_pairwise(captions.mean):.4f}",
                              "matching_pair_sq_distance": f"{float(positive):.4f}"}
    for side, gaussian in (("image", images), ("caption", captions)):
        row[f"{side}_logvar_mean"] = "" if gaussian.logvar is None else f"{float(gaussian.logvar.mean()):.3f}"
    return row


def main() -> None:
    rows = [spread(Path(run)) for run in sys.argv[1:]]
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


if __name__ == "__main__":
    main()
