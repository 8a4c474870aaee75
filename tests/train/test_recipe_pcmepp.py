"""The pcmepp_csd recipe as PCME++'s release (naver-ai/pcmepp, configs/pcmepp.yaml) trains: variance heads
that predict the log-variance, pseudo-positives at 0.1 and label smoothing 1e-4."""

from __future__ import annotations

import torch

from _reference import load_fixture
from pcmr.losses import create_loss
from pcmr.models import create_model
from pcmr.models.text_encoders import run_gru
from pcmr.train import load_config
from pcmr.train.recipes import list_recipes

PCMEPP, PCMEPP_INFO = load_fixture("pcmepp")


def _recipe():
    return load_config(list_recipes()["pcmepp_csd"])


def _model(config):
    return create_model(config.model.name, vocab_size=20, **config.model.options).double().eval()


def test_pcmepp_variance_heads_output_the_log_variance():
    """The release's `std` output is a log-variance (its CSD adds exp(std)); the recipe's heads give
    ``logvar`` = the sum of their two branches, not twice it (PCME's log sigma)."""
    model = _model(_recipe())
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 4, 2])
    captions = torch.randint(4, 20, (3, 6), generator=generator)
    captions[torch.arange(6) >= lengths[:, None]] = 0
    batch = {"images": torch.rand(3, 3, 32, 32, generator=generator, dtype=torch.float64), "captions": captions,
             "caption_lengths": lengths}
    for tower, encode in ((model.image_tower, model.encode_images), (model.caption_tower, model.encode_captions)):
        head = tower.variance_head
        with torch.no_grad():
            features = tower.encoder.features(batch)
            if head.gru is None:  # images: fc(pooled) + fc_attn(attn_pool(grid))
                pooled, attended = head.branches(features)
                raw = pooled + attended
            else:  # captions: the head's own bi-GRU (final states) + fc_attn(attn_pool(words))
                _, hidden = run_gru(head.gru, features.local, features.mask.sum(dim=1))
                raw = torch.cat([hidden[-2], hidden[-1]], dim=1) + head.attention_branch(features)
            logvar = encode(batch).logvar
        torch.testing.assert_close(logvar, raw, rtol=1e-12, atol=1e-12)
    pcme = create_model("pcme", vocab_size=20)  # PCME's own heads keep the release's log sigma
    assert pcme.image_tower.variance_head.scale == 2.0 and pcme.caption_tower.variance_head.scale == 2.0


def test_pcmepp_loss_is_the_released_configuration():
    """The recipe's loss has the release's values, pseudo-positives and label smoothing included
    (the 'released' fixture run: configs/pcmepp.yaml as it is)."""
    released = PCMEPP_INFO["runs"]["released"]
    loss = create_loss("pcme_csd", **_recipe().loss.options).config
    assert (loss.init_a, loss.init_b, loss.lambda_kl, loss.lambda_pseudo, loss.label_smoothing) == (
        released["init_negative_scale"], released["init_shift"], released["vib_beta"], released["smoothness_alpha"],
        released["label_smoothing"])
