"""Heads of pcmr.models against slow float64 references: PCME mean/variance heads (PCME Fig. 3),
self-attention pooling, covariance kinds, smooth variance bounds, variance sources."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pcmr.models import (
    AttentionPool,
    EncodedFeatures,
    HeadConfig,
    LinearVarianceHead,
    PCMEMeanHead,
    PCMEVarianceHead,
    bound_logvar,
    create_model,
)
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)

B, R, F, D = 3, 7, 11, 5  # awkward sizes
COVARIANCES = ["ellipsoidal", "spherical_avgpool_variance", "spherical_avgpool_logvar", "spherical_one_value"]


def _pool_reference(raw: list[float], covariance: str) -> list[float]:
    """One log-variance from D: ProbVSE averages the variances, GCIE the log-variances."""
    if covariance == "spherical_avgpool_variance":
        return [math.log(sum(math.exp(v) for v in raw) / len(raw))]
    if covariance == "spherical_avgpool_logvar":
        return [sum(raw) / len(raw)]
    return raw


def _features(seed: int = 0, masked: bool = True) -> EncodedFeatures:
    generator = torch.Generator().manual_seed(seed)
    local = torch.randn(B, R, F, generator=generator, dtype=torch.float64)
    pooled = torch.randn(B, F, generator=generator, dtype=torch.float64)
    mask = None
    if masked:
        lengths = torch.tensor([R, 1, 4])
        mask = torch.arange(R).unsqueeze(0) < lengths.unsqueeze(1)
    return EncodedFeatures(local=local, pooled=pooled, mask=mask)


def _linear(layer: nn.Linear, x: list[float]) -> list[float]:
    weight, bias = layer.weight.tolist(), (layer.bias.tolist() if layer.bias is not None else None)
    return [sum(w * v for w, v in zip(row, x)) + (bias[o] if bias else 0.0) for o, row in enumerate(weight)]


def _attention_reference(
    pool: AttentionPool, local: torch.Tensor, mask: torch.Tensor | None, b: int
) -> list[float]:
    scores, rows = [], []
    for r in range(local.shape[1]):
        if mask is not None and not bool(mask[b, r]):
            continue
        x = local[b, r].tolist()
        hidden = [math.tanh(v) for v in _linear(pool.w1, x)]
        scores.append(_linear(pool.w2, hidden)[0])
        rows.append(x)
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [sum(w / total * row[f] for w, row in zip(weights, rows)) for f in range(local.shape[2])]


def _pcme_reference(head, features: EncodedFeatures, b: int, mean_head: bool) -> list[float]:
    pooled_branch = _linear(head.fc, features.pooled[b].tolist())
    attention_branch = _linear(
        head.fc_attn, _attention_reference(head.attention, features.local, features.mask, b)
    )
    if not mean_head:
        return [p + a for p, a in zip(pooled_branch, attention_branch)]
    out = [p + 1.0 / (1.0 + math.exp(-a)) for p, a in zip(pooled_branch, attention_branch)]
    mu = sum(out) / len(out)
    var = sum((v - mu) ** 2 for v in out) / len(out)
    ln = head.layer_norm
    out = [
        (v - mu) / math.sqrt(var + ln.eps) * w + c
        for v, w, c in zip(out, ln.weight.tolist(), ln.bias.tolist())
    ]
    norm = math.sqrt(sum(v * v for v in out))
    return [v / norm for v in out]


def _perturb_layer_norm(head: PCMEMeanHead) -> None:
    with torch.no_grad():
        head.layer_norm.weight.uniform_(0.5, 1.5)
        head.layer_norm.bias.uniform_(-0.3, 0.3)


@pytest.mark.parametrize("masked", [True, False])
def test_attention_pool_matches_reference_and_ignores_padding(masked):
    torch.manual_seed(0)
    pool = AttentionPool(F, 4).double()
    features = _features(masked=masked)
    got = pool(features.local, features.mask)
    for b in range(B):
        expected = torch.tensor(
            _attention_reference(pool, features.local, features.mask, b), dtype=torch.float64
        )
        torch.testing.assert_close(got[b], expected, rtol=1e-10, atol=1e-12)
    if masked:
        changed = features.local.clone()
        changed[~features.mask] = 1e3  # padded positions must not matter
        torch.testing.assert_close(pool(changed, features.mask), got, rtol=0, atol=0)
    assert pool.w2.bias is None  # a bias cannot change a softmax: it would get no gradient


@pytest.mark.parametrize("masked", [True, False])
def test_pcme_mean_head_matches_reference_and_has_unit_rows(masked):
    torch.manual_seed(1)
    head = PCMEMeanHead(F, D, attention_hidden=3).double()
    _perturb_layer_norm(head)
    features = _features(seed=1, masked=masked)
    got = head(features)
    assert got.shape == (B, D)
    torch.testing.assert_close(got.norm(dim=1), torch.ones(B, dtype=torch.float64), rtol=0, atol=1e-12)
    for b in range(B):
        expected = torch.tensor(_pcme_reference(head, features, b, mean_head=True), dtype=torch.float64)
        torch.testing.assert_close(got[b], expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_pcme_variance_head_matches_reference_without_sigmoid_layernorm_l2(covariance):
    torch.manual_seed(2)
    config = HeadConfig(kind="pcme", covariance=covariance)
    head = PCMEVarianceHead(F, D, config).double()
    assert not any(isinstance(m, (nn.LayerNorm, nn.Sigmoid)) for m in head.modules())
    features = _features(seed=2)
    with torch.no_grad():  # make the branches large so a sigmoid or a norm would show
        head.fc.weight.mul_(10.0)
        head.fc_attn.weight.mul_(10.0)
    got = head(features)
    width = 1 if covariance != "ellipsoidal" else D
    assert got.shape == (B, width)
    for b in range(B):
        raw = _pcme_reference(head, features, b, mean_head=False)
        raw = _pool_reference(raw, covariance)
        torch.testing.assert_close(got[b], torch.tensor(raw, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert not torch.allclose(got.norm(dim=1), torch.ones(B, dtype=torch.float64))
    assert got.min() < 0 or got.max() > 1  # no sigmoid squashing


def test_pcme_model_heads_have_the_paper_structure():
    model = create_model("pcme", vocab_size=23)
    for tower in (model.image_tower, model.caption_tower):
        assert isinstance(tower.mean_head, PCMEMeanHead)
        assert isinstance(tower.variance_head, PCMEVarianceHead)
        assert any(isinstance(m, nn.LayerNorm) for m in tower.mean_head.modules())
        assert not any(isinstance(m, nn.LayerNorm) for m in tower.variance_head.modules())
        assert tower.variance_encoder is None  # PCME: both heads read the same backbone features
    model.eval()
    out = model(make_batch(model.config))
    for key in ("image", "caption"):
        torch.testing.assert_close(out[key].mean.norm(dim=1), torch.ones(out[key].num), rtol=0, atol=1e-5)
        assert not torch.allclose(out[key].logvar.norm(dim=1), torch.ones(out[key].num))


def test_bound_logvar_reference_limits_and_slope():
    lo, hi = 0.1, 10.0
    raw = torch.tensor(
        [-1e4, -30.0, -3.0, -1.0, 0.0, 0.5, 2.0, 30.0, 1e4], dtype=torch.float64, requires_grad=True
    )
    got = bound_logvar(raw, lo, hi)
    centre, half = 0.5 * (math.log(lo) + math.log(hi)), 0.5 * (math.log(hi) - math.log(lo))
    expected = torch.tensor(
        [centre + half * math.tanh((v - centre) / half) for v in raw.tolist()], dtype=torch.float64
    )
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert (got >= math.log(lo)).all() and (got <= math.log(hi)).all()
    assert (got.diff() >= 0).all()  # monotone
    got.sum().backward()
    assert torch.isfinite(raw.grad).all() and (raw.grad >= 0).all()
    assert abs(float(raw.grad[4]) - 1.0) < 1e-12  # identity slope at the centre (log 1 = 0)
    asym = bound_logvar(torch.tensor([0.0], dtype=torch.float64), 0.5, 4.0)
    assert math.log(0.5) < float(asym) < math.log(4.0)


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_linear_variance_head_covariance_and_bounds(covariance):
    torch.manual_seed(3)
    config = HeadConfig(kind="linear", covariance=covariance, variance_bounds=[0.1, 10.0])
    head = LinearVarianceHead(F, D, config).double()
    with torch.no_grad():
        head.fc.weight.mul_(50.0)
    features = _features(seed=3)
    got = head(features)
    raw = [_linear(head.fc, features.pooled[b].tolist()) for b in range(B)]
    raw = [_pool_reference(r, covariance) for r in raw]
    expected = bound_logvar(torch.tensor(raw, dtype=torch.float64), 0.1, 10.0)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    assert got.shape == (B, D if covariance == "ellipsoidal" else 1)
    assert (got >= math.log(0.1)).all() and (got <= math.log(10.0)).all()


@pytest.mark.parametrize("covariance", COVARIANCES[1:])
def test_spherical_models_give_one_log_variance(covariance):
    model = create_model(
        "gcie", vocab_size=23, **{"image_head.covariance": covariance, "caption_head.covariance": covariance}
    )
    out = model(make_batch(model.config))
    assert out["image"].logvar.shape == (3, 1) and out["caption"].logvar.shape == (5, 1)
    assert out["image"].is_spherical and out["caption"].is_spherical


def _parameter_ids(module: nn.Module) -> set[int]:
    return {p.data_ptr() for p in module.parameters()}


def test_duplicate_variance_branch_shares_no_parameters():
    model = create_model("probvse", vocab_size=23)
    for tower in (model.image_tower, model.caption_tower):
        assert tower.variance_encoder is not None and tower.variance_encoder.backbone is not None
        mean_side = _parameter_ids(tower.encoder) | _parameter_ids(tower.mean_head)
        variance_side = _parameter_ids(tower.variance_encoder) | _parameter_ids(tower.variance_head)
        assert mean_side.isdisjoint(variance_side)
        assert type(tower.variance_encoder.backbone) is type(tower.encoder.backbone)
        sizes = [p.shape for p in tower.encoder.parameters()]
        assert sizes == [p.shape for p in tower.variance_encoder.parameters()]
        assert any(
            not torch.equal(a, b)
            for a, b in zip(tower.encoder.parameters(), tower.variance_encoder.parameters())
        )


def test_duplicate_copies_only_the_trainable_part():
    # VSE++ on precomputed features: nothing trainable before the projection -> only the head is new.
    model = create_model(
        "probvse", vocab_size=23, image_encoder={"kind": "global_features", "feature_dim": 13}
    )
    assert model.image_tower.variance_encoder is None
    assert isinstance(model.image_tower.variance_head, LinearVarianceHead)
    # VSRN on precomputed regions: the reasoning stage is duplicated, the (parameter-free) backbone is not.
    model = create_model(
        "probvsrn", vocab_size=23, image_encoder={"kind": "local_features", "feature_dim": 13}
    )
    variance_encoder = model.image_tower.variance_encoder
    assert variance_encoder.backbone is None and variance_encoder.refine is not None
    out = model(make_batch(model.config))
    assert out["image"].logvar.shape == (3, 128)


def test_gie_uses_two_linear_layers_on_one_image_encoding():
    model = create_model("gie", vocab_size=23)
    assert model.image_tower.variance_encoder is None
    assert model.caption_tower.variance_head is None


def test_deterministic_towers_have_no_variance_parameters():
    for name in ("vsepp", "vsepp_wide", "pcme_mu_only"):
        model = create_model(name, vocab_size=23)
        for tower in (model.image_tower, model.caption_tower):
            assert tower.variance_head is None and tower.variance_encoder is None


# --- initial log-variance (logvar_init) -------------------------------------------------------------
@pytest.mark.parametrize("covariance", COVARIANCES)
def test_pcme_variance_head_starts_at_logvar_init(covariance):
    torch.manual_seed(5)
    config = HeadConfig(kind="pcme", covariance=covariance, logvar_init=-6.5)
    head = PCMEVarianceHead(F, D, config).double()
    width = 1 if covariance == "spherical_one_value" else D
    assert torch.equal(head.fc.bias, torch.full((width,), -6.5, dtype=torch.float64))
    assert torch.equal(head.fc_attn.bias, torch.zeros(width, dtype=torch.float64))
    features = _features(seed=5)
    got = head(features)
    # the weights keep their default init: the output is the float64 reference with these biases
    for b in range(B):
        raw = _pcme_reference(head, features, b, mean_head=False)  # width values
        expected = _pool_reference(raw, covariance)
        torch.testing.assert_close(got[b], torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-12)
    with torch.no_grad():  # without the input-dependent part, exactly logvar_init
        head.fc.weight.zero_()
        head.fc_attn.weight.zero_()
    expected_shape = (B, D if covariance == "ellipsoidal" else 1)
    torch.testing.assert_close(head(features), torch.full(expected_shape, -6.5, dtype=torch.float64))


@pytest.mark.parametrize("covariance", COVARIANCES)
def test_linear_variance_head_logvar_init_inside_bounds(covariance):
    torch.manual_seed(6)
    target = math.log(0.25)  # off the bounds' centre: the bias is the inverse of the smooth bound
    config = HeadConfig(kind="linear", covariance=covariance, variance_bounds=[0.1, 10.0], logvar_init=target)
    head = LinearVarianceHead(F, D, config).double()
    c, h = 0.5 * (math.log(0.1) + math.log(10.0)), 0.5 * (math.log(10.0) - math.log(0.1))
    raw = c + h * math.atanh((target - c) / h)
    # the bias is set in float32 (the head is built in float32, then .double())
    assert torch.allclose(head.fc.bias, torch.full_like(head.fc.bias, raw), rtol=0, atol=1e-6)
    with torch.no_grad():
        head.fc.weight.zero_()
    got = head(_features(seed=6))
    torch.testing.assert_close(got, torch.full((B, D if covariance == "ellipsoidal" else 1), target,
                                               dtype=torch.float64), rtol=0, atol=1e-6)


def test_logvar_init_unset_keeps_default_init():
    torch.manual_seed(7)
    first = PCMEVarianceHead(F, D, HeadConfig(kind="pcme"))
    torch.manual_seed(7)
    plain = nn.Linear(F, D)
    assert torch.equal(first.fc.bias, plain.bias)


def test_pcme_family_starts_as_the_release_and_logvar_init_still_applies():
    """PCME's release starts its heads at log sigma near 0 (ordinary layer init); logvar_init is an option."""
    model = create_model("pcme", vocab_size=23)
    assert model.config.image_head.logvar_init is None and model.config.caption_head.logvar_init is None
    overridden = create_model("pcme", vocab_size=23, **{"image_head.logvar_init": -6.0,
                                                        "caption_head.logvar_init": -6.0})
    # the heads predict log sigma (logvar = 2 log sigma): the bias starts at logvar_init / 2
    assert torch.equal(overridden.image_tower.variance_head.fc.bias, torch.full((128,), -3.0))
    assert torch.equal(overridden.caption_tower.variance_head.fc_attn.bias, torch.full((128,), -3.0))
    with torch.no_grad():
        out = overridden(make_batch(overridden.config))
    for side in ("image", "caption"):
        assert abs(float(out[side].logvar.mean()) + 6.0) < 1.5, side


def test_bad_logvar_init_names_the_field():
    with pytest.raises(ValueError, match=r"'caption_head.logvar_init' expects float or null, got 'small'"):
        create_model("pcme", **{"caption_head.logvar_init": "small"})
    with pytest.raises(ValueError, match=r"'image_head.logvar_init' must be a finite number"):
        create_model("pcme", **{"image_head.logvar_init": float("nan")})
    with pytest.raises(ValueError, match=r"'image_head.logvar_init' must lie strictly inside the log of"):
        create_model("gie", **{"image_head.logvar_init": -5.0})


# --- spherical pooling: ProbVSE (mean of variances) vs GCIE (mean of log-variances) ------------------
def test_spherical_avgpool_names_say_which_mean():
    """ProbVSE §4.1 averages the variances; GCIE §3 averages the log-variances (a geometric mean).
    The two differ (Jensen: the arithmetic mean is the larger) and the old ambiguous name is refused."""
    raw = torch.tensor([[-3.0, 0.0, 1.5, 2.0]], dtype=torch.float64)
    pool_variance = HeadConfig(kind="linear", covariance="spherical_avgpool_variance")
    pool_logvar = HeadConfig(kind="linear", covariance="spherical_avgpool_logvar")
    from pcmr.models.heads import _finish_logvar

    variance = float(_finish_logvar(raw, pool_variance))
    logvar = float(_finish_logvar(raw, pool_logvar))
    assert abs(variance - math.log((math.exp(-3.0) + 1.0 + math.exp(1.5) + math.exp(2.0)) / 4)) < 1e-12
    assert abs(logvar - 0.125) < 1e-12
    assert variance > logvar + 0.5
    with pytest.raises(ValueError, match=r"'caption_head.covariance' 'spherical_avgpool' is ambiguous.*"
                                         r"spherical_avgpool_variance.*spherical_avgpool_logvar"):
        create_model("gcie", **{"caption_head.covariance": "spherical_avgpool"})


@pytest.mark.parametrize("recipe", ["probvse_kl_spherical_avgpool", "probvse_min_kl_spherical_avgpool",
                                    "probvse_wasserstein_spherical_avgpool"])
def test_probvse_avgpool_recipes_average_the_variances(recipe):
    from pcmr.train import load_config
    from pcmr.train.recipes import find_recipe

    config = load_config(find_recipe(recipe))
    for side in ("image_head", "caption_head"):
        assert config.model.options[side]["covariance"] == "spherical_avgpool_variance"


# --- VSE++ / ProbVSE captions: the embedding is the final GRU state -----------------------------------
@pytest.mark.parametrize("name", ["vsepp", "vsepp_wide", "probvse", "probvsrn"])
def test_vsepp_caption_embedding_is_the_gru_state(name):
    """VSE++ (and ProbVSE on it, §4.1): the caption embedding is the final GRU state, L2-normalised,
    with no projection; ProbVSE's caption log-variance is the duplicated GRU's final state."""
    torch.manual_seed(11)
    model = create_model(name, vocab_size=23).double().eval()
    batch = make_batch(model.config)
    tower = model.caption_tower
    assert not any(isinstance(m, nn.Linear) for m in tower.mean_head.modules())
    out = model.encode_captions(batch)
    state = tower.encoder.backbone(batch).pooled  # final GRU state [B, H], H = D
    assert state.shape[1] == model.embed_dim
    torch.testing.assert_close(out.mean, state / state.norm(dim=1, keepdim=True), rtol=1e-12, atol=1e-12)
    if tower.variance_head is not None:
        variance_state = tower.variance_encoder.backbone(batch).pooled
        lo, hi = model.config.caption_head.variance_bounds
        torch.testing.assert_close(out.logvar, bound_logvar(variance_state, lo, hi), rtol=1e-12, atol=1e-12)


def test_gcie_captions_keep_their_linear_layer():
    """GCIE eq. 4: mu_c = W psi(c), a linear layer on the GRU state."""
    for name in ("gce", "gcie"):
        model = create_model(name, vocab_size=23)
        assert isinstance(model.caption_tower.mean_head.fc, nn.Linear)


def test_identity_head_needs_the_feature_size_to_be_embed_dim():
    with pytest.raises(ValueError, match=r"head kind 'identity'.*hidden_dim.*must equal embed_dim \(64\)"):
        create_model("vsepp", vocab_size=23, embed_dim=64)
    model = create_model("vsepp", vocab_size=23, embed_dim=64, **{"text_encoder.hidden_dim": 64})
    assert model.encode_captions(make_batch(model.config)).mean.shape[1] == 64
