"""Converting a checkpoint written by PCME's release gives a pcmr model with the release's outputs.

The checkpoint (tests/fixtures/reference/pcme_release_checkpoint.pth) is the release's ``PCME``
model with small dimensions and random weights, saved in the release's checkpoint layout by
tools/reference/pcme_release.py; the fixture holds the release's outputs for the same inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import pcmr
from _reference import FIXTURES, assert_close, load_fixture, part
from pcmr.data import Vocabulary
from pcmr.data.text import SPECIAL_TOKENS as DATA_SPECIAL_TOKENS
from pcmr.models import load_model
from pcmr.models.convert_pcme_release import SPECIAL_TOKENS, ReleaseCheckpointError, convert_pcme_release

CHECKPOINT = FIXTURES / "pcme_release_checkpoint.pth"
TENSORS, PROVENANCE = load_fixture("pcme")
TOL = PROVENANCE["tolerance"]


def _batch(words: list[str]) -> dict[str, torch.Tensor]:
    """The fixture's inputs in pcmr's form: grid [B, 49, C], captions re-indexed to pcmr's vocabulary."""
    inputs = part(TENSORS, "model/input")
    release_words = {i: w for w, i in PROVENANCE["word2idx"].items()}
    ours = {w: i for i, w in enumerate(words)}
    captions = inputs["captions"].clone()
    captions.apply_(lambda i: ours[release_words[i]])
    return {"images": inputs["images"].flatten(2).transpose(1, 2), "captions": captions,
            "caption_lengths": inputs["lengths"]}


def _check_outputs(model, words) -> None:
    out = part(TENSORS, "model/output")
    with torch.no_grad():
        batch = _batch(words)
        image, caption = model.double().encode_images(batch), model.encode_captions(batch)
    assert_close(image.mean, out["image_features"], TOL, "image mean")
    assert_close(image.logvar, 2 * out["image_logsigma"], TOL, "image logvar = 2 log sigma")
    assert_close(caption.mean, out["caption_features"], TOL, "caption mean")
    assert_close(caption.logvar, 2 * out["caption_logsigma"], TOL, "caption logvar = 2 log sigma")


def test_converted_model_equals_release_outputs():
    converted = convert_pcme_release(CHECKPOINT)
    assert converted.words[:4] == ["<pad>", "<unk>", "<start>", "<end>"]
    _check_outputs(converted.model, converted.words)
    shift = PROVENANCE["loss_config"]["init_shift"]
    scale = PROVENANCE["loss_config"]["init_negative_scale"]
    assert converted.similarity_options == {"match_prob": {"a": 2 * scale, "b": 2 * shift}}
    assert converted.backbone == {}  # the fixture's stand-in backbone has no weights


def test_release_backbone_weights_are_kept_apart(tmp_path):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint["model"]["img_enc.cnn.conv1.weight"] = torch.ones(2, 3, 1, 1)
    torch.save(checkpoint, tmp_path / "with_backbone.pth")
    converted = convert_pcme_release(tmp_path / "with_backbone.pth")
    assert list(converted.backbone) == ["cnn.conv1.weight"]
    _check_outputs(converted.model, converted.words)


def test_cli_writes_a_model_folder_pcmr_loads(tmp_path):
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "pcmr", "convert", "pcme-release", str(CHECKPOINT), str(run)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    model = load_model(run / "model")
    vocab = Vocabulary.load(run / "vocab.json")
    _check_outputs(model, vocab.words)
    options = json.loads((run / "similarity_options.json").read_text())
    assert set(options["match_prob"]) == {"a", "b"}
    assert not (run / "image_backbone.safetensors").exists()  # the stand-in backbone has no weights
    loaded = pcmr.load(run / "model")  # what `pcmr evaluate RUN/model` opens
    assert loaded.vocabulary.words == vocab.words and loaded.similarity_options == options


def test_bad_checkpoints_raise_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        convert_pcme_release(tmp_path / "missing.pth")
    broken = tmp_path / "broken.pth"
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(ReleaseCheckpointError, match="broken.pth"):
        convert_pcme_release(broken)
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    del checkpoint["model"]["txt_enc.uncertain_net.rnn.weight_ih_l0"]
    torch.save(checkpoint, tmp_path / "partial.pth")
    with pytest.raises(ReleaseCheckpointError, match="uncertain_net.rnn.weight_ih_l0"):
        convert_pcme_release(tmp_path / "partial.pth")
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint["config"]["model"]["txt_probemb"] = False
    torch.save(checkpoint, tmp_path / "deterministic.pth")
    with pytest.raises(ReleaseCheckpointError, match="txt_probemb"):
        convert_pcme_release(tmp_path / "deterministic.pth")


def test_converter_orders_words_as_pcmr_vocabularies_do():
    assert SPECIAL_TOKENS == DATA_SPECIAL_TOKENS
