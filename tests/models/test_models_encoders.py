"""Encoders of pcmr.models: GRU text backbone (against per-caption unpadded runs), GloVe loading,
small CNN and precomputed-feature backbones, VSRN reasoning (float64 loop reference), bad inputs."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pcmr.models import (
    GlobalFeatureBackbone,
    GRUTextBackbone,
    LocalFeatureBackbone,
    RegionGraphConvolution,
    SmallCNNBackbone,
    VSRNReasoning,
    create_model,
    load_word_vectors,
)
from pcmr.models.text_encoders import run_gru
from test_models_support import make_batch, random_captions, single_thread  # noqa: F401  (autouse fixture)

VOCAB = 29


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_gru_backbone_equals_unpadded_per_caption_runs(bidirectional, num_layers):
    torch.manual_seed(0)
    backbone = GRUTextBackbone(VOCAB, 6, 5, num_layers, bidirectional).double()
    tokens, lengths = random_captions(torch.Generator().manual_seed(1), 5, 7, VOCAB)
    out = backbone({"captions": tokens, "caption_lengths": lengths})
    assert out.local.shape == (5, 7, 5) and out.pooled.shape == (5, 5) and out.mask.shape == (5, 7)
    for b in range(5):
        length = int(lengths[b])
        assert out.mask[b].tolist() == [i < length for i in range(7)]
        words, hidden = backbone.gru(backbone.embedding(tokens[b : b + 1, :length]))  # no padding at all
        if bidirectional:
            words = 0.5 * (words[..., :5] + words[..., 5:])
            sentence = 0.5 * (hidden[-2] + hidden[-1])
        else:
            sentence = hidden[-1]
        torch.testing.assert_close(out.local[b, :length], words[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(out.pooled[b], sentence[0], rtol=1e-10, atol=1e-12)
        assert torch.equal(out.local[b, length:], torch.zeros(7 - length, 5, dtype=torch.float64))


def test_gru_backbone_ignores_extra_padding_columns():
    torch.manual_seed(0)
    backbone = GRUTextBackbone(VOCAB, 6, 5, 1, True)
    tokens, lengths = random_captions(torch.Generator().manual_seed(2), 4, 5, VOCAB)
    padded = torch.cat([tokens, torch.zeros(4, 3, dtype=torch.long)], dim=1)
    a = backbone({"captions": tokens, "caption_lengths": lengths})
    b = backbone({"captions": padded, "caption_lengths": lengths})
    torch.testing.assert_close(a.pooled, b.pooled, rtol=0, atol=0)
    torch.testing.assert_close(a.local, b.local[:, :5], rtol=0, atol=0)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_run_gru_on_full_length_captions_skips_packing_with_equal_values_and_gradients(bidirectional):
    # fixed-length captions run the GRU on the padded tensor: the packed computation's values and gradients
    torch.manual_seed(0)
    gru = torch.nn.GRU(6, 5, num_layers=2, batch_first=True, bidirectional=bidirectional).double()
    inputs = torch.randn(4, 7, 6, dtype=torch.float64, requires_grad=True)
    lengths = torch.full((4,), 7)
    packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    reference_out, reference_hidden = gru(packed)
    reference_out, _ = pad_packed_sequence(reference_out, batch_first=True, total_length=7)
    weights = torch.randn_like(reference_out)
    reference_grads = torch.autograd.grad((reference_out * weights).sum() + reference_hidden.square().sum(),
                                          [inputs, *gru.parameters()])
    with mock.patch("pcmr.models.text_encoders.pack_padded_sequence", side_effect=AssertionError("packed")):
        out, hidden = run_gru(gru, inputs, lengths)
    grads = torch.autograd.grad((out * weights).sum() + hidden.square().sum(), [inputs, *gru.parameters()])
    torch.testing.assert_close(out, reference_out, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(hidden, reference_hidden, rtol=1e-12, atol=1e-14)
    for got, want in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    shorter = lengths.clone()
    shorter[2] = 4  # one shorter caption: packed again, its padding positions zero
    out, _ = run_gru(gru, inputs, shorter)
    assert torch.equal(out[2, 4:], torch.zeros(3, out.shape[2], dtype=torch.float64))


def test_word_vectors_from_a_glove_file(tmp_path):
    torch.manual_seed(0)
    model = create_model("probvse", vocab_size=6, text_encoder={"word_dim": 3})
    words = ["<pad>", "<unk>", "<start>", "<end>", "Red", "square"]
    path = tmp_path / "glove.txt"
    path.write_text("red 0.5 -1 2\nsquare 1 2 3\nsquare 9 9 9\nunused 7 7 7\n<pad> 4 4 4\n", encoding="utf-8")
    before = model.caption_tower.encoder.backbone.embedding.weight.detach().clone()
    assert load_word_vectors(model, path, words) == 2
    for encoder in (model.caption_tower.encoder, model.caption_tower.variance_encoder):  # both copies
        weight = encoder.backbone.embedding.weight.detach()
        assert weight[4].tolist() == [0.5, -1.0, 2.0]  # matched lower-cased
        assert weight[5].tolist() == [1.0, 2.0, 3.0]  # the first line of a word wins
        assert torch.equal(weight[0], torch.zeros(3))  # <pad> stays zero
    assert torch.equal(
        model.caption_tower.encoder.backbone.embedding.weight[1], before[1]
    )  # missing: unchanged
    path.write_text("red 1 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1: expected 'word' followed by 3 numbers"):
        load_word_vectors(model, path, words)
    with pytest.raises(ValueError, match="vocab_size is 6"):
        load_word_vectors(model, path, words[:3])
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_word_vectors(model, tmp_path / "missing.txt", words)


def test_small_cnn_grid_and_feature_backbones():
    cnn = SmallCNNBackbone([4, 8, 16, 32])
    out = cnn({"images": torch.randn(2, 3, 64, 64)})
    assert out.local.shape == (2, 16, 32) and out.pooled.shape == (2, 32) and out.mask is None
    torch.testing.assert_close(out.pooled, out.local.mean(dim=1))
    features = torch.randn(3, 13)
    out = GlobalFeatureBackbone(13)({"images": features})
    assert torch.equal(out.pooled, features) and out.local.shape == (3, 1, 13)
    regions = torch.randn(3, 5, 13)
    out = LocalFeatureBackbone(13)({"images": regions})
    assert torch.equal(out.local, regions)
    torch.testing.assert_close(out.pooled, regions.mean(dim=1))


def test_region_graph_convolution_matches_loop_reference():
    torch.manual_seed(0)
    layer = RegionGraphConvolution(4).double()
    regions = torch.randn(2, 3, 4, dtype=torch.float64)
    got = layer(regions)
    with torch.no_grad():
        _check_graph_convolution(layer, regions, got)


def _check_graph_convolution(layer, regions, got):
    for b in range(2):
        theta, phi, g = layer.theta(regions[b]), layer.phi(regions[b]), layer.g(regions[b])
        for i in range(3):
            message = sum(float(theta[i] @ phi[j]) / 3 * g[j] for j in range(3))
            expected = regions[b, i] + layer.w(message)
            torch.testing.assert_close(got[b, i], expected, rtol=1e-10, atol=1e-12)


def test_vsrn_reasoning_pools_with_the_final_gru_state():
    torch.manual_seed(0)
    reasoning = VSRNReasoning(in_dim=7, dim=6, num_layers=2).double()
    regions = torch.randn(2, 5, 7, dtype=torch.float64)
    out = reasoning(LocalFeatureBackbone(7)({"images": regions}))
    assert out.local.shape == (2, 5, 6) and out.pooled.shape == (2, 6)
    expected = torch.nn.functional.normalize(reasoning.project(regions), dim=-1)
    for layer in reasoning.layers:
        expected = layer(expected)
    torch.testing.assert_close(out.local, expected, rtol=1e-12, atol=1e-12)
    states, _ = reasoning.gru(expected)
    torch.testing.assert_close(out.pooled, states[:, -1], rtol=1e-10, atol=1e-12)


def test_vsrn_needs_regions():
    with pytest.raises(ValueError, match="needs region features"):
        create_model("probvsrn", vocab_size=VOCAB, image_encoder={"kind": "global_features"})


def test_precomputed_feature_models_run():
    for kind, dims in (("global_features", (4, 13)), ("local_features", (4, 5, 13))):
        model = create_model("pcme", vocab_size=VOCAB, image_encoder={"kind": kind, "feature_dim": 13})
        batch = make_batch(model.config, num_images=4)
        assert tuple(batch["images"].shape) == dims
        out = model(batch)
        assert out["image"].mean.shape == (4, 128) and out["image"].logvar.shape == (4, 128)


def test_bad_batches_raise_clear_errors():
    model = create_model("vsepp", vocab_size=VOCAB)
    batch = make_batch(model.config)
    with pytest.raises(
        ValueError, match=r"batch\['images'\] must be a floating tensor of shape \[B, 3, H, W\]"
    ):
        model.encode_images({"images": torch.randn(2, 3, 8)})
    with pytest.raises(ValueError, match="no 'images' entry"):
        model.encode_images({})
    with pytest.raises(ValueError, match="must have 3 channels"):
        model.encode_images({"images": torch.randn(2, 1, 8, 8)})
    bad = dict(batch, captions=batch["captions"].clone())
    bad["captions"][0, 0] = VOCAB
    with pytest.raises(ValueError, match="vocab_size is 29"):
        model.encode_captions(bad)
    with pytest.raises(ValueError, match=r"caption_lengths'\] must lie in \[1, L\]"):
        model.encode_captions(dict(batch, caption_lengths=torch.zeros_like(batch["caption_lengths"])))
    with pytest.raises(ValueError, match="LongTensor of token ids"):
        model.encode_captions(dict(batch, captions=batch["captions"].float()))
    with pytest.raises(ValueError, match="no 'caption_lengths' entry"):
        model.encode_captions({"captions": batch["captions"]})
    features = create_model(
        "gce", vocab_size=VOCAB, image_encoder={"kind": "global_features", "feature_dim": 13}
    )
    with pytest.raises(ValueError, match="image_encoder.feature_dim = 13"):
        features.encode_images({"images": torch.randn(2, 12)})
    with pytest.raises(ValueError, match="caption_view_lengths"):
        model({**batch, "caption_views": batch["captions"].unsqueeze(1)})
