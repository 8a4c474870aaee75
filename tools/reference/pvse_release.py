"""Fixture from PVSE's official release (github.com/yalesong/pvse): its ``PVSELoss``.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/pvse_release.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/pvse.safetensors

Runs ``loss.PVSELoss`` (MIL triplet on the K x K max-pooled cosine scores, diversity and MMD
terms) with the release's COCO settings (margin 0.1, max_violation, div_weight 0.1, mmd_weight
0.01, reduction mean) on seeded float64 points (``loss.l2norm`` of random vectors, as the PVSE
encoders hand them over) and residuals, K = 2 and K = 1; records each term and the gradients of the
total w.r.t. the raw points and residuals (``loss.py`` imports torch and numpy only). Also runs
``model.PIENet`` with K = 2 heads over padded word embeddings (the caption side of PVSE's model):
its output before the L2 normalisation and its residuals, with gradients. And ``model.EncoderText``
(word embedding, bi-GRU, PIE-Net with K = 2, L2) in both of its modes: the default (the sentence
feature is the GRU's final states) and ``--legacy`` (the GRU's outputs at the last word, which the
release's COCO checkpoints use), with dropout 0 and ``wemb_type`` None.

Plumbing stubs for ``model.py``: ``torchvision`` and ``torchtext`` are empty modules (the image
CNNs and GloVe loading; PIE-Net uses neither).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import add_checkout, release_args, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/yalesong/pvse"
SETTINGS = {"margin": 0.1, "max_violation": True, "div_weight": 0.1, "mmd_weight": 0.01, "order": False}


def build(checkout: Path) -> dict[str, torch.Tensor]:
    add_checkout(checkout)
    release = importlib.import_module("loss")
    torch.manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    batch, dim = 4, 5
    for k in (2, 1):
        criterion = release.PVSELoss(SimpleNamespace(num_embeds=k, **SETTINGS))
        raw = {name: torch.randn(batch, k, dim, dtype=torch.float64, requires_grad=True)
               for name in ("image_points", "caption_points", "image_residuals", "caption_residuals")}
        img = release.l2norm(raw["image_points"])
        txt = release.l2norm(raw["caption_points"])
        if k == 1:
            img, txt = img.squeeze(1), txt.squeeze(1)  # the release's encoders return [B, D] for K = 1
        loss, parts = criterion(img, txt, raw["image_residuals"], raw["caption_residuals"])
        prefix = f"k{k}"
        for name, value in raw.items():
            tensors[f"{prefix}/input/{name}"] = value.detach()
        tensors[f"{prefix}/output/loss"] = loss.detach()
        for name in ("ranking_loss", "div_loss", "mmd_loss"):
            if name in parts:
                tensors[f"{prefix}/output/{name}"] = parts[name].detach()
        for name, grad in zip(raw, torch.autograd.grad(loss, list(raw.values()), allow_unused=True)):
            if grad is not None:
                tensors[f"{prefix}/grad/{name}"] = grad
    model = release_model()
    tensors.update(pienet(model))
    for legacy in (False, True):
        tensors.update(encoder_text(model, legacy))
    return tensors


def release_model():
    stub_module("torchvision")
    stub_module("torchtext")
    return importlib.import_module("model")


def pienet(model) -> dict[str, torch.Tensor]:
    """PIE-Net with K = 2 heads over padded word embeddings; gradients of sum(out * cotangent)."""
    torch.manual_seed(1)
    batch, length, word_dim, embed_dim = 3, 5, 6, 8
    module = model.PIENet(2, word_dim, embed_dim, word_dim // 2).double()
    words = torch.randn(batch, length, word_dim, dtype=torch.float64, requires_grad=True)
    out = torch.randn(batch, embed_dim, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([5, 3, 1])
    pad_mask = torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)  # True at padding
    output, _, residual = module(out, words, pad_mask)
    cotangent = torch.randn_like(output)
    tensors = {f"pienet/weight/{k}": v.detach().clone() for k, v in module.state_dict().items()}
    tensors.update({"pienet/input/words": words.detach(), "pienet/input/out": out.detach(),
                    "pienet/input/lengths": lengths, "pienet/output": output.detach(),
                    "pienet/residual": residual.detach(), "pienet/cotangent": cotangent})
    names = ["input/words", "input/out"] + [f"weight/{k}" for k, _ in module.named_parameters()]
    leaves = [words, out] + [v for _, v in module.named_parameters()]
    for name, grad in zip(names, torch.autograd.grad((output * cotangent).sum(), leaves)):
        tensors[f"pienet/grad/{name}"] = grad
    return tensors


def encoder_text(model, legacy: bool) -> dict[str, torch.Tensor]:
    """The release's caption encoder (``EncoderText``) with K = 2, in its default or legacy mode."""
    torch.manual_seed(2)
    words = ["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "on", "grass", "cat"]
    opt = SimpleNamespace(wemb_type=None, word_dim=6, embed_size=8, num_embeds=2, txt_attention=True,
                          txt_finetune=True, dropout=0.0, legacy=legacy)
    module = model.EncoderText({w: i for i, w in enumerate(words)}, opt).double().eval()
    captions = torch.tensor([[1, 4, 5, 6, 2], [1, 8, 7, 2, 0], [1, 2, 0, 0, 0]])
    lengths = torch.tensor([5, 4, 2])  # sorted, as the release's collate sorts them (pack_padded_sequence)
    with torch.no_grad():
        out, _, residual = module(captions, lengths)
    prefix = "encoder_text_legacy" if legacy else "encoder_text"
    tensors = {f"{prefix}/weight/{k}": v.detach().clone() for k, v in module.state_dict().items()}
    tensors.update({f"{prefix}/input/captions": captions, f"{prefix}/input/lengths": lengths,
                    f"{prefix}/output": out.detach(), f"{prefix}/residual": residual.detach()})
    return tensors


def main() -> None:
    args, commit = release_args(__doc__)
    write_fixture(args.out, build(args.checkout), {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "settings": SETTINGS,
        "tolerance": {"rtol": 1e-9, "atol": 1e-11},
        "parts": {"k2": "loss.py PVSELoss.forward, num_embeds 2 (ranking + diversity + MMD)",
                  "k1": "loss.py PVSELoss.forward, num_embeds 1 (ranking only)",
                  "pienet": "model.py PIENet.forward, 2 heads, padded word embeddings (output before L2)",
                  "encoder_text": "model.py EncoderText.forward, num_embeds 2, dropout 0, legacy False "
                                  "(final GRU states)",
                  "encoder_text_legacy": "model.py EncoderText.forward, num_embeds 2, dropout 0, legacy True "
                                         "(GRU outputs at the last word)"},
        "stubs": {"torchvision": "empty module (image CNNs, unused by PIE-Net)",
                  "torchtext": "empty module (GloVe loading, unused with wemb_type None)"},
    })


if __name__ == "__main__":
    main()
