"""A model config naming huge sizes is refused from the weights file's header, before anything of the
model's size is allocated: `load_model`, `pcmr.load` and `Model.from_pretrained` raise one error naming
the config key, its value and the value the weights imply, and never build the real model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pcmr
import pcmr.models.serialization as serialization
import pcmr.models.shape_check as shape_check
from pcmr.models import create_model, load_model, save_model
from pcmr.models.shape_check import weight_shapes

TINY = {"embed_dim": 4, "image_encoder": {"cnn_channels": [4, 8]}, "text_encoder": {"word_dim": 8, "hidden_dim": 8}}


def _edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def never_built(monkeypatch):
    """Fail the test if the real model (or, with ``meta=False``, even the meta one) is built."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was built before the config was checked against the weights")

    monkeypatch.setattr(serialization, "build_model", refuse)
    return lambda: monkeypatch.setattr(shape_check, "build_model", refuse)


@pytest.mark.parametrize(("edit", "message", "meta_allowed"), [
    (lambda c: c.update(vocab_size=4_000_000),
     r"embedding\.weight is \[50, 8\] in the weights but config.json implies \[4000000, 8\]; vocab_size is 4000000 "
     r"in the config; the weights imply 50", True),
    (lambda c: c["text_encoder"].update(num_layers=1_000_000),
     r"text_encoder.num_layers is 1000000 in config.json but the weights imply 1 ", False),
    (lambda c: c["image_encoder"].update(cnn_channels=[4, 8] * 500_000),
     r"image_encoder.cnn_channels is \[4, 8, 4, 8, .* in config.json but the weights imply \[4, 8\]", False),
    (lambda c: c.update(embed_dim=2**20),
     r"is \[4\] in the weights but config.json implies \[1048576\]; embed_dim is 1048576 in the config; the weights "
     r"imply 4 \(28 tensors differ\)",
     True),
    (lambda c: c.update(embed_dim=2**40),
     r"the sizes of config.json cannot be built .* the largest dimension in the weights is 50, the config gives "
     r"embed_dim = 1099511627776", True),
])
def test_a_huge_config_fails_from_the_header_naming_the_key(tmp_path, never_built, edit, message, meta_allowed):
    save_model(create_model("pcme", vocab_size=50, **TINY), tmp_path)
    _edit_config(tmp_path, edit)
    if not meta_allowed:
        never_built()  # layer counts are checked from the names alone, before even a meta build
    with pytest.raises(ValueError, match=message):
        load_model(tmp_path)


def test_reasoning_layers_are_counted_from_the_weights(tmp_path, never_built):
    save_model(create_model("probvsrn", vocab_size=20, **{**TINY, "embed_dim": 8}), tmp_path)
    assert len({n.split(".")[4] for n in weight_shapes(tmp_path / "model.safetensors")
                if n.startswith("image_tower.encoder.refine.layers.")}) == 4
    _edit_config(tmp_path, lambda c: c["image_encoder"].update(reasoning_layers=1_000_000))
    never_built()
    with pytest.raises(ValueError, match="image_encoder.reasoning_layers is 1000000 in config.json but the weights "
                                         "imply 4"):
        load_model(tmp_path)


def test_hub_and_run_loading_check_the_config_first(search_run_factory, tmp_path, never_built):
    run = search_run_factory(tmp_path / "run")
    pcmr_model = None
    _edit_config(run / "model", lambda c: c.update(vocab_size=4_000_000))
    with pytest.raises(ValueError, match="vocab_size is 4000000 in the config"):
        pcmr_model = pcmr.load(run)
    with pytest.raises(ValueError, match="vocab_size is 4000000 in the config"):
        pcmr_model = pcmr.Model.from_pretrained(str(run / "model"))
    assert pcmr_model is None


def test_a_matching_config_still_loads_exactly(tmp_path):
    model = create_model("pvse", vocab_size=30, **TINY)
    save_model(model, tmp_path)
    loaded = load_model(tmp_path)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
