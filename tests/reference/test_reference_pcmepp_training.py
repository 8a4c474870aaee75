"""The pcmepp_csd recipe's whole training step against PCME++'s release (naver-ai/pcmepp): three steps of
model + loss + AdamP from the same initial weights on the same batches, float64. The release side ran its
own ``PCMEPPModel.configure_optimizers`` and ``training_step`` on ``configs/pcmepp.yaml`` with pcmr's
encoders (fixture: tools/reference/pcmepp_release_training.py)."""

from __future__ import annotations

import torch

from _reference import load_fixture, part
from pcmr.losses import create_loss
from pcmr.models import create_model
from pcmr.train import load_config
from pcmr.train.recipes import list_recipes
from pcmr.train.schedules import build_optimizer

TENSORS, INFO = load_fixture("pcmepp_training")
TOLERANCE = INFO["tolerance"]


def _recipe(*extra: str):
    return load_config(list_recipes()["pcmepp_csd"], [*INFO["pcmr_overrides"], *extra])


def _model(config) -> torch.nn.Module:
    model = create_model(config.model.name, vocab_size=INFO["vocab"], **config.model.options).double().train()
    model.load_state_dict(part(TENSORS, "init"))
    return model


def _batch(step: int) -> dict[str, torch.Tensor]:
    return part(TENSORS, f"batch/{step}")


def _train(model, loss_fn, optimizer, grad_clip: float) -> list[torch.Tensor]:
    """pcmr's step (pcmr.train.trainer: forward, loss, backward, clip every trained parameter's
    gradient norm, step) on the fixture's batches, in float64; the loss of each step."""
    losses = []
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    for step in range(INFO["steps"]):
        outputs = model(_batch(step))
        terms = loss_fn(**outputs, positives=torch.eye(INFO["batch"], dtype=torch.bool))
        optimizer.zero_grad(set_to_none=True)
        terms["loss"].backward()
        torch.nn.utils.clip_grad_norm_([p for p in parameters if p.grad is not None], grad_clip)
        optimizer.step()
        losses.append(terms["loss"].detach())
        yield step, losses[-1]


def _release_groups(model, loss_fn, lr: float, weight_decay: float):
    from adamp import AdamP

    return AdamP([{"params": list(model.parameters())},
                  {"params": list(loss_fn.parameters()), "weight_decay": 0.0}], lr=lr, weight_decay=weight_decay)


def test_the_fixture_records_the_releases_configuration():
    """The release's settings the recipe follows: AdamP at 5e-4 with weight decay 1e-4, none on the
    criterion's two scalars, init 5 / 5, vib_beta 1e-4, smoothness 0.1, label smoothing 1e-4, clip 2."""
    config = _recipe()
    release = INFO["config"]
    assert (config.train.optimizer, config.train.lr, config.train.weight_decay) == (
        release["optim"]["name"], release["optim"]["lr"], release["optim"]["wd"])
    assert config.train.grad_clip == release["grad_clip"]
    options = config.loss.options
    assert (options["init_a"], options["init_b"], options["lambda_kl"], options["lambda_pseudo"],
            options["label_smoothing"]) == (
        release["criterion"]["init_negative_scale"], release["criterion"]["init_shift"],
        release["criterion"]["vib_beta"], release["criterion"]["smoothness_alpha"], release["label_smoothing"])
    criterion_group = INFO["groups"][INFO["criterion_groups"]["criterion.shift"]]
    assert criterion_group["weight_decay"] == 0 and criterion_group["lr"] == release["optim"]["lr"]
    # the two encoder groups hold every model parameter, at the base lr with the base weight decay
    model_groups = [g for g in INFO["groups"] if g["weight_decay"] and g["size"]]
    assert sum(g["size"] for g in model_groups) == len(part(TENSORS, "init")) - _buffers()
    assert all(g["lr"] == release["optim"]["lr"] for g in model_groups)
    assert TENSORS["lr/epoch1"][:3].tolist() == [release["optim"]["lr"]] * 3  # ConstantLR factor 1 in epoch 1


def _buffers() -> int:
    model = _model(_recipe())
    return len(model.state_dict()) - len(list(model.parameters()))


def test_three_steps_equal_the_releases_with_its_parametrisation_and_groups():
    """``scale_parametrisation: release`` (free ``a``, ``b``) and the release's parameter groups: the
    losses and every parameter after each of three steps equal the release's (float64)."""
    config = _recipe("loss.scale_parametrisation=release")
    model = _model(config)
    loss_fn = create_loss(config.loss.name, **config.loss.options).double()
    optimizer = _release_groups(model, loss_fn, config.train.lr, config.train.weight_decay)
    for step, loss in _train(model, loss_fn, optimizer, config.train.grad_clip):
        torch.testing.assert_close(loss, TENSORS[f"step/{step}/loss"], **TOLERANCE)
        want = part(TENSORS, f"step/{step}/model")
        for name, value in model.state_dict().items():
            torch.testing.assert_close(value, want[name], **TOLERANCE, msg=f"step {step}: {name}")
        torch.testing.assert_close(loss_fn.match_scale.a.reshape(1), TENSORS[f"step/{step}/criterion/negative_scale"],
                                   **TOLERANCE)
        torch.testing.assert_close(loss_fn.match_scale.b.reshape(1), TENSORS[f"step/{step}/criterion/shift"],
                                   **TOLERANCE)


def test_the_recipe_as_it_trains_differs_from_the_release_by_a_and_b_only():
    """The recipe as pcmr's trainer runs it (``build_optimizer``: one group, weight decay on every
    parameter; ``a = softplus(a_raw)``): the two differences move ``a`` and ``b`` by what they predict
    and nothing else. AdamP's step is about ``lr`` on ``a_raw``, so ``a`` moves ``sigmoid(a_raw)``
    (0.993 at ``a = 5``) times as far: ``a`` lags by at most ``(1 - 0.993) lr`` a step; the decay
    takes ``lr * wd * b`` a step from ``b``. Measured after three steps: ``a`` 9.4e-6 and ``b`` 7.6e-7
    from the release's, the loss 1.4e-6 relative, every model parameter within 6.6e-8."""
    config = _recipe()
    model = _model(config)
    loss_fn = create_loss(config.loss.name, **config.loss.options).double()
    optimizer = build_optimizer(config.train, [*model.parameters(), *loss_fn.parameters()])
    for step, loss in _train(model, loss_fn, optimizer, config.train.grad_clip):
        torch.testing.assert_close(loss, TENSORS[f"step/{step}/loss"], rtol=1e-5, atol=0.0)
    steps, lr, decay = INFO["steps"], config.train.lr, config.train.weight_decay
    # a falls in these steps: pcmr's falls less far; b rises, and pcmr's decay holds it back
    a_lag = float(loss_fn.match_scale.a.detach()) - float(TENSORS[f"step/{steps - 1}/criterion/negative_scale"])
    b_lag = float(TENSORS[f"step/{steps - 1}/criterion/shift"]) - float(loss_fn.match_scale.b.detach())
    assert 0.0 < a_lag <= steps * lr * (1.0 - float(torch.sigmoid(torch.tensor(4.99)))) * 1.05
    assert 0.0 < b_lag <= steps * lr * decay * 5.01 * 1.05
    want = part(TENSORS, f"step/{steps - 1}/model")
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, want[name], rtol=0.0, atol=1e-6, msg=name)
