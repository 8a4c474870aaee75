"""pcmr.models families, parametrised over list_models(): shapes, which side is Gaussian, gradients,
finiteness, determinism, views, float64 and the save/load round trip (CPU only)."""

from __future__ import annotations

import pytest
import torch

import pcmr
from pcmr import Gaussian
from pcmr.models import create_model, list_models, load_model, save_model
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)

# Which side is Gaussian in each family (PCME §3; ProbVSE §4.1; GCIE §2.1-2.3; baselines), and D.
EXPECTED = {
    "pcme": (True, True, 128),
    "pcme_mu_only": (False, False, 128),
    "probvse": (True, True, 128),
    "probvsrn": (True, True, 128),
    "gce": (False, True, 128),
    "gie": (True, False, 128),
    "gcie": (True, True, 128),
    "vsepp": (False, False, 128),
    "vsepp_wide": (False, False, 256),
    "pvse": (False, False, 128),
}
# Extra training outputs of a family (the tensors its loss takes), beyond "image" and "caption".
EXTRA_OUTPUTS = {"pvse": {"image_points", "image_residuals", "caption_points", "caption_residuals"}}
VOCAB = 37  # prime, small


def _create(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return create_model(name, vocab_size=VOCAB, **overrides)


def test_list_models_names_every_family_of_the_papers():
    assert set(EXPECTED) <= set(list_models())  # registered families beyond these are tested from their config
    assert pcmr.list_models() == list_models() == sorted(list_models())


def test_vsepp_wide_doubles_the_embedding_size():
    assert EXPECTED["vsepp_wide"][2] == 2 * EXPECTED["vsepp"][2]
    assert _create("vsepp_wide").config.embed_dim == 2 * _create("vsepp").config.embed_dim


@pytest.mark.parametrize("name", list_models())
def test_forward_shapes_and_gaussian_sides(name):
    model = _create(name)
    # the papers' families against their known sides; any other family against its own config
    config = model.config
    image_gaussian, caption_gaussian, dim = EXPECTED.get(
        name, (config.image_head.probabilistic, config.caption_head.probabilistic, config.embed_dim))
    batch = make_batch(model.config, num_images=3, num_captions=5)
    out = model(batch)
    assert set(out) == {"image", "caption"} | EXTRA_OUTPUTS.get(name, set())
    image, caption = out["image"], out["caption"]
    assert isinstance(image, Gaussian) and isinstance(caption, Gaussian)
    assert image.mean.shape == (3, dim) and caption.mean.shape == (5, dim)
    assert (image.logvar is not None) == image_gaussian
    assert (caption.logvar is not None) == caption_gaussian
    for gaussian in (image, caption):
        if gaussian.logvar is not None:
            assert gaussian.logvar.shape == gaussian.mean.shape  # every family defaults to ellipsoidal
            assert torch.isfinite(gaussian.logvar).all()
        assert torch.isfinite(gaussian.mean).all()
    # encode_images / encode_captions give the same as forward (eval mode: no batch statistics)
    model.eval()
    out = model(batch)
    assert torch.equal(model.encode_images(batch).mean, out["image"].mean)
    assert torch.equal(model.encode_captions(batch).mean, out["caption"].mean)


@pytest.mark.parametrize("name", list_models())
def test_every_trainable_parameter_gets_a_gradient(name):
    model = _create(name)
    batch = make_batch(model.config, num_views=2)
    out = model(batch)
    loss = out["image_views"].sum() + out["caption_views"].sum()
    for key in ("image", "caption"):
        loss = loss + out[key].mean.sum()
        if out[key].logvar is not None:
            loss = loss + out[key].logvar.sum()
    loss.backward()
    for parameter_name, parameter in model.named_parameters():
        assert parameter.requires_grad
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name
        assert parameter.grad.abs().sum() > 0, parameter_name


@pytest.mark.parametrize("name", list_models())
def test_deterministic_given_a_seed(name):
    first, second, other = _create(name, seed=3), _create(name, seed=3), _create(name, seed=4)
    for (key, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), key
    assert any(not torch.equal(a, c) for a, c in zip(first.parameters(), other.parameters()))
    batch = make_batch(first.config)
    out_a, out_b = first(batch), second(batch)
    for key in ("image", "caption"):
        assert torch.equal(out_a[key].mean, out_b[key].mean)
        if out_a[key].logvar is not None:
            assert torch.equal(out_a[key].logvar, out_b[key].logvar)


@pytest.mark.parametrize("name", list_models())
def test_views_are_the_means_of_each_view(name):
    model = _create(name).eval()
    batch = make_batch(model.config, num_images=2, num_captions=3, num_views=2)
    out = model(batch)
    dim = model.config.embed_dim
    assert out["image_views"].shape == (2, 2, dim) and out["caption_views"].shape == (3, 2, dim)
    for view in range(2):
        images = model.encode_images({"images": batch["image_views"][:, view]}).mean
        captions = model.encode_captions(
            {
                "captions": batch["caption_views"][:, view],
                "caption_lengths": batch["caption_view_lengths"][:, view],
            }
        ).mean
        torch.testing.assert_close(out["image_views"][:, view], images, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out["caption_views"][:, view], captions, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list_models())
def test_save_load_round_trip_gives_identical_outputs(name, tmp_path):
    model = _create(name)
    batch = make_batch(model.config)
    model(batch)  # train-mode pass: BatchNorm running statistics move away from their initial values
    model.eval()
    expected = model(batch)
    save_model(model, tmp_path / "saved", extra_json={"vocabulary": {"words": ["<pad>", "<unk>"]}})
    restored = load_model(tmp_path / "saved")
    assert not restored.training
    assert restored.config == model.config
    got = restored(batch)
    for key in ("image", "caption"):
        assert torch.equal(got[key].mean, expected[key].mean)
        assert (got[key].logvar is None) == (expected[key].logvar is None)
        if got[key].logvar is not None:
            assert torch.equal(got[key].logvar, expected[key].logvar)
    for (key, a), (_, b) in zip(model.state_dict().items(), restored.state_dict().items()):
        assert torch.equal(a, b), key


@pytest.mark.parametrize("name", ["pcme", "probvsrn", "gce"])
def test_float64_on_request(name, tmp_path):
    model = _create(name).double().eval()
    batch = make_batch(model.config)
    batch["images"] = batch["images"].double()
    out = model(batch)
    assert out["image"].dtype == torch.float64 and out["caption"].dtype == torch.float64
    save_model(model, tmp_path)
    restored = load_model(tmp_path)
    assert next(restored.parameters()).dtype == torch.float64
    assert torch.equal(restored(batch)["caption"].mean, out["caption"].mean)
