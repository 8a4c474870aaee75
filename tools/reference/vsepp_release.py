"""Fixture from VSE++'s official release (github.com/fartashf/vsepp): its ``ContrastiveLoss``.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/vsepp_release.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/vsepp.safetensors

Runs ``model.ContrastiveLoss(margin=0.2, max_violation=False | True)`` (SUM and MAX) on
``model.l2norm`` of seeded float64 embeddings, as VSE++'s encoders hand them over, for batch sizes
5 and 1, and records the loss and its gradients w.r.t. the raw embeddings.

Plumbing stub: ``torchvision.models`` (imported by ``model.py`` for the image CNNs, not used by
the loss) is an empty module.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import add_checkout, release_args, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/fartashf/vsepp"
MARGIN = 0.2


def build(checkout: Path) -> dict[str, torch.Tensor]:
    add_checkout(checkout)
    stub_module("torchvision.models")
    release = importlib.import_module("model")
    torch.manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    for batch in (5, 1):
        images = torch.randn(batch, 6, dtype=torch.float64, requires_grad=True)
        captions = torch.randn(batch, 6, dtype=torch.float64, requires_grad=True)
        for mode, max_violation in (("sum", False), ("max", True)):
            criterion = release.ContrastiveLoss(margin=MARGIN, max_violation=max_violation)
            loss = criterion(release.l2norm(images), release.l2norm(captions))
            grads = torch.autograd.grad(loss, [images, captions])
            prefix = f"b{batch}/{mode}"
            tensors[f"{prefix}/output/loss"] = loss.detach()
            tensors[f"{prefix}/grad/images"] = grads[0]
            tensors[f"{prefix}/grad/captions"] = grads[1]
        tensors[f"b{batch}/input/images"] = images.detach()
        tensors[f"b{batch}/input/captions"] = captions.detach()
    return tensors


def main() -> None:
    args, commit = release_args(__doc__)
    write_fixture(args.out, build(args.checkout), {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "margin": MARGIN,
        "tolerance": {"rtol": 1e-10, "atol": 1e-12},
        "parts": {"sum": "model.py ContrastiveLoss(margin, max_violation=False) on model.py l2norm(x)",
                  "max": "model.py ContrastiveLoss(margin, max_violation=True) on model.py l2norm(x)"},
        "stubs": {"torchvision.models": "empty module (image CNNs, unused by the loss)"},
    })


if __name__ == "__main__":
    main()
