"""Model configs: family files, plain-dict round trip, YAML/JSON loading, overrides and clear errors;
save/load files: safetensors + JSON only, atomic writes, extra JSON, clear errors on bad folders."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml

from pcmr.models import (
    HeadConfig,
    ModelConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    create_model,
    get_model_config,
    list_models,
    load_model,
    read_extra_json,
    save_model,
)
from test_models_support import make_batch, single_thread  # noqa: F401  (autouse fixture)


@pytest.mark.parametrize("name", list_models())
def test_family_configs_round_trip_through_plain_dicts(name):
    config = get_model_config(name)
    assert config.name == name and config.description
    data = config_to_dict(config)
    assert json.loads(json.dumps(data)) == data  # JSON-serialisable
    assert config_from_dict(data) == config
    assert config_from_dict(json.loads(json.dumps(data))) == config


def test_every_config_field_has_a_comment():
    import inspect

    from pcmr.models import config as config_module

    source = inspect.getsource(config_module)
    for cls in (ModelConfig, HeadConfig, config_module.ImageEncoderConfig, config_module.TextEncoderConfig):
        lines = inspect.getsource(cls).splitlines()
        for field in dataclasses.fields(cls):
            index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{field.name}:"))
            assert lines[index - 1].strip().startswith("#"), f"{cls.__name__}.{field.name} has no comment"
    assert "variance_bounds" in source


def test_none_overrides_are_ignored_and_values_applied():
    model = create_model("pcme", embed_dim=None, vocab_size=41, image_encoder=None)
    assert model.config.embed_dim == 128 and model.config.vocab_size == 41
    model = create_model("pcme", embed_dim=64, vocab_size=41)
    assert model.config.embed_dim == 64
    assert model(make_batch(model.config))["image"].mean.shape == (3, 64)


def test_dotted_and_nested_overrides():
    model = create_model(
        "probvse",
        vocab_size=41,
        **{
            "image_encoder.kind": "global_features",
            "image_encoder.feature_dim": 13,
            "caption_head.covariance": None,
        },
    )
    assert (
        model.config.image_encoder.kind == "global_features" and model.config.image_encoder.feature_dim == 13
    )
    assert model.config.caption_head.covariance == "ellipsoidal"
    assert model.config.image_encoder.cnn_channels == [32, 64, 128, 256]  # untouched fields kept
    model = create_model(
        "gcie", vocab_size=41, caption_head={"covariance": "spherical_one_value", "kind": None}
    )
    assert model.config.caption_head.covariance == "spherical_one_value"
    assert model.config.caption_head.kind == "linear"
    assert model.config.caption_head.variance_bounds == [0.1, 10.0]


def test_unknown_keys_name_the_key_and_the_accepted_keys():
    with pytest.raises(
        ValueError, match=r"unknown model config key 'embedding_size' \(did you mean 'embed_dim'\?\); accepted keys: .*embed_dim"
    ):
        create_model("pcme", embedding_size=3)
    with pytest.raises(ValueError, match=r"'image_encoder.knd' \(did you mean 'kind'\?\); accepted keys in image_encoder: .*\bkind\b"):
        create_model("pcme", **{"image_encoder.knd": "cnn"})
    with pytest.raises(ValueError, match=r"'image_encoder.knd' \(did you mean 'kind'\?\); accepted keys in image_encoder: .*\bkind\b"):
        create_model("pcme", image_encoder={"knd": "cnn"})
    with pytest.raises(ValueError, match="dotted keys start with one of"):
        create_model("pcme", **{"optimizer.lr": 1.0})
    with pytest.raises(ValueError, match=r"unknown model 'pcme2' \(did you mean 'pcme'\?\); expected one of: .*pcme, pcme_mu_only"):
        create_model("pcme2")


def test_bad_values_name_the_field():
    with pytest.raises(
        ValueError, match=r"'caption_head.covariance' is 'diagonal'; expected one of: ellipsoidal"
    ):
        create_model("pcme", **{"caption_head.covariance": "diagonal"})
    with pytest.raises(ValueError, match=r"'image_encoder.kind' is 'resnet'"):
        create_model("pcme", image_encoder={"kind": "resnet"})
    with pytest.raises(ValueError, match=r"model config key 'embed_dim' expects an integer, got '64'"):
        create_model("pcme", embed_dim="64")
    with pytest.raises(ValueError, match=r"'embed_dim' must be a positive integer"):
        create_model("pcme", embed_dim=0)
    with pytest.raises(ValueError, match=r"'image_head.variance_bounds' must be \[lo, hi\] with 0 < lo < hi"):
        create_model("gie", **{"image_head.variance_bounds": [10.0, 0.1]})
    with pytest.raises(ValueError, match=r"'text_encoder.bidirectional' expects true or false, got 'yes'"):
        create_model("pcme", text_encoder={"bidirectional": "yes"})
    with pytest.raises(ValueError, match=r"'image_encoder.cnn_channels\[1\]' expects an integer, got 1.5"):
        create_model("pcme", image_encoder={"cnn_channels": [8, 1.5]})
    with pytest.raises(TypeError, match="create_model expects a model name"):
        create_model(3)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_config_files_and_dicts(tmp_path, suffix):
    data = {
        "name": "mine",
        "embed_dim": 32,
        "vocab_size": 19,
        "caption_head": {"kind": "pcme", "probabilistic": True},
    }
    path = tmp_path / f"model{suffix}"
    path.write_text(yaml.safe_dump(data) if suffix == ".yaml" else json.dumps(data), encoding="utf-8")
    model = create_model(path, embed_dim=48)
    assert model.config.name == "mine" and model.config.embed_dim == 48
    assert model.config.caption_head.kind == "pcme" and model.config.image_encoder.kind == "cnn"
    assert create_model(str(path)).config.embed_dim == 32
    assert create_model(data).config == create_model(config_from_dict(data)).config
    assert apply_overrides(data, {"embed_dim": None}) == data
    path.write_text("[1, 2" if suffix == ".json" else "a: [1, 2", encoding="utf-8")
    with pytest.raises(ValueError, match=f"model config file .*model{suffix}.* is not valid"):
        create_model(path)
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        create_model(tmp_path / "missing.yaml")


# --------------------------------------------------------------------------- save / load files
def test_saved_folder_holds_safetensors_json_and_extras_only(tmp_path):
    model = create_model("gcie", vocab_size=19)
    vocabulary = {"words": ["<pad>", "<unk>", "<start>", "<end>", "red"], "lowercase": True}
    folder = save_model(model, tmp_path / "run", extra_json={"vocabulary": vocabulary, "notes.json": [1, 2]})
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "config.json",
        "model.safetensors",
        "notes.json",
        "vocabulary.json",
    ]  # no temp files left
    assert read_extra_json(folder, "vocabulary") == vocabulary and read_extra_json(folder, "notes") == [1, 2]
    assert json.loads((folder / "config.json").read_text()) == config_to_dict(model.config)
    raw = (folder / "model.safetensors").read_bytes()
    header_size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_size])
    assert header["__metadata__"]["format"] == "pcmr.models"
    assert set(header) - {"__metadata__"} == set(model.state_dict())
    save_model(model, folder)  # overwriting an existing folder works
    assert sorted(p.name for p in folder.iterdir()) == names


def test_bad_extra_json_is_rejected(tmp_path):
    model = create_model("vsepp", vocab_size=19)
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        save_model(model, tmp_path, extra_json={"vocabulary": {1, 2}})
    with pytest.raises(ValueError, match="not a valid file stem"):
        save_model(model, tmp_path, extra_json={"../escape": 1})
    with pytest.raises(ValueError, match="not a valid file stem"):
        save_model(model, tmp_path, extra_json={"config": 1})
    with pytest.raises(TypeError, match="save_model expects a model made by pcmr.create_model"):
        save_model(torch.nn.Linear(2, 2), tmp_path)


def test_loading_bad_folders_raises_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
    model = create_model("vsepp", vocab_size=19)
    save_model(model, tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x80\x04\x95 pickled bytes are never unpickled")
    with pytest.raises(ValueError, match="is not a valid safetensors file"):
        load_model(tmp_path)
    save_model(create_model("vsepp_wide", vocab_size=19), tmp_path / "wide")
    (tmp_path / "model.safetensors").write_bytes((tmp_path / "wide" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="does not match config.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"embed_dim": 8, "colour": 1}), encoding="utf-8")
    with pytest.raises(ValueError, match="unknown model config key 'colour'"):
        load_model(tmp_path)
    (tmp_path / "wide" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(tmp_path / "wide")
