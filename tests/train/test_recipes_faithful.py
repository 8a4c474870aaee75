"""Each shipped recipe is faithful to its paper: every parameter behind an evaluated score is trained,
the augmentation and the training relevance are stated explicitly."""

from __future__ import annotations

import pytest
import torch
import yaml

from pcmr.data.text import UNK_ID
from pcmr.train import Trainer, load_config, save_config
from pcmr.train.adamp import AdamP
from pcmr.train.recipes import list_recipes, shipped_recipe_dir
from pcmr.train.schedules import optimizer_name

#: the recipes on the built-in data (the real-data ones, recipes/real_data/, have tests of their own:
#: tests/train/test_recipes_real_data.py)
RECIPES = sorted(name for name, path in list_recipes().items() if path.parent == shipped_recipe_dir())
#: scores that read only the means; every other score reads the log-variances too
MEAN_ONLY_SCORES = {"cosine", "l2"}
#: the recipes whose papers train with Cutout and word dropping (PCME 4.1; PCME++), and CalibPE,
#: whose augmented views estimate its distributions (CalibPE 3.3)
AUGMENTED = {"pcme", "pcme_mu_only", "pcmepp_csd", "pcmepp_csd_small_init", "calibpe"}
#: CalibPE without Cutout: word dropping makes its caption views, its image views are equal
VIEWS_WITHOUT_CUTOUT = {"calibpe_no_cutout"}
#: the recipes that apply them as the PCME release does
RELEASE_AUGMENTED = {"pcme", "pcme_mu_only", "pcmepp_csd", "pcmepp_csd_small_init"}


def tiny_overrides(cache_dir) -> list[str]:
    return [
        "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=10",
        "train.epochs=1",
        "train.progress=false",
        "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ]


def _score_dependencies(model, batch, use_logvar: bool) -> set[int]:
    """Ids of the model parameters that the evaluated embeddings (means, and log-variances when a
    score reads them) depend on, found by differentiating a random projection of them."""
    generator = torch.Generator().manual_seed(0)
    outputs = []
    for gaussian in (model.encode_images(batch), model.encode_captions(batch)):
        outputs.append(gaussian.mean)
        if use_logvar and gaussian.logvar is not None:
            outputs.append(gaussian.logvar)
    projection = sum((out * torch.randn(out.shape, generator=generator)).sum() for out in outputs)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(projection, params, allow_unused=True)
    return {id(p) for p, g in zip(params, grads) if g is not None and bool(g.abs().sum() > 0)}


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_parameter_behind_an_evaluated_score_gets_a_gradient(recipe, tmp_path, cache_dir):
    """One training step of the recipe gives a non-zero gradient to every parameter that one of its
    evaluation scores depends on (CalibPE once evaluated W2/ELK/KL from variance heads it never trained)."""
    config = load_config(list_recipes()[recipe], tiny_overrides(cache_dir))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    trainer = Trainer(config, run_dir)
    model, loss_fn = trainer.model, trainer.loss_fn
    batch = next(iter(trainer.loader))
    model.train()
    outputs = model(batch)
    loss_fn(**outputs, positives=batch["relevance"])["loss"].backward()
    use_logvar = any(name not in MEAN_ONLY_SCORES for name in config.eval.similarities)
    model.eval()
    needed = _score_dependencies(model, batch, use_logvar)
    assert needed
    untrained = sorted(name for name, p in model.named_parameters()
                       if id(p) in needed and (p.grad is None or not bool(p.grad.abs().sum() > 0)))
    assert not untrained, f"{recipe}: evaluated {config.eval.similarities} but no gradient reaches {untrained}"
    for name, parameter in loss_fn.named_parameters():  # e.g. PCME's a, b, which match_prob uses
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_states_its_papers_augmentation(recipe):
    """Cutout and word dropping are stated in every recipe, on only for the papers that use them; the
    PCME family applies them as the PCME release does (Cutout with probability 0.2 over 2-33 % of
    the image, aspect ratio in [0.3, 1/0.3]; <unk> with probability 0.1, then floor(0.1 L) deletions)."""
    raw = yaml.safe_load(list_recipes()[recipe].read_text())
    options = raw["data"]["loader_options"]
    assert {"erase_ratio", "word_dropout"} <= set(options), recipe
    if recipe in RELEASE_AUGMENTED:
        assert options["erase_prob"] == 0.2 and options["erase_aspect"] == 0.3
        assert options["erase_ratio"] == pytest.approx([0.02, 1 / 3])
        assert (options["word_dropout"], options["word_dropout_rule"]) == (0.1, "unk_then_delete")
    elif recipe in AUGMENTED:
        assert (options["erase_ratio"], options["word_dropout"]) == (0.2, 0.1)
    elif recipe in VIEWS_WITHOUT_CUTOUT:
        assert (options["erase_ratio"], options["word_dropout"]) == (0.0, 0.1)
    else:
        assert (options["erase_ratio"], options["word_dropout"]) == (0.0, 0.0)


PCME_RELEASE_TRAINING = {"train.warmup_schedule": "cosine", "train.finetune_lr_factor": 1.0,
                         "train.restart_optimizer": True, "train.schedule_every": "epoch",
                         "train.grad_clip_scope": "model"}

#: the optimisation each recipe states, from its paper or release (docs/losses.md, "Recipes against
#: their papers and releases"); a recipe's values must match one setting, never a mix
RELEASE_SETTINGS = {
    # PCME's CUB setting (App. C.2; naver-ai/pcme config/cub/pcme_cub.yaml): AdamP, lr 1e-4, weight
    # decay 0, lambda_KL 1e-3, lambda_unif 10, a = b = 5 in the release's sigmoid(2x), 10 here
    # and its two phases (train_cub.py: a cosine per phase stepped per epoch, a fresh AdamP for the
    # fine-tune at lr x finetune_lr_decay = 1), clipping model.parameters() only
    "pcme": {"train.optimizer": "adamp", "train.lr": 1e-4, "train.weight_decay": 0.0, "train.schedule": "cosine",
             "train.grad_clip": 2.0, "loss.lambda_kl": 1e-3, "loss.lambda_unif": 10.0, "loss.init_a": 10.0,
             "loss.init_b": 10.0, "loss.num_samples": 7, **PCME_RELEASE_TRAINING},
    "pcme_mu_only": {"train.optimizer": "adamp", "train.lr": 1e-4, "train.weight_decay": 0.0,
                     "train.schedule": "cosine", "loss.lambda_unif": 10.0, "loss.init_a": 10.0, "loss.init_b": 10.0,
                     **PCME_RELEASE_TRAINING},
    # naver-ai/pcmepp configs/pcmepp.yaml: AdamP, lr 5e-4, wd 1e-4, x 0.1 after epoch 15 of 25, clip 2
    "pcmepp_csd": {"train.optimizer": "adamp", "train.lr": 5e-4, "train.weight_decay": 1e-4, "train.epochs": 25,
                   "train.schedule": "step", "train.step_period": 15, "train.step_gamma": 0.1, "train.grad_clip": 2.0,
                   "loss.init_a": 5.0, "loss.init_b": 5.0, "loss.lambda_kl": 1e-4, "loss.lambda_pseudo": 0.1,
                   "loss.label_smoothing": 1e-4},
    # yalesong/pvse train.py / README: Adam with AMSGrad, lr 2e-4, wd 0, clip 2, 30 epochs, margin 0.1;
    # ReduceLROnPlateau(factor 0.5) left in mode 'min' and fed the rising rsum (tests/reference/test_reference_pvse.py)
    "pvse": {"train.optimizer": "adam", "train.amsgrad": True, "train.lr": 2e-4, "train.weight_decay": 0.0,
             "train.schedule": "plateau", "train.plateau_patience": 10, "train.plateau_factor": 0.5,
             "train.grad_clip": 2.0, "train.epochs": 30, "loss.margin": 0.1,
             "loss.lambda_div": 0.1, "loss.lambda_mmd": 0.01},
    # fartashf/vsepp train.py: Adam, lr 2e-4, / 10 at epoch 15, 30 epochs, clip 2, margin 0.2
    "vsepp_max": {"train.optimizer": "adam", "train.lr": 2e-4, "train.weight_decay": 0.0, "train.schedule": "step",
                  "train.step_period": 15, "train.step_gamma": 0.1, "train.epochs": 30, "train.grad_clip": 2.0,
                  "loss.margin": 0.2},
    # the HAL paper's SUM setting (§4): lr 1e-3, / 10 every 10 epochs
    "vsepp_sum": {"train.optimizer": "adam", "train.lr": 1e-3, "train.weight_decay": 0.0, "train.schedule": "step",
                  "train.step_period": 10, "train.step_gamma": 0.1, "train.epochs": 30, "train.grad_clip": 2.0,
                  "loss.margin": 0.2},
}


@pytest.mark.parametrize("recipe", sorted(RELEASE_SETTINGS))
def test_recipe_follows_one_setting_of_its_paper_or_release(recipe):
    config = load_config(list_recipes()[recipe])
    # the step period in epochs at the recipe's own epoch count (recipes give it as a share of training)
    sections = {"train": {**config.train.__dict__, "step_period": config.train.step_period()}, "loss": config.loss.to_dict()}
    for key, expected in RELEASE_SETTINGS[recipe].items():
        section, name = key.split(".")
        assert sections[section].get(name) == pytest.approx(expected), f"{recipe}: {key}"


def test_pcme_recipe_trains_with_unk_and_adamp(tmp_path, cache_dir):
    """The pcme recipe's training batches hold <unk> (about 10 % of the words: the vocabulary comes from
    the training captions, so nothing else is unknown) and its optimiser is AdamP."""
    config = load_config(list_recipes()["pcme"], tiny_overrides(cache_dir))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    trainer = Trainer(config, run_dir)
    unk = words = 0
    for epoch in range(4):
        trainer.loader.batch_sampler.epoch = epoch
        for batch in trainer.loader:
            for row, length in enumerate(batch["caption_lengths"].tolist()):
                unk += int((batch["captions"][row, 1 : length - 1] == UNK_ID).sum())
                words += length - 2
    assert words > 500 and 0.05 < unk / words < 0.16
    assert isinstance(trainer.optimizer, AdamP) and optimizer_name(trainer.optimizer) == "adamp"


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_states_its_papers_training_relevance(recipe):
    """Every paper trained on COCO / Flickr30k pairs: only the written pair is a positive."""
    raw = yaml.safe_load(list_recipes()[recipe].read_text())
    assert raw["data"]["train_relevance"] == "source"
