"""PCME++ pseudo-positives: targets by brute force over rows, with one and several positives per row."""

from __future__ import annotations

import torch

from pcmr.losses.csd import pseudo_positive_targets


def brute_force(logits: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    targets = positives.to(logits.dtype).clone()
    for row in range(logits.shape[0]):
        matches = [logits[row, col].item() for col in range(logits.shape[1]) if positives[row, col]]
        if not matches:
            continue
        for col in range(logits.shape[1]):
            if logits[row, col].item() >= min(matches):
                targets[row, col] = 1.0
    return targets


def test_pseudo_positive_targets_match_brute_force():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    positives = torch.zeros(5, 7, dtype=torch.bool)
    positives[0, 2] = positives[1, 0] = positives[1, 4] = positives[3, 6] = True  # row 2 and 4 without positives
    got = pseudo_positive_targets(logits, positives)
    torch.testing.assert_close(got, brute_force(logits, positives), rtol=0, atol=0)
    assert got[2].sum() == 0 and got[4].sum() == 0
    assert got.sum() > positives.sum()  # some candidates became pseudo-positives
    logits.requires_grad_()
    assert not pseudo_positive_targets(logits, positives).requires_grad


def test_smoothed_pseudo_positive_targets():
    """With label smoothing a pseudo-positive gets its row's smoothed positive target 1 - eps (the
    release sets it to the row's maximum of ``matched``) and every other candidate eps."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    positives = torch.zeros(4, 6, dtype=torch.bool)
    positives[0, 1] = positives[1, 3] = positives[1, 5] = positives[2, 0] = True
    eps = 0.01
    want = brute_force(logits, positives) * (1 - eps) + (1 - brute_force(logits, positives)) * eps
    torch.testing.assert_close(pseudo_positive_targets(logits, positives, eps), want, rtol=0, atol=1e-15)
