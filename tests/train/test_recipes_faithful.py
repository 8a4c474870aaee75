"""Each shipped recipe is faithful to its paper: every parameter behind an evaluated score is trained,
the augmentation and the training relevance are stated explicitly."""

from __future__ import annotations

import pytest
import torch
import yaml

from pcmr.train import Trainer, load_config, save_config
from pcmr.train.recipes import list_recipes

RECIPES = sorted(list_recipes())
#: scores that read only the means; every other score reads the log-variances too
MEAN_ONLY_SCORES = {"cosine", "l2"}
#: the recipes whose papers train with Cutout and word dropping (PCME 4.1; PCME++), and CalibPE,
#: whose augmented views estimate its distributions (CalibPE 3.3)
AUGMENTED = {"pcme", "pcme_mu_only", "pcmepp_csd", "calibpe"}


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


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("shapes-cache")


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
    """Cutout and word dropping are stated in every recipe, on only for the papers that use them."""
    raw = yaml.safe_load(list_recipes()[recipe].read_text())
    options = raw["data"]["loader_options"]
    assert {"erase_ratio", "word_dropout"} <= set(options), recipe
    if recipe in AUGMENTED:
        assert (options["erase_ratio"], options["word_dropout"]) == (0.2, 0.1)
    else:
        assert (options["erase_ratio"], options["word_dropout"]) == (0.0, 0.0)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_states_its_papers_training_relevance(recipe):
    """Every paper trained on COCO / Flickr30k pairs: only the written pair is a positive."""
    raw = yaml.safe_load(list_recipes()[recipe].read_text())
    assert raw["data"]["train_relevance"] == "source"
