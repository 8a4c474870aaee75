"""torch's optimizers as the trainer builds them: the same steps and state, no ``torch._dynamo`` import."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from pcmr.train import optimizers


@pytest.mark.parametrize("dynamo_loaded", [False, True])
@pytest.mark.parametrize(("ours", "theirs", "options"), [
    (optimizers.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}),
    (optimizers.Adam, torch.optim.Adam, {"lr": 0.01, "amsgrad": True}),
    (optimizers.AdamW, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
])
def test_optimizers_step_as_torchs_own(monkeypatch, ours, theirs, options, dynamo_loaded):
    """Equal parameters and state after 20 steps (a closure on some), and a state dict either loads;
    through the unguarded methods and, with ``torch._dynamo`` loaded, the guarded ones."""
    monkeypatch.setattr(optimizers, "_dynamo_loaded", lambda: dynamo_loaded)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))
    twin = copy.deepcopy(net)
    mine, reference = ours(net.parameters(), **options), theirs(twin.parameters(), **options)
    assert isinstance(mine, theirs) and type(mine).__name__ == theirs.__name__
    gen = torch.Generator().manual_seed(1)
    for step in range(20):
        inputs = torch.randn(6, 5, generator=gen)
        for model, optimizer in ((net, mine), (twin, reference)):
            def closure(model=model, optimizer=optimizer, inputs=inputs):
                optimizer.zero_grad()
                loss = model(inputs).pow(2).mean()
                loss.backward()
                return loss
            if step % 3 == 0:
                optimizer.step(closure)
            else:
                closure()
                optimizer.step()
    for got, want in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(got, want)
    assert str(mine.state_dict()) == str(reference.state_dict())
    reference.load_state_dict(mine.state_dict())
    mine.load_state_dict(reference.state_dict())


def test_built_optimizers_do_not_import_dynamo():
    """Building, stepping, zeroing and saving every optimizer train.optimizer names leaves
    ``torch._dynamo`` unloaded (a fresh interpreter)."""
    script = textwrap.dedent("""
        import sys
        import torch
        from pcmr.train.config import RunConfig
        from pcmr.train.schedules import build_optimizer
        for name in ("adamw", "adamp", "adam", "sgd"):
            net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(64, 2))
            optimizer = build_optimizer(RunConfig.from_dict({"train": {"optimizer": name}}).train, net.parameters())
            net(torch.randn(2, 3, 6, 6)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            optimizer.load_state_dict(optimizer.state_dict())
        print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
