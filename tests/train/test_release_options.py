"""Options that give a release's behaviour where pcmr's recipes differ: the plateau schedule replayed on
the validation metric (PVSE's ReduceLROnPlateau), PVSE's default-initialised fc."""

from __future__ import annotations

import pytest
import torch

from pcmr.models import create_model
from pcmr.train.config import TrainConfig
from pcmr.train.schedules import learning_rate_factor, plateau_reductions, plateau_reductions_on


def torch_plateau(values: list[float], patience: int) -> list[float]:
    """The lr factor before each epoch under torch's ReduceLROnPlateau(mode 'min', factor 0.5), stepped
    with ``values`` after each epoch (as PVSE's train.py does with the validation rsum)."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=2e-4)  # PVSE's lr: min_lr and eps (1e-8) are not reached
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=patience, min_lr=1e-10)
    factors = []
    for value in values:
        factors.append(optimizer.param_groups[0]["lr"] / 2e-4)
        scheduler.step(value)
    return factors


@pytest.mark.parametrize("seed", range(6))
def test_plateau_on_validation_replays_torchs_scheduler(seed):
    generator = torch.Generator().manual_seed(seed)
    # a rising rsum with dips below its running minimum now and then (as in pcmr's own PVSE run)
    values = (torch.linspace(100, 400, 30) + 60 * torch.randn(30, generator=generator)).tolist()
    values[3] = min(values[:3]) - 5.0
    patience = int(torch.randint(2, 7, (1,), generator=generator))
    want = torch_plateau(values, patience)
    config = TrainConfig(schedule="plateau", plateau_on="validation", plateau_patience=patience, select_on="rsum",
                         plateau_factor=0.5)
    history = [{"epoch": e + 1, "val": {"rsum": v}} for e, v in enumerate(values)]
    got = [learning_rate_factor(config, e, 0, 10, history[:e]) for e in range(len(values))]
    assert got == pytest.approx(want, rel=1e-12)
    assert [0.5 ** plateau_reductions_on(values[:e], patience) for e in range(30)] == pytest.approx(want)


def test_plateau_formula_equals_the_replay_on_a_rising_metric():
    values = [float(v) for v in range(100, 130)]  # never below the first: every later epoch is "bad"
    for epoch in range(30):
        assert plateau_reductions_on(values[:epoch], 10) == plateau_reductions(epoch, 10)
    config = TrainConfig(schedule="plateau", plateau_on="validation", warmup_epochs=2, select_on="rsum")
    history = [{"epoch": e + 1, "val": None if e == 4 else {"rsum": 100.0 - e}} for e in range(8)]
    # warm-up epochs do not count; an epoch without validation is not a step
    assert learning_rate_factor(config, 8, 0, 1, history) == 1.0


def test_pvse_fc_init_default_keeps_pytorchs_init():
    torch.manual_seed(0)
    xavier = create_model("pvse", vocab_size=10)
    torch.manual_seed(0)
    default = create_model("pvse", vocab_size=10, image_head={"fc_init": "default"})
    fc_xavier, fc_default = xavier.image_tower.mean_head.fc, default.image_tower.mean_head.fc
    assert torch.equal(fc_xavier.bias, torch.zeros_like(fc_xavier.bias)) and fc_default.bias.abs().sum() > 0
    bound = 1.0 / fc_default.in_features ** 0.5  # nn.Linear's default: uniform within 1 / sqrt(fan_in)
    with torch.no_grad():
        assert float(fc_default.weight.abs().max()) <= bound and float(fc_default.bias.abs().max()) <= bound
    with pytest.raises(ValueError, match="image_head.fc_init"):
        create_model("pvse", vocab_size=10, image_head={"fc_init": "zeros"})


def test_loss_ramp_factor_is_pcmepps_epoch_ramp():
    from pcmr.train.schedules import loss_ramp_factor

    config = TrainConfig(loss_ramp_epoch=3)
    assert [loss_ramp_factor(config, 2, s, 4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert loss_ramp_factor(config, 1, 0, 4) == loss_ramp_factor(config, 3, 0, 4) == 1.0
    assert loss_ramp_factor(TrainConfig(), 2, 0, 4) == 1.0
    from pcmr.config import ConfigError

    with pytest.raises(ConfigError, match="train.loss_ramp_epoch"):
        TrainConfig(loss_ramp_epoch=0)


def test_loss_ramp_scales_the_first_update(tmp_path, cache_dir):
    """Plain SGD: the first step of a ramped epoch of 2 steps moves every weight half as far."""
    from pcmr.train import Trainer, load_config, save_config
    from pcmr.train.checkpoint import list_checkpoints, load_checkpoint
    from pcmr.train.recipes import list_recipes

    deltas = {}
    for name, extra in (("plain", []), ("ramp", ["train.loss_ramp_epoch=1"])):
        config = load_config(list_recipes()["vsepp_max"], [
            "data.options={num_train: 12, num_val: 6, num_test: 6, num_test_unseen: 1, num_binary_selection: 1, "
            f"image_size: 32, cache_dir: {cache_dir}}}", "data.batch_size=6", "train.epochs=1",
            "train.max_steps_per_epoch=2", "train.checkpoint_every_steps=1", "train.keep_checkpoints=3",
            "train.validate_every=0", "train.progress=false", "train.optimizer=sgd", "train.momentum=0",
            "train.weight_decay=0", "train.grad_clip=null", "train.schedule=constant", "model.embed_dim=8",
            "model.text_encoder={word_dim: 8, hidden_dim: 8}", "model.image_encoder={cnn_channels: [4, 4]}",
            *extra])
        run_dir = tmp_path / name
        run_dir.mkdir()
        save_config(config, run_dir / "config.yaml")
        trainer = Trainer(config, run_dir)
        initial = {f"model.{k}": v.detach().clone() for k, v in trainer.model.named_parameters()}
        trainer.fit()
        checkpoints = {c.state["progress"]["global_step"]: c.weights
                       for c in map(load_checkpoint, list_checkpoints(run_dir / "checkpoints"))}
        deltas[name] = {k: checkpoints[1][k] - v for k, v in initial.items()}
    moved = [k for k, v in deltas["plain"].items() if v.abs().max() > 0]
    assert len(moved) > len(deltas["plain"]) // 2
    for key in moved:
        torch.testing.assert_close(deltas["ramp"][key], 0.5 * deltas["plain"][key], rtol=1e-4, atol=1e-7)
