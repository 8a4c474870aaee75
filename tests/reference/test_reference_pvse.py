"""PVSE's release (yalesong/pvse): the caption encoder in its two GRU modes, and its learning-rate schedule.

The fixture (tools/reference/pvse_release.py) holds the outputs of the release's ``model.EncoderText``
(K = 2, dropout 0) in its default mode and with ``--legacy``, which its COCO checkpoints use. pcmr's
``pvse`` model with the same weights gives the same K embeddings: ``sentence_feature: final_state``
is the default mode, ``sentence_feature: last_output`` the legacy one.

The release's schedule is torch's ``ReduceLROnPlateau(optimizer, factor=0.5, min_lr=1e-10)`` (mode
'min' by default) stepped once per epoch with the validation rsum (``train.py``); pcmr's ``plateau``
schedule is compared with that scheduler fed rising rsum sequences.
"""

from __future__ import annotations

import pytest
import torch

from _reference import assert_close, load_fixture, part
from pcmr.models import create_model
from pcmr.train import load_config
from pcmr.train.config import ConfigError, TrainConfig
from pcmr.train.recipes import list_recipes
from pcmr.train.schedules import learning_rate_factor, plateau_reductions

PVSE, PVSE_INFO = load_fixture("pvse")
TOL = PVSE_INFO["tolerance"]
#: the release's EncoderText names -> pcmr's pvse caption tower
_GRU = [f"{kind}_{part}_l0{suffix}" for kind in ("weight", "bias") for part in ("ih", "hh") for suffix in ("", "_reverse")]
NAMES = {
    "embed.weight": "caption_tower.encoder.backbone.embedding.weight",
    **{f"rnn.{name}": f"caption_tower.encoder.backbone.gru.{name}" for name in _GRU},
    "pie_net.attention.w_1.weight": "caption_tower.mean_head.attention.w1.weight",
    "pie_net.attention.w_2.weight": "caption_tower.mean_head.attention.w2.weight",
    "pie_net.fc.weight": "caption_tower.mean_head.fc_local.weight",
    "pie_net.fc.bias": "caption_tower.mean_head.fc_local.bias",
    "pie_net.layer_norm.weight": "caption_tower.mean_head.layer_norm.weight",
    "pie_net.layer_norm.bias": "caption_tower.mean_head.layer_norm.bias",
}


def _caption_points(prefix: str, sentence_feature: str) -> tuple[torch.Tensor, torch.Tensor]:
    weights = part(PVSE, f"{prefix}/weight")
    vocab_size, word_dim = weights["embed.weight"].shape
    model = create_model("pvse", embed_dim=8, vocab_size=int(vocab_size),
                         text_encoder={"word_dim": int(word_dim), "sentence_feature": sentence_feature},
                         image_head={"num_embeds": 2}, caption_head={"num_embeds": 2}).double().eval()
    state = model.state_dict()
    assert set(NAMES.values()) == {k for k in state if k.startswith("caption_tower.")}  # every weight mapped
    state.update({ours: weights[theirs] for theirs, ours in NAMES.items()})
    model.load_state_dict(state)
    inputs = part(PVSE, f"{prefix}/input")
    with torch.no_grad():
        encoded = model.caption_tower.encode({"captions": inputs["captions"], "caption_lengths": inputs["lengths"]})
    return encoded.points, encoded.residuals


@pytest.mark.parametrize("prefix, sentence_feature", [("encoder_text", "final_state"),
                                                      ("encoder_text_legacy", "last_output")])
def test_pvse_caption_tower_equals_the_release_in_both_gru_modes(prefix, sentence_feature):
    points, residuals = _caption_points(prefix, sentence_feature)
    assert_close(points, PVSE[f"{prefix}/output"], TOL, f"{prefix} points")
    assert_close(residuals, PVSE[f"{prefix}/residual"], TOL, f"{prefix} residuals")


def test_the_two_gru_modes_differ():
    """The legacy fixture is not the default mode under another name (same weights, other points)."""
    points, _ = _caption_points("encoder_text_legacy", "final_state")
    assert (points - PVSE["encoder_text_legacy/output"]).abs().max() > 1e-3


def _release_lrs(rsums: list[float], lr: float) -> list[float]:
    """The lr of each epoch under the release's scheduler: epoch e trains at the lr left by the steps
    after epochs 0 .. e-1 (train.py: train, validate, lr_scheduler.step(val_score))."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=lr, amsgrad=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, min_lr=1e-10)
    lrs = []
    for rsum in rsums:
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step(rsum)
    return lrs


@pytest.mark.parametrize("rsums", [
    [100.0 + 10 * e for e in range(45)],  # steadily improving
    [50.0 + 400 * (1 - 0.9 ** e) for e in range(30)],  # improving ever more slowly (the 1e-4 threshold)
    [100.0 + e + (3.0 if e % 2 else 0.0) for e in range(40)],  # noisy, never below the first epoch's
])
def test_plateau_schedule_equals_the_release_scheduler_on_rising_rsum(rsums):
    config = TrainConfig(epochs=len(rsums), lr=2e-4, schedule="plateau", optimizer="adam", amsgrad=True)
    ours = [config.lr * learning_rate_factor(config, epoch, step, 7) for epoch in range(len(rsums)) for step in (0, 6)]
    release = [lr for lr in _release_lrs(rsums, 2e-4) for _ in (0, 6)]
    assert ours == pytest.approx(release, rel=1e-12)


def test_plateau_schedule_halves_at_epochs_12_and_23():
    config = load_config(list_recipes()["pvse"]).train
    factors = [learning_rate_factor(config, epoch, 0, 10) for epoch in range(config.epochs)]
    assert factors == [1.0] * 12 + [0.5] * 11 + [0.25] * 7
    assert [plateau_reductions(e, 10) for e in (0, 1, 11, 12, 22, 23, 33, 34)] == [0, 0, 0, 1, 1, 2, 2, 3]


def test_plateau_schedule_counts_after_the_warm_up():
    config = TrainConfig(epochs=20, schedule="plateau", plateau_patience=2, plateau_factor=0.1, warmup_epochs=3,
                         warmup_lr_factor=0.5)
    factors = [learning_rate_factor(config, epoch, 0, 4) for epoch in range(10)]
    assert factors == pytest.approx([0.5] * 3 + [1.0] * 4 + [0.1] * 3)


@pytest.mark.parametrize("field, value", [("plateau_patience", -1), ("plateau_patience", 1.5),
                                          ("plateau_factor", 1.0), ("plateau_factor", 0.0)])
def test_plateau_settings_are_checked(field, value):
    with pytest.raises(ConfigError, match=f"train.{field}"):
        TrainConfig(**{field: value})


def test_a_pvse_run_logs_the_release_scheduler_lr(tmp_path, cache_dir):
    """The pvse recipe's run (patience shortened to 1 so that the halvings fall in 5 epochs) logs, per
    step, the lr torch's ReduceLROnPlateau gives when fed the rising rsum as the release feeds it."""
    import json

    from pcmr.train import Trainer, save_config

    config = load_config(list_recipes()["pvse"], [
        "data.options={num_train: 12, num_val: 8, num_test: 8, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=10", "train.epochs=5", "train.max_steps_per_epoch=1", "train.log_every=1",
        "train.plateau_patience=1", "train.progress=false", "train.validate_every=0", "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}", "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    Trainer(config, run_dir).fit()
    lines = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    logged = [line["lr"] for line in lines if line.get("event") == "step"]
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=config.train.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, min_lr=1e-10, patience=1)
    want = []
    for epoch in range(5):
        want.append(optimizer.param_groups[0]["lr"])
        scheduler.step(100.0 + epoch)
    assert logged == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx([2e-4, 2e-4, 2e-4, 1e-4, 1e-4])


def test_the_study_reports_the_plateau_schedule():
    from pcmr.study.backend import schedule_text

    summary = load_config(list_recipes()["pvse"]).train.schedule_summary()
    assert summary["plateau_patience"] == 10 and summary["plateau_factor"] == 0.5
    assert schedule_text(summary).startswith("plateau: 30 epochs, lr x 0.5 at epochs 1 + 11k, k >= 1")
