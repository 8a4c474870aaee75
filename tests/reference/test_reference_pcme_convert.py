"""Converting a checkpoint written by PCME's release gives a pcmr model with the release's outputs.

The checkpoint (tests/fixtures/reference/pcme_release_checkpoint.pth) is the release's ``PCME``
model with small dimensions and random weights, saved in the release's checkpoint layout by
tools/reference/pcme_release.py; the fixture holds the release's outputs for the same inputs.
``pcme_release_checkpoint_fp16.pth`` is the same model as the release saves it after
mixed-precision training (apex O2: float16 weights, float32 criterion), with its outputs under
``model_fp16/``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pcmr
from _reference import FIXTURES, assert_close, load_fixture, part
from pcmr.data import Vocabulary
from pcmr.data.text import SPECIAL_TOKENS as DATA_SPECIAL_TOKENS
from pcmr.models import load_model
from pcmr.models.convert_pcme_release import SPECIAL_TOKENS, ReleaseCheckpointError, convert_pcme_release

CHECKPOINT = FIXTURES / "pcme_release_checkpoint.pth"
CHECKPOINT_FP16 = FIXTURES / "pcme_release_checkpoint_fp16.pth"
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


def _check_outputs(model, words, prefix: str = "model/output") -> None:
    out = part(TENSORS, prefix)
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


def test_half_precision_checkpoint_converts_to_a_float32_model():
    checkpoint = torch.load(CHECKPOINT_FP16, weights_only=True)
    assert {value.dtype for value in checkpoint["model"].values()} == {torch.float16}  # as apex O2 saves it
    converted = convert_pcme_release(CHECKPOINT_FP16)
    assert {p.dtype for p in converted.model.parameters()} == {torch.float32}
    for name, value in converted.model.state_dict().items():
        assert value.dtype == torch.float32, name
    # float16 values are float32 values: the converted model equals the release's model with the saved
    # weights (the release's outputs with those weights, run in float64)
    _check_outputs(converted.model, converted.words, "model_fp16/output")


def test_half_precision_backbone_weights_are_kept_as_float32(tmp_path):
    checkpoint = torch.load(CHECKPOINT_FP16, weights_only=True)
    checkpoint["model"]["img_enc.cnn.conv1.weight"] = torch.ones(2, 3, 1, 1, dtype=torch.float16)
    checkpoint["model"]["img_enc.cnn.bn1.num_batches_tracked"] = torch.tensor(3)
    torch.save(checkpoint, tmp_path / "with_backbone.pth")
    backbone = convert_pcme_release(tmp_path / "with_backbone.pth").backbone
    assert backbone["cnn.conv1.weight"].dtype == torch.float32
    assert backbone["cnn.bn1.num_batches_tracked"].dtype == torch.int64


@pytest.mark.parametrize("where, key", [
    ("model", "txt_enc.uncertain_net.extra.weight"),
    ("model", "img_enc.pie_net.fc3.bias"),
    ("criterion", "temperature"),
    (None, "ema_model"),
])
def test_a_release_key_pcmr_does_not_map_is_an_error_naming_it(tmp_path, where, key):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    (checkpoint[where] if where else checkpoint)[key] = torch.zeros(2)
    torch.save(checkpoint, tmp_path / "extra.pth")
    with pytest.raises(ReleaseCheckpointError, match=f"does not convert: {key}"):
        convert_pcme_release(tmp_path / "extra.pth")


def test_the_release_optimiser_and_scheduler_states_are_accepted(tmp_path):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint["optimizer"] = {"state": {}, "param_groups": [{"lr": 2e-4, "params": [0, 1]}]}
    checkpoint["lr_scheduler"] = {"T_max": 30, "last_epoch": 3}
    torch.save(checkpoint, tmp_path / "full.pth")
    _check_outputs(convert_pcme_release(tmp_path / "full.pth").model, convert_pcme_release(CHECKPOINT).words)


@pytest.mark.parametrize("key, shape", [
    ("txt_enc.pie_net.fc.weight", (8, 5)),
    ("txt_enc.uncertain_net.rnn.weight_hh_l0_reverse", (12, 3)),
    ("img_enc.uncertain_net.attention.w_2.weight", (2, 5)),
])
def test_a_shape_mismatch_is_reported_in_the_release_names(tmp_path, key, shape):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint["model"][key] = torch.zeros(shape, dtype=checkpoint["model"][key].dtype)
    torch.save(checkpoint, tmp_path / "bad_shape.pth")
    with pytest.raises(ReleaseCheckpointError, match=rf"{key} has shape \[{shape[0]}, {shape[1]}\], expected"):
        convert_pcme_release(tmp_path / "bad_shape.pth")


def _fixture_tool():
    path = Path(__file__).resolve().parents[2] / "tools" / "reference" / "pcme_release.py"
    spec = importlib.util.spec_from_file_location("pcme_release_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixture_tool_creates_its_output_folders(tmp_path):
    tool = _fixture_tool()
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    target = tmp_path / "new" / "folder" / "release.pth"
    tool.save_checkpoint(target, checkpoint)
    assert torch.load(target, weights_only=True)["word2idx"] == checkpoint["word2idx"]


def test_the_fixture_tool_casts_as_apex_o2_does():
    tool = _fixture_tool()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.GRU(4, 2),
                                torch.nn.LayerNorm(2))
    tool.cast_like_apex_o2(model)
    dtypes = {name: value.dtype for name, value in model.state_dict().items()}
    assert dtypes.pop("1.num_batches_tracked") == torch.int64
    assert {dtypes.pop(f"1.{name}") for name in ("weight", "bias", "running_mean", "running_var")} == {torch.float32}
    assert set(dtypes.values()) == {torch.float16}


def test_cli_writes_a_float32_model_from_a_half_precision_checkpoint(tmp_path):
    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "pcmr", "convert", "pcme-release", str(CHECKPOINT_FP16), str(run)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    model = load_model(run / "model")
    assert {value.dtype for value in model.state_dict().values() if value.is_floating_point()} == {torch.float32}
    _check_outputs(model, Vocabulary.load(run / "vocab.json").words, "model_fp16/output")


def _model_keys() -> list[str]:
    return sorted(torch.load(CHECKPOINT, weights_only=True)["model"])


@pytest.mark.parametrize("key", _model_keys())
def test_every_model_entry_of_another_rank_or_type_is_an_error_naming_it(tmp_path, key):
    for bad in (lambda v: v.reshape(-1, 1, 1), lambda v: v.tolist() if v.numel() < 50 else "text"):
        checkpoint = torch.load(CHECKPOINT, weights_only=True)
        checkpoint["model"][key] = bad(checkpoint["model"][key])
        torch.save(checkpoint, tmp_path / "bad.pth")
        with pytest.raises(ReleaseCheckpointError, match=key.replace(".", r"\.")):
            convert_pcme_release(tmp_path / "bad.pth")


@pytest.mark.parametrize("section, key, value", [
    ("criterion", "shift", torch.zeros(0)),
    ("criterion", "negative_scale", torch.zeros(2, 2)),
    ("criterion", "shift", 1.5),
    ("word2idx", "dog", "seven"),
    ("word2idx", "dog", True),
    ("config", "model", ["pcme"]),
])
def test_every_bad_criterion_vocabulary_or_config_entry_is_an_error_naming_it(tmp_path, section, key, value):
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint[section][key] = value
    torch.save(checkpoint, tmp_path / "bad.pth")
    with pytest.raises(ReleaseCheckpointError, match=f"{section if section == 'config' else ''}.*{key}"):
        convert_pcme_release(tmp_path / "bad.pth")
