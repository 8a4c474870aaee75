"""The multi-tensor AdamP against the authors' ``adamp`` package, step by step."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from pcmr.train.adamp import AdamP

adamp = pytest.importorskip("adamp", reason="the reference package 'adamp' is a test dependency")


class _Net(nn.Module):
    """Every case of AdamP's projection: a convolution before batch norm (scale-invariant per output
    channel: the channel view), a linear map whose output is l2-normalised (invariant only to
    scaling the whole matrix: the layer view), a plain linear map (no projection), biases (1-d) and
    a parameter that gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, bias=False)
        self.norm = nn.BatchNorm2d(6)
        self.embed = nn.Linear(6, 5)
        self.out = nn.Linear(5, 4)
        self.unused = nn.Parameter(torch.randn(3, 2))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.norm(self.conv(images)).relu().mean(dim=(2, 3))  # [B, 6]
        return self.out(nn.functional.normalize(self.embed(features), dim=1))


def _projected(package_optimizer: adamp.AdamP) -> list[str]:
    """Which views the package's projection chose at its last step, per parameter (it does not say,
    so its own test is re-run on the state)."""
    chosen = []
    for group in package_optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None or p.dim() < 2:
                continue
            for name, view in (("channel", package_optimizer._channel_view), ("layer", package_optimizer._layer_view)):
                cosine = package_optimizer._cosine_similarity(p.grad, p.data, group["eps"], view)
                if cosine.max() < group["delta"] / view(p.data).size(1) ** 0.5:
                    chosen.append(name)
                    break
    return chosen


@pytest.mark.parametrize(("dtype", "weight_decay", "nesterov", "channels_last"),
                         [(torch.float64, 1e-2, False, False), (torch.float64, 0.0, True, True),
                          (torch.float32, 1e-4, False, True)])
def test_foreach_adamp_equals_the_package_over_300_steps(dtype, weight_decay, nesterov, channels_last):
    torch.manual_seed(0)
    ours_net = _Net().to(dtype)
    if channels_last:
        ours_net = ours_net.to(memory_format=torch.channels_last)
    # the package's views need contiguous weights: it steps a contiguous copy (equal values)
    theirs_net = copy.deepcopy(ours_net).to(memory_format=torch.contiguous_format)
    settings = {"lr": 1e-2, "weight_decay": weight_decay, "nesterov": nesterov}
    ours = AdamP(ours_net.parameters(), **settings)
    theirs = adamp.AdamP(theirs_net.parameters(), **settings)
    gen = torch.Generator().manual_seed(1)
    views: set[str] = set()
    for _ in range(300):
        images = torch.randn(8, 3, 7, 7, generator=gen, dtype=dtype)
        targets = torch.randn(8, 4, generator=gen, dtype=dtype)
        for net, optimizer in ((ours_net, ours), (theirs_net, theirs)):
            optimizer.zero_grad()
            nn.functional.mse_loss(net(images), targets).backward()
            optimizer.step()
        views.update(_projected(theirs))
    assert views == {"channel", "layer"}  # both projections were exercised
    tolerance = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    for (name, mine), theirs_param in zip(ours_net.named_parameters(), theirs_net.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs_param, **tolerance, msg=name)
    their_state = theirs.state_dict()["state"]
    for key, state in ours.state_dict()["state"].items():
        assert state["step"] == their_state[key]["step"] == 300
        for moment in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(state[moment], their_state[key][moment], **tolerance)
    assert ours_net.unused.grad is None and "unused" not in ours.state


def test_foreach_adamp_loads_the_package_state_and_rejects_bad_arguments():
    """Its state is the package's (a checkpoint of either resumes with the other), and bad
    arguments raise naming the argument."""
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    theirs = adamp.AdamP(net.parameters(), lr=0.1)
    net(torch.randn(2, 4)).sum().backward()
    theirs.step()
    ours = AdamP(net.parameters(), lr=0.1)
    ours.load_state_dict(theirs.state_dict())
    ours.step()
    assert all(ours.state[p]["step"] == 2 for p in net.parameters())
    with pytest.raises(ValueError, match="lr"):
        AdamP(net.parameters(), lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        AdamP(net.parameters(), betas=(0.9, 1.0))
