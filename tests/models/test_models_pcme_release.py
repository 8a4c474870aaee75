"""The pcme family is laid out as PCME's paper (eq. 4) and release: its own caption variance GRU over
the word embeddings, heads that start at log sigma near 0, the release's KL term by default."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pcmr.losses import create_loss
from pcmr.models import create_model

VOCAB = 30


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 3, 1, 5])
    captions = torch.randint(4, VOCAB, (4, 6), generator=gen)
    captions[torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    return {"images": torch.randn(4, 3, 32, 32, generator=gen), "captions": captions, "caption_lengths": lengths}


def test_caption_variance_head_has_its_own_gru_over_word_embeddings():
    model = create_model("pcme", vocab_size=VOCAB, embed_dim=16)
    head, backbone = model.caption_tower.variance_head, model.caption_tower.encoder.backbone
    assert isinstance(head.gru, nn.GRU) and head.gru is not backbone.gru
    assert head.gru.input_size == backbone.embedding.embedding_dim and head.gru.bidirectional
    assert head.gru.hidden_size == 8  # embed_dim / 2 per direction
    # the caption log-variance depends on the variance head's GRU, the mean does not
    batch = _batch()
    caption = model.encode_captions(batch)
    grads = torch.autograd.grad(caption.logvar.sum(), [head.gru.weight_ih_l0, backbone.gru.weight_ih_l0],
                                allow_unused=True)
    assert grads[0] is not None and grads[0].abs().sum() > 0
    assert grads[1] is None  # the mean's GRU does not feed the variance
    mean_grad = torch.autograd.grad(caption.mean.sum(), head.gru.weight_ih_l0, allow_unused=True)[0]
    assert mean_grad is None


def test_pcme_heads_start_near_log_sigma_zero():
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=VOCAB, embed_dim=16)
    batch = _batch()
    for gaussian in (model.encode_images(batch), model.encode_captions(batch)):
        assert gaussian.logvar.abs().mean() < 2.0  # the release's start; pcmr used to start at -8
    shifted = create_model("pcme", vocab_size=VOCAB, embed_dim=16,
                           **{"image_head.logvar_init": -6.0, "caption_head.logvar_init": -6.0})
    for gaussian in (shifted.encode_images(batch), shifted.encode_captions(batch)):
        assert (gaussian.logvar.mean() + 6.0).abs() < 1.5


def test_embed_dim_override_keeps_the_release_layout():
    model = create_model("pcme", vocab_size=VOCAB, embed_dim=24)
    caption = model.encode_captions(_batch())
    assert caption.mean.shape == (4, 24) and caption.logvar.shape == (4, 24)
    with pytest.raises(ValueError, match="embed_dim"):
        create_model("pcme", vocab_size=VOCAB, embed_dim=23)
    mu_only = create_model("pcme_mu_only", vocab_size=VOCAB, embed_dim=24)
    assert mu_only.encode_captions(_batch()).logvar is None


def test_word_gru_needs_word_embeddings_on_the_caption_side():
    with pytest.raises(ValueError, match="local_features"):
        create_model("pcme", vocab_size=VOCAB, **{"text_encoder.local_features": "gru_outputs"})
    with pytest.raises(ValueError, match="captions only"):
        create_model("pcme", vocab_size=VOCAB, **{"image_head.variance_source": "word_gru"})


def test_pcme_loss_uses_the_release_kl_by_default():
    assert create_loss("pcme").config.kl_form == "release"
    with pytest.raises(ValueError, match="kl_form"):
        create_loss("pcme", kl_form="log_sigma")
