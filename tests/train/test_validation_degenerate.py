"""Model selection never runs on a degenerate score: validation falls back to cosine and says so."""

from __future__ import annotations

import torch

from pcmr.data import Vocabulary, load_dataset
from pcmr.models import create_model
from pcmr.train.validation import FALLBACK_SIMILARITY, validate

#: the tiny PCME of the test run folders
TINY_MODEL = {"embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]}, "text_encoder": {"word_dim": 8, "hidden_dim": 8}}


def _model_and_split(shapes, zero: bool):
    train = load_dataset("shapes", "train", **shapes)
    val = load_dataset("shapes", "val", **shapes)
    vocab = Vocabulary.from_split(train)
    torch.manual_seed(0)
    model = create_model("pcme", vocab_size=len(vocab), **TINY_MODEL)
    if zero:  # every embedding the same: every score constant
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.zero_()
    return model, val, vocab


def test_degenerate_validation_score_falls_back_to_cosine_and_says_so(capsys, tiny_shapes):
    model, val, vocab = _model_and_split(tiny_shapes, zero=True)
    metrics = validate(model, val, vocab, similarity="kl")
    assert metrics["fallback"] == 1.0
    err = capsys.readouterr().err
    assert "validation with kl: degenerate score" in err and f"uses {FALLBACK_SIMILARITY}" in err
    assert metrics["rsum"] < 600.0  # chance level, never the storage-order artefact


def test_a_working_score_is_used_as_it_is(capsys, tiny_shapes):
    model, val, vocab = _model_and_split(tiny_shapes, zero=False)
    metrics = validate(model, val, vocab, similarity="kl")
    assert metrics["fallback"] == 0.0
    assert "degenerate" not in capsys.readouterr().err


def test_degenerate_score_warning_on_constant_wide_and_duplicate_ties():
    from pcmr.evaluation.table import degenerate_score_warning

    assert "every cosine value is 0" in degenerate_score_warning(torch.zeros(4, 20), "cosine")
    scores = torch.randn(40, 200, generator=torch.Generator().manual_seed(0))
    assert degenerate_score_warning(scores) is None
    duplicates = scores.clone()
    duplicates[:, 1] = duplicates[:, 0]  # the same caption twice: a legitimate tie
    assert degenerate_score_warning(duplicates) is None
    wide = scores.clone()
    wide[:30, :30] = 10.0  # 30 of 40 image queries: 30 of 200 captions tie at the top
    assert "75% of the image->text queries" in degenerate_score_warning(wide)
