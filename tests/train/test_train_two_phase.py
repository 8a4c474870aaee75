"""The PCME release's training, as pcmr reproduces it: two phases (a fresh optimizer after the warm-up)
that a resumed run repeats exactly, and gradient clipping of the model's parameters only."""

from __future__ import annotations

import pytest
import torch

from pcmr.train import Trainer, load_config, save_config
from pcmr.train.checkpoint import load_latest_checkpoint
from pcmr.train.recipes import list_recipes


def overrides(cache_dir) -> list[str]:
    return [
        "data.options={num_train: 12, num_val: 6, num_test: 6, num_test_unseen: 1, num_binary_selection: 1, "
        f"image_size: 32, cache_dir: {cache_dir}}}",
        "data.batch_size=10",
        "train.epochs=2",
        "train.warmup_epochs=1",
        "train.finetune_lr_factor=0.1",
        "train.cosine_epochs=3",
        "train.max_steps_per_epoch=3",
        "train.checkpoint_every_steps=1",
        "train.validate_every=0",
        "train.progress=false",
        "loss.num_samples=2",
        "model.embed_dim=8",
        "model.text_encoder={word_dim: 8, hidden_dim: 8}",
        "model.image_encoder={cnn_channels: [4, 4, 4, 4]}",
    ]


def start(tmp_path, name, cache_dir, extra=()):
    config = load_config(list_recipes()["pcme"], [*overrides(cache_dir), *extra])
    run_dir = tmp_path / name
    run_dir.mkdir()
    save_config(config, run_dir / "config.yaml")
    return config, run_dir


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    config, run_dir = start(tmp_path_factory.mktemp("reference"), "run", cache_dir)
    assert config.train.restart_optimizer and config.train.warmup_schedule == "cosine"
    Trainer(config, run_dir).fit()
    return load_latest_checkpoint(run_dir / "checkpoints").weights


@pytest.mark.parametrize("fail_on_write", [4, 5])
def test_resume_repeats_the_optimizer_restart(tmp_path, cache_dir, reference, train_until_crash, fail_on_write):
    """A crash as checkpoint 4 (the first fine-tune step) or 5 is written: the run resumes from the end
    of the warm-up (and restarts the optimizer itself) or from the first fine-tune step (and restores
    the fresh optimizer's state), and ends with the uninterrupted run's weights."""
    config, run_dir = start(tmp_path, "run", cache_dir)
    train_until_crash(config, run_dir, fail_on_write)
    assert load_latest_checkpoint(run_dir / "checkpoints").state["progress"]["global_step"] == fail_on_write - 1
    Trainer(config, run_dir, resume=True).fit()
    weights = load_latest_checkpoint(run_dir / "checkpoints").weights
    assert weights.keys() == reference.keys()
    for key, value in reference.items():
        torch.testing.assert_close(weights[key], value, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("scope", ["model", "all"])
def test_clipping_covers_the_model_only_as_released(tmp_path, cache_dir, scope):
    """With a tiny clipping norm and plain SGD, one step moves the model by at most lr * norm; the loss's
    a and b move by their full gradient under scope "model" (the PCME release clips
    ``model.parameters()`` only), by at most lr * norm under "all"."""
    lr, clip = 0.5, 1e-9
    config, run_dir = start(tmp_path, "run", cache_dir, [
        "train.optimizer=sgd", "train.momentum=0.0", f"train.lr={lr}", f"train.grad_clip={clip}",
        f"train.grad_clip_scope={scope}", "train.warmup_epochs=0", "train.finetune_lr_factor=1.0",
        "train.cosine_epochs=null"])
    trainer = Trainer(config, run_dir)
    before_model = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    before_loss = {n: p.detach().clone() for n, p in trainer.loss_fn.named_parameters()}
    assert before_loss  # PCME's a and b
    batch = next(iter(trainer._epoch_loader(0, 0)))
    trainer._step(batch, 0, 0)
    model_move = torch.sqrt(sum(((p.detach() - before_model[n]) ** 2).sum()
                                for n, p in trainer.model.named_parameters()))
    loss_move = torch.sqrt(sum(((p.detach() - before_loss[n]) ** 2).sum()
                               for n, p in trainer.loss_fn.named_parameters()))
    assert float(model_move) <= lr * clip * 1.01
    if scope == "model":
        assert float(loss_move) > 1e3 * lr * clip
    else:
        assert float(loss_move) + float(model_move) <= lr * clip * 1.5


def test_two_phase_factors_against_a_direct_formula():
    """Each phase its own cosine, counted in steps over the phase (or over cosine_epochs, floor after it)."""
    import math

    from pcmr.train.config import RunConfig
    from pcmr.train.schedules import learning_rate_factor

    def cosine(done, total, floor):
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, done / total)))

    for period in (None, 2):
        train = RunConfig.from_dict({"train": {
            "epochs": 7, "warmup_epochs": 3, "warmup_schedule": "cosine", "warmup_lr_factor": 0.5,
            "finetune_lr_factor": 0.1, "min_lr_factor": 0.05, "cosine_epochs": period}}).train
        for epoch in range(7):
            for step in range(5):
                phase, start, factor = (3, 0, 0.5) if epoch < 3 else (4, 3, 0.1)
                want = factor * cosine((epoch - start) * 5 + step, (period or phase) * 5, 0.05)
                assert learning_rate_factor(train, epoch, step, 5) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(("key", "value"), [("finetune_lr_factor", 0), ("warmup_lr_factor", -1.0),
                                            ("cosine_epochs", 0), ("cosine_epochs", 2.5),
                                            ("schedule_every", "batch"), ("grad_clip_scope", "loss")])
def test_bad_two_phase_settings_name_the_key(key, value):
    from pcmr.config import ConfigError
    from pcmr.train.config import RunConfig

    with pytest.raises(ConfigError, match=f"train.{key}"):
        RunConfig.from_dict({"train": {key: value}})
