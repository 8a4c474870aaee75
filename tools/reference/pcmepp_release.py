"""Fixture from PCME++'s official release (github.com/naver-ai/pcmepp): its CSD loss.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/pcmepp_release.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/pcmepp.safetensors

Runs ``pcmepp.criterions.pcmepp.ClosedFormSampledDistanceLoss`` (closed-form sampled distance,
binary cross-entropy counted in both directions, KL "vib" term, pseudo-positives with
``smoothness_alpha``) on seeded float64 means and log-variances (the release's ``std`` entry holds
a log-variance: its distance adds ``exp(std)``), with ``matched`` the identity as its training
step builds it. Settings: the release's ``configs/pcmepp.yaml`` (init 5 / 5, smoothness 0.1) with
a larger ``vib_beta`` (0.1) so the KL term weighs in the fixture; and a second run without the
pseudo-positives and the KL. Two more runs give ``matched`` smoothed labels, as the release's
training step does (``pcmepp/engine.py`` ``forward_step``: ``(1 - eps) * matched + eps * (1 -
matched)`` with ``eps`` its ``augment.label_smoothing``; its mixup targets carry the same values for
the pairs they do not mix): ``smoothed`` (eps 0.05, so that the smoothing weighs) and ``released``
(``configs/pcmepp.yaml`` as it is: init 5 / 5, ``vib_beta`` 1e-4, ``smoothness_alpha`` 0.1, eps
1e-4). That one line of ``engine.py`` is written out here (the engine is a Lightning module that
needs the release's data and CLIP backbone to be built); the loss is the release's own. Records the
loss, the KL term and the gradients w.r.t. means, log-variances, shift and negative scale. No stub
needed (the criterion imports torch only).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import add_checkout, release_args, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/naver-ai/pcmepp"
RUNS = {"full": {"init_shift": 5.0, "init_negative_scale": 5.0, "vib_beta": 0.1, "smoothness_alpha": 0.1},
        "plain": {"init_shift": 2.0, "init_negative_scale": 1.5, "vib_beta": 0.0, "smoothness_alpha": 0.0},
        "smoothed": {"init_shift": 5.0, "init_negative_scale": 5.0, "vib_beta": 0.1, "smoothness_alpha": 0.1,
                     "label_smoothing": 0.05},
        "released": {"init_shift": 5.0, "init_negative_scale": 5.0, "vib_beta": 1e-4, "smoothness_alpha": 0.1,
                     "label_smoothing": 1e-4}}


def smoothed_matched(batch: int, eps: float) -> torch.Tensor:
    """``matched`` as the release's training step gives it to the criterion (pcmepp/engine.py)."""
    matched = torch.eye(batch, dtype=torch.float64)
    if not eps:
        return matched
    return (1 - eps) * matched + eps * (torch.ones(batch, batch, dtype=torch.float64) - matched)


def build(checkout: Path) -> dict[str, torch.Tensor]:
    add_checkout(checkout)
    release = importlib.import_module("pcmepp.criterions.pcmepp")
    torch.manual_seed(0)
    batch, dim = 6, 5
    inputs = {
        "image_mean": torch.nn.functional.normalize(torch.randn(batch, dim, dtype=torch.float64), dim=-1),
        "caption_mean": torch.nn.functional.normalize(torch.randn(batch, dim, dtype=torch.float64), dim=-1),
        "image_logvar": 0.5 * torch.randn(batch, dim, dtype=torch.float64) - 3.0,
        "caption_logvar": 0.5 * torch.randn(batch, dim, dtype=torch.float64) - 3.0,
    }
    tensors = {f"input/{k}": v.clone() for k, v in inputs.items()}
    for run, settings in RUNS.items():
        leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
        loss_settings = {k: v for k, v in settings.items() if k != "label_smoothing"}
        criterion = release.ClosedFormSampledDistanceLoss(**loss_settings).double()
        image = {"mean": leaves["image_mean"], "std": leaves["image_logvar"]}
        caption = {"mean": leaves["caption_mean"], "std": leaves["caption_logvar"]}
        matched = smoothed_matched(batch, settings.get("label_smoothing", 0.0))
        loss, parts = criterion(image, caption, matched=matched)
        tensors[f"{run}/output/loss"] = loss.detach()
        if "loss/vib_loss" in parts:
            tensors[f"{run}/output/vib_loss"] = parts["loss/vib_loss"].detach()
        targets = list(leaves.values()) + [criterion.shift, criterion.negative_scale]
        names = [f"input/{k}" for k in leaves] + ["weight/shift", "weight/negative_scale"]
        for name, grad in zip(names, torch.autograd.grad(loss, targets)):
            tensors[f"{run}/grad/{name}"] = grad
    return tensors


def main() -> None:
    args, commit = release_args(__doc__)
    write_fixture(args.out, build(args.checkout), {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "runs": RUNS,
        "tolerance": {"rtol": 1e-10, "atol": 1e-12},
        "parts": {run: "pcmepp/criterions/pcmepp.py ClosedFormSampledDistanceLoss.forward(img_emb, cap_emb, "
                       + ("matched=(1 - eps) eye + eps (1 - eye), pcmepp/engine.py forward_step)"
                          if RUNS[run].get("label_smoothing") else "matched=eye)") for run in RUNS},
        "stubs": {},
    })


if __name__ == "__main__":
    main()
