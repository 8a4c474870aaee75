"""The small CNN computes in channels-last memory: same values and gradients as the plain layout."""

from __future__ import annotations

import pytest
import torch

from pcmr.models.image_encoders import SmallCNNBackbone


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_channels_last_cnn_equals_plain_layout(dtype):
    torch.manual_seed(0)
    backbone = SmallCNNBackbone([8, 16, 12]).to(dtype).train()
    images = torch.randn(5, 3, 19, 23, dtype=dtype)
    weights = torch.randn(5, 3 * 3, 12, dtype=dtype)  # 19 x 23 -> 3 x 3 grid
    tolerance = {} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-4}

    got = backbone({"images": images})
    assert got.local.shape == (5, 9, 12) and got.pooled.shape == (5, 12)
    got_grads = torch.autograd.grad((got.local * weights).sum(), list(backbone.parameters()))

    grid = backbone.layers(images.contiguous())  # the NCHW computation
    assert images.is_contiguous() and not grid.is_contiguous(memory_format=torch.channels_last)
    local = grid.flatten(2).transpose(1, 2)
    torch.testing.assert_close(got.local, local, **tolerance)
    torch.testing.assert_close(got.pooled, local.mean(dim=1), **tolerance)
    want_grads = torch.autograd.grad((local * weights).sum(), list(backbone.parameters()))
    for index, (got_grad, want_grad) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(got_grad, want_grad, **tolerance, msg=f"parameter {index}")


def test_finished_batch_reaches_the_cnn_without_a_copy():
    """A finished uint8 batch is already in the layout the CNN reads: the conversion returns it as is."""
    from pcmr.data.batch_augment import finish_images

    images = finish_images(torch.randint(0, 256, (4, 9, 11, 3), dtype=torch.uint8))
    assert images.shape == (4, 3, 9, 11)
    assert images.contiguous(memory_format=torch.channels_last).data_ptr() == images.data_ptr()
    backbone = SmallCNNBackbone([4, 6])
    torch.testing.assert_close(backbone({"images": images}).local, backbone({"images": images.contiguous()}).local)
