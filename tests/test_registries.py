"""Every entry of every registry, with no table of expected names: a new score, loss, model, dataset
or recipe is tested here the moment it is registered (re-rankers: tests/inference/test_inference_rerankers.py;
one training epoch of every recipe: tests/train/test_recipes.py)."""

from __future__ import annotations

import pytest
import torch

from pcmr import Gaussian
from pcmr.data import DataError, list_datasets, load_dataset
from pcmr.losses import create_loss, list_losses
from pcmr.models import create_model, list_models, load_model, save_model
from pcmr.similarity import list_similarities, paired, pairwise
from pcmr.train import check_config, load_config
from pcmr.train.recipes import list_recipes
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)

NUM_IMAGES, NUM_CAPTIONS, DIM = 3, 5, 6


def _gaussians(seed: int, dtype: torch.dtype = torch.float64) -> tuple[Gaussian, Gaussian, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    leaves = [
        torch.nn.functional.normalize(torch.randn(NUM_IMAGES, DIM, generator=gen, dtype=dtype), dim=1),
        -1.5 + 0.3 * torch.randn(NUM_IMAGES, DIM, generator=gen, dtype=dtype),
        torch.nn.functional.normalize(torch.randn(NUM_CAPTIONS, DIM, generator=gen, dtype=dtype), dim=1),
        -1.5 + 0.3 * torch.randn(NUM_CAPTIONS, DIM, generator=gen, dtype=dtype),
    ]
    leaves = [leaf.requires_grad_() for leaf in leaves]
    return Gaussian(leaves[0], leaves[1]), Gaussian(leaves[2], leaves[3]), leaves


def _positives() -> torch.Tensor:
    positives = torch.zeros(NUM_IMAGES, NUM_CAPTIONS, dtype=torch.bool)
    positives[torch.arange(NUM_CAPTIONS) % NUM_IMAGES, torch.arange(NUM_CAPTIONS)] = True
    return positives


# --------------------------------------------------------------------------- scores
@pytest.mark.parametrize("name", list_similarities())
def test_every_score_shapes_finite_values_and_gradients(name):
    image, caption, leaves = _gaussians(0)
    scores = pairwise(name, image, caption)
    assert scores.shape == (NUM_IMAGES, NUM_CAPTIONS) and torch.isfinite(scores).all()
    grads = torch.autograd.grad(scores.sum(), leaves, allow_unused=True)
    assert grads[0] is not None and grads[2] is not None, "the means receive no gradient"
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    rows = paired(name, image, Gaussian(caption.mean[:NUM_IMAGES], caption.logvar[:NUM_IMAGES]))
    assert rows.shape == (NUM_IMAGES,) and torch.isfinite(rows).all()


@pytest.mark.parametrize("name", list_similarities())
def test_every_score_finite_on_identical_inputs(name):
    image, _, _ = _gaussians(1)
    scores = pairwise(name, image, image)
    assert scores.shape == (NUM_IMAGES, NUM_IMAGES) and torch.isfinite(scores).all()


# --------------------------------------------------------------------------- losses
@pytest.mark.parametrize("name", list_losses())
def test_every_loss_default_config_finite_value_and_gradients(name):
    image, caption, leaves = _gaussians(2)
    loss_fn = create_loss(name).double()
    terms = loss_fn(image=image, caption=caption, positives=_positives(), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(terms["loss"]) and terms["loss"].dim() == 0
    inputs = leaves + list(loss_fn.parameters())
    grads = torch.autograd.grad(terms["loss"], inputs, allow_unused=True)
    assert grads[0] is not None and grads[2] is not None, "the means receive no gradient"
    assert all(g is None or torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_finite_on_identical_inputs(name):
    """Image and caption embeddings equal (a collapsed batch): value and gradients stay finite."""
    image, _, leaves = _gaussians(3)
    caption = Gaussian(image.mean, image.logvar)
    loss_fn = create_loss(name).double()
    positives = torch.eye(NUM_IMAGES, dtype=torch.bool)
    terms = loss_fn(image=image, caption=caption, positives=positives, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(terms["loss"])
    grads = torch.autograd.grad(terms["loss"], leaves[:2], allow_unused=True)
    assert all(g is None or torch.isfinite(g).all() for g in grads)


# --------------------------------------------------------------------------- models
@pytest.mark.parametrize("name", list_models())
def test_every_model_forward_shapes_and_save_load_round_trip(name, tmp_path):
    torch.manual_seed(0)
    model = create_model(name, vocab_size=23).eval()
    batch = make_batch(model.config, num_images=2, num_captions=3)
    with torch.no_grad():
        out = model(batch)
    dim = model.config.embed_dim
    assert out["image"].mean.shape == (2, dim) and out["caption"].mean.shape == (3, dim)
    for gaussian in (out["image"], out["caption"]):
        assert torch.isfinite(gaussian.mean).all()
        assert gaussian.logvar is None or gaussian.logvar.shape[0] == gaussian.mean.shape[0]
    save_model(model, tmp_path / name)
    loaded = load_model(tmp_path / name).eval()
    with torch.no_grad():
        again = loaded(batch)
    for side in ("image", "caption"):
        torch.testing.assert_close(again[side].mean, out[side].mean, rtol=0, atol=0)
        assert (again[side].logvar is None) == (out[side].logvar is None)
        if out[side].logvar is not None:
            torch.testing.assert_close(again[side].logvar, out[side].logvar, rtol=0, atol=0)


# --------------------------------------------------------------------------- datasets
@pytest.mark.parametrize("name", list_datasets())
def test_every_dataset_loads_or_names_what_is_missing(name, tmp_path):
    """The built-in data loads a tiny split; a format reading files raises a DataError naming the path."""
    if name == "shapes":
        split = load_dataset(name, "test", num_test=4, captions_per_image=2, cache=False)
        assert (split.num_images, split.num_captions) == (4, 8)
        assert split.relevance.matrix().shape == (4, 8)
        return
    missing = tmp_path / "no_such_folder"
    with pytest.raises(DataError, match="no_such_folder"):
        load_dataset(name, "test", root=str(missing))


# --------------------------------------------------------------------------- recipes
@pytest.mark.parametrize("name", list(list_recipes()))
def test_every_recipe_loads_validates_and_builds(name):
    config = load_config(list_recipes()[name])
    check_config(config)
    model = create_model(config.model.name, **{**config.model.options, "vocab_size": 11})
    loss = create_loss(config.loss.name, **config.loss.options)
    assert model.config.embed_dim > 0 and loss.similarity_name in list_similarities()
