"""Fixture from HAL's official release (github.com/hardyqr/HAL, "VSE-HAL"): its ``ContrastiveLoss``.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/hal_release.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/hal.safetensors

Runs ``model.ContrastiveLoss.forward`` without the memory bank (``mb_img=None``: the local,
in-batch log-sum-exp loss; the release's defaults ``local_alpha 30``, ``local_ep 0.3``) on
``model.cosine_sim`` of ``model.l2norm`` of seeded float64 embeddings, and records the loss and its
gradients w.r.t. the raw embeddings.

Plumbing stubs: ``torchvision.models`` (image CNNs, unused by the loss) is an empty module, and
``Tensor.cuda`` returns the tensor itself while the loss runs (the release moves an identity mask
to the GPU unconditionally; no GPU here). The memory-bank ("global") branch is not run: pcmr does
not implement it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import add_checkout, release_args, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/hardyqr/HAL"
SETTINGS = {"measure": "cosine", "max_violation": False, "sum_violation": False, "margin": 0.2,
            "global_alpha": 40.0, "global_beta": 40.0, "global_ep_posi": 0.2, "global_ep_nega": 0.1,
            "local_alpha": 30.0, "local_ep": 0.3, "mb_k": 250}


def build(checkout: Path) -> dict[str, torch.Tensor]:
    add_checkout(checkout)
    stub_module("torchvision.models")
    release = importlib.import_module("model")
    torch.manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    criterion = release.ContrastiveLoss(SimpleNamespace(**SETTINGS))
    original_cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # device plumbing only
    try:
        torch.set_default_dtype(torch.float64)  # the release's eye mask follows the default dtype
        for batch in (6, 2):
            images = (0.6 * torch.randn(batch, 5)).requires_grad_()
            captions = (0.6 * torch.randn(batch, 5)).requires_grad_()
            loss = criterion(release.l2norm(images), release.l2norm(captions), None, None, None, None)
            grads = torch.autograd.grad(loss, [images, captions])
            prefix = f"b{batch}"
            tensors[f"{prefix}/input/images"] = images.detach()
            tensors[f"{prefix}/input/captions"] = captions.detach()
            tensors[f"{prefix}/output/loss"] = loss.detach()
            tensors[f"{prefix}/grad/images"] = grads[0]
            tensors[f"{prefix}/grad/captions"] = grads[1]
    finally:
        torch.Tensor.cuda = original_cuda
        torch.set_default_dtype(torch.float32)
    return tensors


def main() -> None:
    args, commit = release_args(__doc__)
    write_fixture(args.out, build(args.checkout), {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "settings": SETTINGS,
        # the release zeroes the diagonal of S inside its sums, which adds exp(-alpha eps) to each;
        # pcmr leaves the positives out: the totals differ by at most 2 exp(-alpha eps) / alpha
        "tolerance": {"rtol": 1e-10, "atol": 1e-12},
        "parts": {"b6": "model.py ContrastiveLoss.forward(im, s, None, None, None, None), batch 6",
                  "b2": "the same, batch 2"},
        "stubs": {"torchvision.models": "empty module (image CNNs, unused by the loss)",
                  "torch.Tensor.cuda": "returns the tensor itself (no GPU; device plumbing)"},
    })


if __name__ == "__main__":
    main()
