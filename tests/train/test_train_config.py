"""Run config: YAML + --set overrides, type checking, one-line errors; LR schedules."""

from __future__ import annotations

import json
import math
import sys
import warnings

import pytest
import torch

from pcmr.data import ENCODE_BATCH_SIZE
from pcmr.evaluation import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.train.config import (
    ComponentConfig,
    ConfigError,
    RunConfig,
    apply_overrides,
    load_config,
    parse_override,
)
from pcmr.train.schedules import build_optimizer, learning_rate_factor, optimizer_name


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_and_sections(tmp_path):
    config = load_config(write(tmp_path, "model: {name: vsepp, embed_dim: 32}\ntrain: {epochs: 3}\n"))
    assert config.model == ComponentConfig("vsepp", {"embed_dim": 32})
    assert config.loss == ComponentConfig("pcme")
    assert config.to_dict()["model"] == {"name": "vsepp", "embed_dim": 32}
    assert config.train.epochs == 3 and config.train.lr == pytest.approx(2e-4)
    assert config.data.name == "shapes"
    assert RunConfig.from_dict(config.to_dict()) == config


def test_eval_defaults_come_from_the_library():
    config = RunConfig()
    assert config.eval.similarities == list(DEFAULT_SIMILARITIES)
    assert config.eval.rerankers == list(DEFAULT_RERANKERS)
    assert config.eval.batch_size == config.data.eval_batch_size == ENCODE_BATCH_SIZE
    config.eval.similarities.append("kl")  # a fresh list per config: the library tuple is untouched
    assert RunConfig().eval.similarities == list(DEFAULT_SIMILARITIES)


@pytest.mark.parametrize(
    ("item", "path", "value"),
    [
        ("train.lr=1e-3", ["train", "lr"], 1e-3),
        ("train.epochs=7", ["train", "epochs"], 7),
        ("train.grad_clip=none", ["train", "grad_clip"], None),
        ("train.deterministic=true", ["train", "deterministic"], True),
        ("model.name=pcme", ["model", "name"], "pcme"),
        ("eval.similarities=[cosine, kl]", ["eval", "similarities"], ["cosine", "kl"]),
        ("loss.margin=.2", ["loss", "margin"], 0.2),
    ],
)
def test_parse_override(item, path, value):
    assert parse_override(item) == (path, value)


def test_overrides_apply_and_coerce(tmp_path):
    path = write(tmp_path, "train: {lr: 0.1}\nmodel: {name: pcme}\n")
    config = load_config(
        path,
        [
            "train.lr=1e-3",
            "train.epochs=2",
            "model.embed_dim=16",
            "data.options.num_images=30",
            "eval.similarities=cosine,kl",
        ],
    )
    assert config.train.lr == pytest.approx(1e-3)
    assert config.train.epochs == 2
    assert config.model.options["embed_dim"] == 16
    assert config.data.options == {"num_images": 30}
    assert config.eval.similarities == ["cosine", "kl"]
    assert apply_overrides({"train": {"lr": 1}}, ["train.seed=3"]) == {"train": {"lr": 1, "seed": 3}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lrr=1"], "unknown config key 'train.lrr' (did you mean 'lr'?); accepted keys in train:"),
        (["trian.lr=1"], "unknown config key 'trian.lr' (did you mean 'train'?); top-level sections:"),
        (["train.epochs=abc"], "config key 'train.epochs' expects an integer, got 'abc'"),
        (["train.epochs=2.5"], "config key 'train.epochs' expects an integer"),
        (["train.lr=fast"], "config key 'train.lr' expects a number"),
        (
            ["train.schedule=linear"],
            "config key 'train.schedule' expects one of 'cosine', 'step', 'plateau', 'constant'",
        ),
        (["train.deterministic=3"], "expects true or false"),
        (["model.name="], "config section 'model' needs a 'name'"),
        (["train.epochs=0"], "train.epochs must be >= 1"),
        (["train"], "must have the form key=value"),
        (["train.=1"], "has an empty key"),
    ],
)
def test_bad_overrides_raise_one_line(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "model: {name: pcme}\n"), overrides)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="config section 'train' must be a mapping"):
        load_config(write(tmp_path, "train: 3\n"))


def reference_cosine(lr, epochs, warmup, warmup_factor, steps, epoch, step):
    if epoch < warmup:
        return lr * warmup_factor
    total = (epochs - warmup) * steps
    done = (epoch - warmup) * steps + step
    return lr * 0.5 * (1 + math.cos(math.pi * done / total))


def test_cosine_schedule_with_frozen_warmup():
    config = RunConfig.from_dict({"train": {"epochs": 5, "warmup_epochs": 2, "warmup_lr_factor": 0.5}}).train
    for epoch in range(5):
        for step in range(0, 7):
            got = config.lr * learning_rate_factor(config, epoch, step, 7)
            assert got == pytest.approx(reference_cosine(config.lr, 5, 2, 0.5, 7, epoch, step))


def test_step_schedule():
    config = RunConfig.from_dict({"train": {"epochs": 30, "schedule": "step", "step_epochs": 15}}).train
    factors = [learning_rate_factor(config, e, 0, 3) for e in (0, 14, 15, 29)]
    assert factors == pytest.approx([1.0, 1.0, 0.1, 0.1])


def test_build_optimizer_kinds():
    params = [torch.nn.Parameter(torch.zeros(3))]
    for name, cls in (("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)):
        config = RunConfig.from_dict({"train": {"optimizer": name, "lr": 0.01}}).train
        optimizer = build_optimizer(config, params)
        assert isinstance(optimizer, cls)
        assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(0.01)


def test_adamp_builds_the_multi_tensor_adamp_without_the_package(monkeypatch):
    """train.optimizer=adamp builds pcmr's AdamP (PCME's optimiser) with the configured lr and weight
    decay, whether or not the authors' package is installed, and without a warning."""
    from pcmr.train.adamp import AdamP

    monkeypatch.setitem(sys.modules, "adamp", None)  # `import adamp` now raises ImportError
    params = [torch.nn.Parameter(torch.zeros(3))]
    config = RunConfig.from_dict({"train": {"optimizer": "adamp", "lr": 0.01, "weight_decay": 0.0}}).train
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer = build_optimizer(config, params)
    assert isinstance(optimizer, AdamP) and optimizer_name(optimizer) == "adamp"
    assert optimizer.param_groups[0]["lr"] == 0.01 and optimizer.param_groups[0]["weight_decay"] == 0.0


def test_amsgrad_reaches_adam_and_is_refused_elsewhere():
    params = [torch.nn.Parameter(torch.zeros(3))]
    for name in ("adam", "adamw"):
        config = RunConfig.from_dict({"train": {"optimizer": name, "amsgrad": True}}).train
        assert build_optimizer(config, params).param_groups[0]["amsgrad"] is True
    assert build_optimizer(RunConfig.from_dict({}).train, params).param_groups[0]["amsgrad"] is False
    with pytest.raises(ConfigError, match="train.amsgrad applies to train.optimizer adam or adamw, not 'sgd'"):
        build_optimizer(RunConfig.from_dict({"train": {"optimizer": "sgd", "amsgrad": True}}).train, params)


def test_run_records_the_optimizer_that_ran(tmp_path, monkeypatch):
    """run.json and the log's start line name the optimiser that ran, and the one asked for (AdamP
    needs no optional package)."""
    from pcmr.train import Trainer, save_config

    monkeypatch.setitem(sys.modules, "adamp", None)
    config = load_config(None, [
        "model.name=vsepp", "loss.name=triplet_sum", "train.optimizer=adamp", "train.epochs=1",
        "train.progress=false", "train.validate_every=0",
        "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {tmp_path / 'cache'}}}",
        "data.batch_size=20", "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = Trainer(config, run_dir).fit()
    ran = "adamp"
    assert summary["optimizer"] == ran and summary["optimizer_requested"] == "adamp"
    assert json.loads((run_dir / "run.json").read_text())["optimizer"] == ran
    start = json.loads((run_dir / "log.jsonl").read_text().splitlines()[0])
    assert start["optimizer"] == ran and start["optimizer_requested"] == "adamp"


def test_train_relevance_reaches_the_training_batches(tmp_path):
    """data.train_relevance=source trains on the written pairs only; exact on the data's relation."""
    from pcmr.train import Trainer, save_config

    positives = {}
    for mode in ("source", "exact"):
        config = load_config(None, [
            "model.name=vsepp", "loss.name=triplet_sum", f"data.train_relevance={mode}",
            "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
            f"image_size: 32, cache_dir: {tmp_path / 'cache'}}}",
            "data.batch_size=20", "model.embed_dim=8", "model.text_encoder={word_dim: 8, hidden_dim: 8}",
            "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
        ])
        run_dir = tmp_path / mode
        run_dir.mkdir()
        save_config(config, run_dir / "config.yaml")
        batch = next(iter(Trainer(config, run_dir).loader))
        positives[mode] = int(batch["relevance"].sum())
    assert positives["source"] == 20 and positives["exact"] > 20
    assert load_config(None).data.train_relevance == "exact"
    for bad in ("all", "false"):
        with pytest.raises(ConfigError, match=r"'data.train_relevance' expects one of 'exact', 'source' .* got"):
            load_config(None, [f"data.train_relevance={bad}"])


def test_schedule_fractions_scale_with_the_epoch_count():
    """A step period or warm-up given as a share of training lands at the same point of any run."""
    from pcmr.train.schedules import learning_rate_factor

    paper = RunConfig.from_dict({"train": {"epochs": 30, "schedule": "step", "step_fraction": 0.5}}).train
    short = RunConfig.from_dict({"train": {"epochs": 6, "schedule": "step", "step_fraction": 0.5}}).train
    assert (paper.step_period(), short.step_period()) == (15, 3)
    factors = [learning_rate_factor(short, epoch, 0, 10) for epoch in range(6)]
    assert factors == pytest.approx([1, 1, 1, 0.1, 0.1, 0.1])
    warm = RunConfig.from_dict({"train": {"epochs": 6, "warmup_fraction": 0.5, "warmup_lr_factor": 0.5,
                                          "schedule": "step", "step_fraction": 1.0}}).train
    assert warm.warmup_epoch_count() == 3 and warm.step_period() == 3
    assert [learning_rate_factor(warm, e, 0, 10) for e in range(6)] == pytest.approx([0.5] * 3 + [1.0] * 3)
    assert warm.schedule_summary() == {"schedule": "step", "epochs": 6, "warmup_epochs": 3, "step_period": 3,
                                       "step_gamma": 0.1}
    assert paper.schedule_summary()["warmup_epochs"] == 0
    # without fractions nothing changes
    fixed = RunConfig.from_dict({"train": {"epochs": 6, "schedule": "step", "step_epochs": 15}}).train
    assert fixed.step_period() == 15


@pytest.mark.parametrize(("key", "value"), [("step_fraction", 0.0), ("step_fraction", 1.5),
                                            ("warmup_fraction", 1.0), ("warmup_fraction", "half")])
def test_bad_schedule_fraction_is_named(key, value):
    with pytest.raises(ConfigError, match=f"train.{key}"):
        RunConfig.from_dict({"train": {key: value}})
@pytest.mark.parametrize("old", ["true", "'true'"])
def test_the_old_spelling_true_reads_as_exact_with_a_deprecation(old, caplog):
    """``true`` (the YAML boolean or the string) was the training spelling of ``exact``: still read,
    with a DeprecationWarning and a logged line."""
    with pytest.warns(DeprecationWarning, match="old spelling of 'exact'"):
        config = load_config(None, [f"data.train_relevance={old}"])
    assert config.data.train_relevance == "exact"
    assert "old spelling of 'exact'" in caplog.text


def test_the_training_batch_default_is_defined_once():
    """The config's ``data.batch_size`` and ``train_loader``'s default are the same constant."""
    import inspect

    from pcmr.data.batching import TRAIN_BATCH_SIZE, train_loader

    assert load_config(None).data.batch_size == TRAIN_BATCH_SIZE
    assert inspect.signature(train_loader).parameters["batch_size"].default == TRAIN_BATCH_SIZE
