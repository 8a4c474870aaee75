"""Batch normalisation over the global batch: 2 processes give BatchNorm's output, gradients and
running statistics of the whole batch, also when one process holds no item at all."""

from __future__ import annotations

import os

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file
from torch import nn

from pcmr.train.distributed import gather_rows, shutdown_distributed
from pcmr.train.global_batchnorm import GlobalBatchNorm, convert_global_batchnorm
from test_train_distributed import _free_port, _join

CHANNELS = 3
SPLITS = {"uneven": (5, 2), "empty": (7, 0)}  # items per process (7 in all)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(7, CHANNELS, 2, 2, generator=generator, dtype=torch.float64) * 3 + 1
    weights = torch.randn(7, CHANNELS, 2, 2, generator=generator, dtype=torch.float64)  # loss = sum(w * y^2)
    return x, weights


def _layer(kind: type[nn.Module]) -> nn.Module:
    layer = kind(CHANNELS, momentum=0.3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([1.5, -0.5, 2.0]))
        layer.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
    return layer


def _reference() -> dict[str, torch.Tensor]:
    """``nn.BatchNorm2d`` on the whole batch, in float64."""
    x, weights = _inputs()
    x.requires_grad_(True)
    layer = _layer(nn.BatchNorm2d).train()
    y = layer(x)
    (weights * y * y).sum().backward()
    return {"y": y.detach(), "x_grad": x.grad, "weight_grad": layer.weight.grad, "bias_grad": layer.bias.grad,
            "running_mean": layer.running_mean, "running_var": layer.running_var}


def _worker(rank: int, world_size: int, port: int, out_dir: str) -> None:
    context = _join(rank, world_size, port)
    x_all, weights_all = _inputs()
    results = {}
    for name, sizes in SPLITS.items():
        start = sum(sizes[:rank])
        x = x_all[start : start + sizes[rank]].clone().requires_grad_(True)
        layer = convert_global_batchnorm(nn.Sequential(_layer(nn.BatchNorm2d)))[0].train()
        assert isinstance(layer, GlobalBatchNorm)
        y = gather_rows(layer(x), context)  # every process computes the global loss
        (weights_all * y * y).sum().backward()
        # process r holds W x the gradient of its own rows; the parameters' gradients are averaged by DDP
        results.update({f"{name}/y": y.detach(), f"{name}/x_grad": x.grad / world_size,
                        f"{name}/running_mean": layer.running_mean, f"{name}/running_var": layer.running_var})
        for key in ("weight", "bias"):
            grad = getattr(layer, key).grad.clone()
            torch.distributed.all_reduce(grad)
            results[f"{name}/{key}_grad"] = grad / world_size
    save_file(results, os.path.join(out_dir, f"rank{rank}.safetensors"))
    shutdown_distributed()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("bn")
    mp.spawn(_worker, args=(2, _free_port(), str(out_dir)), nprocs=2, join=True)
    return [load_file(str(out_dir / f"rank{rank}.safetensors")) for rank in range(2)]


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_two_processes_normalise_as_one_batch(name, two_processes):
    expected = _reference()
    sizes = SPLITS[name]
    for rank, results in enumerate(two_processes):
        for key in ("y", "weight_grad", "bias_grad", "running_mean", "running_var"):
            torch.testing.assert_close(results[f"{name}/{key}"], expected[key], rtol=1e-10, atol=1e-12, msg=key)
        start = sum(sizes[:rank])
        own = expected["x_grad"][start : start + sizes[rank]]
        torch.testing.assert_close(results[f"{name}/x_grad"], own, rtol=1e-10, atol=1e-12)


def test_one_process_and_evaluation_are_plain_batchnorm():
    x, _ = _inputs()
    plain, converted = _layer(nn.BatchNorm2d), convert_global_batchnorm(nn.Sequential(_layer(nn.BatchNorm2d)))[0]
    torch.testing.assert_close(converted(x), plain(x))
    torch.testing.assert_close(converted.running_var, plain.running_var)
    plain.eval(), converted.eval()
    torch.testing.assert_close(converted(x), plain(x))
    assert set(converted.state_dict()) == set(plain.state_dict())
