"""Fixture from PCME's official release (github.com/naver-ai/pcme): its own modules on seeded inputs.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/pcme_release.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/pcme.safetensors \
        --checkpoint tests/fixtures/reference/pcme_release_checkpoint.pth

Runs, in float64 with seeded inputs and weights, the release's
``models.uncertainty_module.UncertaintyModuleImage`` / ``UncertaintyModuleText``,
``models.pie_model.PIENet``, ``criterions.probemb.MCSoftContrastiveLoss`` (with its KL "vib" term
and uniformity term; samples drawn by ``utils.tensor_utils.sample_gaussian_tensors``, whose
normal draws are recorded) and the whole ``models.pcme.PCME`` model with small dimensions. Writes
inputs, weights (the modules' own state_dict names), draws, outputs and the gradients of
``sum(output * cotangent)`` w.r.t. inputs and weights. The ``--checkpoint`` file is the small
PCME model saved in the release's checkpoint layout (``engine/base.py: save_models``); next to it,
``<stem>_fp16.pth`` is the same model as the release saves it after mixed-precision training
(``train.use_fp16``: apex ``amp.initialize(opt_level='O2')`` casts the model, and only the model, to
float16, affine BatchNorm layers excepted, and ``save_models`` writes that state), and the fixture
holds that model's outputs (``model_fp16/``: its float16 weights run in float64). Output folders
are created.

Plumbing stubs (never computation): ``torchvision.models`` gets a stand-in backbone whose input
already is the ``[B, C, 7, 7]`` grid of ResNet's last block (pcmr does not convert the ResNet);
``torchtext`` is an empty module (used only to load GloVe, not called with ``wemb_type: null``).
apex, which does the O2 cast in the release, is not installed: :func:`cast_like_apex_o2` applies the
same cast (apex ``fp16_utils.convert_network``: every floating parameter and buffer of every module
but affine BatchNorm to float16) to the release's model.
"""

from __future__ import annotations

import copy
import importlib
import io
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import AttrDict, add_checkout, release_args, stub_module, write_fixture  # noqa: E402

from pcmr.atomic import atomic_write_bytes  # noqa: E402

REPOSITORY = "https://github.com/naver-ai/pcme"
BATCH, SAMPLES, EMBED, FEATURE, WORD, REGIONS, LENGTH = 3, 4, 8, 10, 6, 5, 5


class GridStandIn(nn.Module):
    """Stand-in for torchvision's ResNet with ``avgpool`` and ``fc`` replaced by identities, as the
    release's EncoderImage leaves it: ``[B, C, 7, 7]`` grid in, ``[B, C * 49]`` out."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, 2)  # only .in_features is read; the release replaces it
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return grid.flatten(1)


def stand_in(pretrained: bool = True) -> GridStandIn:
    return GridStandIn(FEATURE)


def cast_like_apex_o2(model: nn.Module) -> nn.Module:
    """The model cast of apex's O2 level (``keep_batchnorm_fp32``): every floating parameter and
    buffer to float16, except those of affine BatchNorm layers (plumbing standing in for apex)."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.affine:
            continue
        for tensor in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            if tensor.is_floating_point():
                tensor.data = tensor.data.to(torch.float16)
    return model


def _grads(prefix: str, output: torch.Tensor, tensors: dict[str, torch.Tensor], named: dict) -> dict:
    """Gradients of sum(output * cotangent) w.r.t. the named inputs and parameters."""
    cotangent = torch.randn_like(output)
    leaves = list(named.values())
    grads = torch.autograd.grad((output * cotangent).sum(), leaves, allow_unused=True)
    result = {f"{prefix}/cotangent": cotangent}
    for (name, _), grad in zip(named.items(), grads):
        if grad is not None:
            result[f"{prefix}/grad/{name}"] = grad
    return result


def module_fixture(prefix: str, module: nn.Module, inputs: dict[str, torch.Tensor], run) -> dict:
    tensors = {f"{prefix}/weight/{k}": v.detach().clone() for k, v in module.state_dict().items()}
    for key, value in inputs.items():
        tensors[f"{prefix}/input/{key}"] = value.detach().clone()
    output = run(module, inputs)
    tensors[f"{prefix}/output"] = output.detach().clone()
    named = {f"input/{k}": v for k, v in inputs.items() if v.is_floating_point() and v.requires_grad}
    named.update({f"weight/{k}": v for k, v in module.named_parameters()})
    tensors.update(_grads(prefix, output, tensors, named))
    return tensors


def pad_mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    return torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)  # True at padding (release form)


def build(checkout: Path) -> tuple[dict[str, torch.Tensor], dict]:
    add_checkout(checkout)
    stub_module("torchvision.models", resnet_stand_in=stand_in)
    stub_module("torchtext")
    uncertainty = importlib.import_module("models.uncertainty_module")
    pie = importlib.import_module("models.pie_model")
    probemb = importlib.import_module("criterions.probemb")
    tensor_utils = importlib.import_module("utils.tensor_utils")
    pcme = importlib.import_module("models.pcme")
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    lengths = torch.tensor([LENGTH, LENGTH - 1, 2])  # sorted, as the release's collate sorts them

    # --- image uncertainty module h_V^sigma: logsigma = fc(attn_pool(grid)) + fc2(pooled)
    grid = torch.randn(BATCH, REGIONS, FEATURE, requires_grad=True)
    pooled = torch.randn(BATCH, FEATURE, requires_grad=True)
    module = uncertainty.UncertaintyModuleImage(FEATURE, EMBED, FEATURE // 2)
    tensors.update(module_fixture("image_uncertainty", module, {"pooled": pooled, "grid": grid},
                                  lambda m, x: m(x["pooled"], x["grid"])["logsigma"]))

    # --- text uncertainty module h_T^sigma: own bi-GRU over the word embeddings + attention
    words = torch.randn(BATCH, LENGTH, WORD, requires_grad=True)
    module = uncertainty.UncertaintyModuleText(WORD, EMBED, WORD // 2)
    tensors.update(module_fixture(
        "text_uncertainty", module, {"words": words, "lengths": lengths},
        lambda m, x: m(x["words"], pad_mask(x["lengths"], LENGTH), x["lengths"])["logsigma"]))

    # --- PIE-Net (mean head residual): LayerNorm(out + sigmoid(fc(attn_pool(x))))
    out = torch.randn(BATCH, EMBED, requires_grad=True)
    module = pie.PIENet(1, FEATURE, EMBED, FEATURE // 2)
    tensors.update(module_fixture("pienet", module, {"out": out, "grid": grid},
                                  lambda m, x: m(x["out"], x["grid"])[0]))
    module = pie.PIENet(1, WORD, EMBED, WORD // 2)
    tensors.update(module_fixture(
        "pienet_masked", module, {"out": out, "words": words, "lengths": lengths},
        lambda m, x: m(x["out"], x["words"], pad_mask(x["lengths"], LENGTH))[0]))

    # --- MC soft contrastive loss with KL ("vib") and uniformity terms
    config = AttrDict(init_shift=1.5, init_negative_scale=2.0, num_samples=SAMPLES,
                      uniform_lambda=0.5, vib_beta=0.1)
    criterion = probemb.MCSoftContrastiveLoss(config)
    loss_inputs = {
        "image_mean": nn.functional.normalize(torch.randn(BATCH, EMBED), dim=-1).requires_grad_(),
        "caption_mean": nn.functional.normalize(torch.randn(BATCH, EMBED), dim=-1).requires_grad_(),
        "image_logsigma": (0.3 * torch.randn(BATCH, EMBED) - 1.0).requires_grad_(),
        "caption_logsigma": (0.3 * torch.randn(BATCH, EMBED) - 1.0).requires_grad_(),
    }
    draws = {}
    samples = {}
    for side, seed in (("image", 11), ("caption", 12)):
        torch.manual_seed(seed)
        samples[side] = tensor_utils.sample_gaussian_tensors(
            loss_inputs[f"{side}_mean"], loss_inputs[f"{side}_logsigma"], SAMPLES)
        torch.manual_seed(seed)  # the same normal draws, recorded
        draws[side] = torch.randn(BATCH, SAMPLES, EMBED)
    loss, parts = criterion(samples["image"], samples["caption"],
                            loss_inputs["image_logsigma"], loss_inputs["caption_logsigma"])
    for key, value in loss_inputs.items():
        tensors[f"loss/input/{key}"] = value.detach().clone()
    for side, value in draws.items():
        tensors[f"loss/draws/{side}_eps"] = value
    for key in ("i2t_loss", "t2i_loss", "uniform_loss", "vib_loss", "loss"):
        tensors[f"loss/output/{key}"] = torch.tensor(parts[key])
    for key in ("shift", "negative_scale"):
        tensors[f"loss/weight/{key}"] = getattr(criterion, key).detach().clone()
    leaves = list(loss_inputs.values()) + [criterion.shift, criterion.negative_scale]
    names = [f"input/{k}" for k in loss_inputs] + ["weight/shift", "weight/negative_scale"]
    for name, grad in zip(names, torch.autograd.grad(loss, leaves)):
        tensors[f"loss/grad/{name}"] = grad
    loss_config = dict(config)

    # --- the whole PCME model, small, with its checkpoint
    torch.manual_seed(1)
    word2idx = {w: i for i, w in enumerate(["<pad>", "<start>", "<end>", "<unk>", "a", "dog", "on", "the",
                                             "grass", "cat", "sits", "mat"])}
    model_config = AttrDict(name="pcme", embed_dim=EMBED, cnn_type="resnet_stand_in", wemb_type=None,
                            word_dim=WORD, cache_dir=None, img_attention=True, txt_attention=True,
                            img_finetune=False, txt_finetune=False, img_probemb=True, txt_probemb=True,
                            no_sigma_ln=True, n_samples_inference=0)
    model = pcme.PCME(word2idx, model_config).eval()
    images = torch.randn(BATCH, FEATURE, 7, 7)
    captions = torch.tensor([[1, 4, 5, 6, 2], [1, 9, 10, 2, 0], [1, 2, 0, 0, 0]])
    with torch.no_grad():
        output = model(images, captions, lengths)
    tensors["model/input/images"] = images
    tensors["model/input/captions"] = captions
    tensors["model/input/lengths"] = lengths
    for key in ("image_features", "image_logsigma", "caption_features", "caption_logsigma"):
        tensors[f"model/output/{key}"] = output[key].detach().clone()
    checkpoint = {"model": model.state_dict(), "criterion": criterion.state_dict(),
                  "config": {"model": dict(model_config), "criterion": loss_config},
                  "word2idx": word2idx, "metadata": {"epoch": 0}}

    # --- the same model after mixed-precision training (use_fp16: apex O2), as save_models writes it;
    # the criterion is not passed to amp.initialize and stays float32
    half = cast_like_apex_o2(copy.deepcopy(model))
    checkpoint_fp16 = {**checkpoint, "model": half.state_dict(),
                       "criterion": {k: v.float() for k, v in criterion.state_dict().items()},
                       "config": {"model": dict(model_config, use_fp16=True), "criterion": loss_config}}
    with torch.no_grad():
        output = copy.deepcopy(half).double()(images, captions, lengths)  # its float16 weights, in float64
    for key in ("image_features", "image_logsigma", "caption_features", "caption_logsigma"):
        tensors[f"model_fp16/output/{key}"] = output[key].detach().clone()
    info = {"loss_config": loss_config, "model_config": dict(model_config), "word2idx": word2idx}
    return tensors, {"checkpoint": checkpoint, "checkpoint_fp16": checkpoint_fp16, **info}


def save_checkpoint(path: Path, checkpoint: dict) -> None:
    """``torch.save`` of the release's checkpoint dict (its own format, engine/base.py save_models),
    written atomically; the folder is created."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    print(f"wrote {path} ({len(buffer.getvalue())} bytes)")


def main() -> None:
    args, commit = release_args(__doc__, checkpoint=True)
    tensors, info = build(args.checkout)
    save_checkpoint(args.checkpoint, info.pop("checkpoint"))
    save_checkpoint(args.checkpoint.with_name(f"{args.checkpoint.stem}_fp16.pth"), info.pop("checkpoint_fp16"))
    write_fixture(args.out, tensors, {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "tolerance": {"rtol": 1e-9, "atol": 1e-10},
        # the release's distance is sqrt(|x - y|^2 + 1e-6) (criterions/probemb.py batchwise_cdist);
        # pcmr's is the exact distance (floored only at 0): relative differences of a few 1e-7
        "tolerance_loss": {"rtol": 2e-6, "atol": 1e-6},
        "parts": {
            "image_uncertainty": "models/uncertainty_module.py UncertaintyModuleImage.forward -> logsigma",
            "text_uncertainty": "models/uncertainty_module.py UncertaintyModuleText.forward -> logsigma",
            "pienet": "models/pie_model.py PIENet.forward -> out (before L2)",
            "pienet_masked": "models/pie_model.py PIENet.forward with pad mask over word embeddings",
            "loss": "criterions/probemb.py MCSoftContrastiveLoss.forward on samples from "
                    "utils/tensor_utils.py sample_gaussian_tensors (draws recorded as eps)",
            "model": "models/pcme.py PCME.forward (n_samples_inference 0: means), stand-in grid backbone",
            "model_fp16": "the same PCME.forward with the weights of the float16 checkpoint (apex O2 cast), "
                          "run in float64",
        },
        "stubs": {"torchvision.models": "stand-in backbone: input is the [B, C, 7, 7] grid",
                  "torchtext": "empty module (GloVe loading, unused with wemb_type null)",
                  "apex": "not installed; cast_like_apex_o2 applies amp O2's model cast (convert_network)"},
        **info,
    })


if __name__ == "__main__":
    main()
