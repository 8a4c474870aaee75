"""Where the first training step of pcmepp_csd pushes: on the first batch of the papers setting (shapes
`specific`, 48 px, 2000 images, batch 128, source pairs), with the variance heads at their default
initialisation and at logvar -8, print the mean CSD of matching and of non-matching pairs, the share of
the CSD that the variances make, how many pairs count as pseudo-positives, and the total
``-dL/dlogit`` over matching and over non-matching pairs (positive: the step raises those logits, i.e.
pulls those pairs together; negative: pushes them apart), the share of non-matching pairs the step
pushes apart and their total push.

    python docs/probes/pcmepp_calibpe/first_step.py > first_step.csv
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import torch
from torch.nn import functional as F

from pcmr.losses.csd import pseudo_positive_targets, smoothed_targets
from pcmr.similarity import pairwise
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.recipes import list_recipes

SETTING = ["data.options.preset=specific", "data.options.image_size=48", "data.options.num_train=2000",
           "data.options.num_val=200", "data.options.num_test=500", "data.options.num_test_unseen=0",
           "data.options.num_binary_selection=0", "data.batch_size=128", "data.train_relevance=source",
           "train.seed=0", "train.progress=false"]
INITS = {"default": [], "logvar -8": ["model.image_head.logvar_init=-8", "model.caption_head.logvar_init=-8"]}


def measure(name: str, extra: list[str]) -> dict[str, str]:
    config = load_config(list_recipes()["pcmepp_csd"], [*SETTING, *extra])
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        save_config(config, run_dir / "config.yaml")
        trainer = Trainer(config, run_dir)
        batch = next(iter(trainer.loader))
        outputs = trainer.model.train()(batch)
    image, caption, positives = outputs["image"], outputs["caption"], batch["relevance"]
    csd = -pairwise("csd", image, caption).detach()
    variance = (image.logvar.exp().sum(dim=1)[:, None] + caption.logvar.exp().sum(dim=1)[None, :]).detach()
    logits = (trainer.loss_fn.match_scale.a * -csd + trainer.loss_fn.match_scale.b).detach().requires_grad_()
    terms = trainer.loss_fn.config
    loss = 2.0 * F.binary_cross_entropy_with_logits(logits, smoothed_targets(positives, terms.label_smoothing,
                                                                               logits.dtype))
    pseudo_targets = pseudo_positive_targets(logits.detach(), positives, terms.label_smoothing)
    loss = loss + terms.lambda_pseudo * (F.binary_cross_entropy_with_logits(logits, pseudo_targets)
                                         + F.binary_cross_entropy_with_logits(
                                             logits.t(), pseudo_positive_targets(logits.detach().t(), positives.t(),
                                                                                 terms.label_smoothing)))
    (grad,) = torch.autograd.grad(loss, logits)
    pull = -grad
    pseudo = (pseudo_targets > 0.5) & ~positives
    return {"init": name, "csd_matching_pairs": f"{float(csd[positives].mean()):.2f}",
            "csd_other_pairs": f"{float(csd[~positives].mean()):.2f}",
            "variance_share": f"{float((variance / csd).mean()):.3f}",
            "pseudo_positive_share": f"{float(pseudo.sum() / (~positives).sum()):.3f}",
            "pull_matching": f"{float(pull[positives].sum()):.4g}",
            "pull_other": f"{float(pull[~positives].sum()):.4g}",
            "other_pairs_pushed_apart": f"{float((pull[~positives] < 0).float().mean()):.3f}",
            "push_other": f"{float(pull[~positives].clamp(max=0).sum()):.4g}"}


def main() -> None:
    rows = [measure(name, extra) for name, extra in INITS.items()]
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


if __name__ == "__main__":
    main()
