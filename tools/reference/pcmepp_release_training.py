"""Fixture of PCME++'s official release (github.com/naver-ai/pcmepp): its whole training step.

Usage (from the repository root, with a checkout of the release at PATH; needs the ``adamp``
package, which the release imports for its optimiser)::

    PYTHONPATH=src python tools/reference/pcmepp_release_training.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/pcmepp_training.safetensors

Three training steps of the release's ``pcmepp/engine.py: PCMEPPModel`` run by its own methods on
the release's configuration file ``configs/pcmepp.yaml`` (read as it is):

- ``configure_optimizers``: the parameter groups (the encoders at ``optim.lr``, the criterion's
  ``shift`` and ``negative_scale`` in a group without weight decay, the backbones' layer-wise decayed
  groups), AdamP with ``optim.wd``, and the ``SequentialLR`` of two ``ConstantLR`` phases;
- ``training_step`` (through ``forward_step``): the identity ``matched`` with the release's label
  smoothing ``augment.label_smoothing`` (no mixup: the stand-in batches are called with
  ``mixup_fn=None``, as the release does for mixup's off epochs), the criterion built by
  ``pcmepp.criterions.get_criterion`` from the ``criterion`` section (``ClosedFormSampledDistanceLoss``:
  ``init_shift``, ``init_negative_scale``, ``vib_beta``, ``smoothness_alpha``), and the loss ramp
  (not applied in epoch 0: ``linear_warmup: false``, the embedding warm-up ramps epoch 2 only);
- then, as Lightning's trainer does with ``gradient_clip_val = train.grad_clip`` (2; the trainer is
  written out, it is not the release's code): ``zero_grad``, ``backward``, ``clip_grad_norm_`` over
  every parameter of the optimiser, ``optimizer.step()``.

The encoders are pcmr's: the ``pcmepp_csd`` recipe's model (the ``pcme`` family with log-variance
heads) at small sizes, in float64, wrapped so that the release calls them as its ``img_enc(images)``
and ``txt_enc(captions, lengths)``, each returning ``{'mean', 'std'}`` with ``std`` the log-variance
(the release's ``std`` entry). The release's own encoders (CLIP ViT with GPO pooling and an
uncertainty transformer) have no pcmr counterpart. The wrapper modules are named ``img_enc`` /
``txt_enc`` and hold no ``backbone`` submodule, so every encoder parameter is in the release's
``lr`` group (its backbone multipliers 0.01 / 0.1 apply to pretrained CLIP towers only).

Records the initial weights (pcmr state-dict names), the batches, the loss of each step and every
parameter after each step, the learning rate of each group, and the criterion's ``shift`` /
``negative_scale``.

Plumbing (never computation): the step builds ``matched`` with ``torch.eye`` / ``torch.ones`` in the
default dtype, so the steps run with float64 as torch's default dtype (in float32 the smoothed target
``1 - 1e-4`` is off by 1.7e-8, which moves a float64 loss by about 1e-6);
``lightning.pytorch`` is a stand-in whose ``LightningModule`` is
``torch.nn.Module`` with the attributes the step reads (``current_epoch``, ``trainer`` with
``num_training_batches`` and the optimiser, a no-op ``log_dict``); ``pcmepp.models.encoders`` (CLIP,
BERT, torchvision, transformers) and ``pcmepp.evaluation`` (``eccv_caption``) are empty stubs, as the
model is not built by the release's ``__init__`` (which loads CLIP weights onto a GPU) but assembled
from the methods above.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import AttrDict, add_checkout, release_args, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/naver-ai/pcmepp"
STEPS = 3
BATCH, IMAGE_SIZE, VOCAB, MAX_LENGTH = 6, 32, 20, 7
#: the pcmepp_csd recipe at small sizes (the test builds pcmr's side with the same overrides)
SMALL = ["model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
         "model.image_encoder={cnn_channels: [4, 4, 4, 4]}"]


def attrs(value):
    """Nested dicts as AttrDicts (the release reads its configs with munch)."""
    if isinstance(value, dict):
        return AttrDict({key: attrs(item) for key, item in value.items()})
    if isinstance(value, list):
        return [attrs(item) for item in value]
    return value


class _LightningModule(torch.nn.Module):
    """Stand-in of ``lightning.pytorch.LightningModule``: what ``training_step`` reads."""

    current_epoch = 0

    def log_dict(self, *args, **kwargs) -> None:
        return None


def load_engine(checkout: Path) -> types.ModuleType:
    add_checkout(checkout)
    importlib.import_module("pcmepp.models")  # the release's packages first (their __init__ files are empty)
    stub_module("lightning.pytorch", LightningModule=_LightningModule)
    stub_module("pcmepp.models.encoders", get_image_encoder=None, get_text_encoder=None)
    stub_module("pcmepp.evaluation", compute_matmul_sims=None, compute_matching_prob_sims=None,
                compute_csd_sims=None, eval_i2t_val=None, eval_t2i_val=None, eval_coco_test_loader=None,
                eval_coco_uncertainty=None)
    return importlib.import_module("pcmepp.engine")


class ImageSide(torch.nn.Module):
    """pcmr's image tower called as the release's ``img_enc(images)`` -> ``{'mean', 'std'}``."""

    def __init__(self, tower: torch.nn.Module) -> None:
        super().__init__()
        self.tower = tower

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        gaussian = self.tower({"images": images})
        return {"mean": gaussian.mean, "std": gaussian.logvar}


class CaptionSide(torch.nn.Module):
    """pcmr's caption tower called as the release's ``txt_enc(captions, lengths)``."""

    def __init__(self, tower: torch.nn.Module) -> None:
        super().__init__()
        self.tower = tower

    def forward(self, captions: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        gaussian = self.tower({"captions": captions, "caption_lengths": lengths.long()})
        return {"mean": gaussian.mean, "std": gaussian.logvar}


def small_model() -> torch.nn.Module:
    from pcmr.models import create_model
    from pcmr.train import load_config
    from pcmr.train.recipes import list_recipes

    config = load_config(list_recipes()["pcmepp_csd"], SMALL)
    torch.manual_seed(0)
    return create_model(config.model.name, vocab_size=VOCAB, **config.model.options).double().train()


def batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        lengths = torch.randint(2, MAX_LENGTH + 1, (BATCH,), generator=generator)
        captions = torch.randint(4, VOCAB, (BATCH, MAX_LENGTH), generator=generator)
        captions[torch.arange(MAX_LENGTH) >= lengths[:, None]] = 0
        images = torch.rand(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator, dtype=torch.float64)
        out.append({"images": images, "captions": captions, "caption_lengths": lengths})
    return out


def build(checkout: Path) -> tuple[dict[str, torch.Tensor], dict]:
    engine = load_engine(checkout)
    criteria = importlib.import_module("pcmepp.criterions")
    config = attrs(yaml.safe_load((checkout / "configs" / "pcmepp.yaml").read_text()))
    model = small_model()
    tensors = {f"init/{name}": value.detach().clone() for name, value in model.state_dict().items()}
    data = batches()
    for step, batch in enumerate(data):
        tensors.update({f"batch/{step}/{key}": value for key, value in batch.items()})

    release = engine.PCMEPPModel.__new__(engine.PCMEPPModel)
    torch.nn.Module.__init__(release)
    release.img_enc = ImageSide(model.image_tower)
    release.txt_enc = CaptionSide(model.caption_tower)
    release.criterion = criteria.get_criterion(**config.criterion).double()
    release.mixup_fn = None
    release.opt = config
    configured = release.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]
    release.trainer = AttrDict(num_training_batches=STEPS, optimizers=[optimizer])
    groups = [{"lr": group["lr"], "weight_decay": group["weight_decay"], "size": len(group["params"])}
              for group in optimizer.param_groups]
    names = {id(p): name for name, p in release.named_parameters()}
    group_of = {names[id(p)]: index for index, group in enumerate(optimizer.param_groups) for p in group["params"]}
    torch.set_default_dtype(torch.float64)  # the step's own torch.eye / torch.ones (its matched) in float64
    for step, batch in enumerate(data):
        release_batch = (batch["images"], batch["captions"], batch["caption_lengths"].tolist(),
                         list(range(step * BATCH, (step + 1) * BATCH)), list(range(BATCH)))
        loss = release.training_step(release_batch, step)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]],
                                       config.train.grad_clip)
        optimizer.step()
        tensors[f"step/{step}/loss"] = loss.detach().clone()
        for name, value in model.state_dict().items():
            tensors[f"step/{step}/model/{name}"] = value.detach().clone()
        tensors[f"step/{step}/criterion/shift"] = release.criterion.shift.detach().clone()
        tensors[f"step/{step}/criterion/negative_scale"] = release.criterion.negative_scale.detach().clone()
    torch.set_default_dtype(torch.float32)
    scheduler.step()  # end of epoch 0: the lr of epoch 1 (still the first ConstantLR phase)
    tensors["lr/epoch1"] = torch.tensor([group["lr"] for group in optimizer.param_groups], dtype=torch.float64)
    info = {"groups": groups, "criterion_groups": {k: v for k, v in group_of.items() if k.startswith("criterion")},
            "config": {"optim": dict(config.optim), "criterion": dict(config.criterion),
                       "label_smoothing": config.augment.label_smoothing, "grad_clip": config.train.grad_clip,
                       "embedding_warmup_epochs": config.train.embedding_warmup_epochs,
                       "linear_warmup": config.train.linear_warmup}}
    return tensors, info


def main() -> None:
    args, commit = release_args(__doc__)
    tensors, info = build(args.checkout)
    write_fixture(args.out, tensors, {
        "repository": REPOSITORY, "commit": commit, "dtype": "float64", "steps": STEPS, "batch": BATCH,
        "image_size": IMAGE_SIZE, "vocab": VOCAB, "pcmr_overrides": SMALL, **info,
        "tolerance": {"rtol": 1e-9, "atol": 1e-12},
        "parts": "pcmepp/engine.py PCMEPPModel.configure_optimizers, training_step, forward_step; "
                 "pcmepp/criterions/__init__.py get_criterion; pcmepp/criterions/pcmepp.py "
                 "ClosedFormSampledDistanceLoss; configs/pcmepp.yaml; adamp.AdamP",
        "stubs": {"lightning.pytorch": "LightningModule = torch.nn.Module with current_epoch 0 and a no-op log_dict",
                  "pcmepp.models.encoders": "empty (the encoders are pcmr's, wrapped)",
                  "pcmepp.evaluation": "empty (eccv_caption; not used by a training step)"},
    })


if __name__ == "__main__":
    main()
