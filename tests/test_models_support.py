"""Shared helpers (no tests): random batches in the batch format of docs/datasets.md for the pcmr.models tests.

Built here rather than with pcmr.data, so the model tests depend on the batch contract only.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pcmr.models import ModelConfig

WORDS = ["a", "red", "blue", "green", "square", "circle", "triangle", "left", "right", "of", "the", "big"]


def random_captions(
    generator: torch.Generator, batch_size: int, max_length: int, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``[B, L]`` padded with 0 and lengths ``[B]`` (the longest is ``L``; one of length 1)."""
    lengths = torch.randint(1, max_length + 1, (batch_size,), generator=generator)
    lengths[0] = max_length
    lengths[-1] = 1
    tokens = torch.randint(4, vocab_size, (batch_size, max_length), generator=generator)
    positions = torch.arange(max_length).unsqueeze(0)
    tokens = torch.where(positions < lengths.unsqueeze(1), tokens, torch.zeros_like(tokens))
    return tokens, lengths


def random_texts(generator: torch.Generator, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        length = int(torch.randint(2, 8, (1,), generator=generator))
        picks = torch.randint(0, len(WORDS), (length,), generator=generator)
        texts.append(" ".join(WORDS[int(i)] for i in picks))
    return texts


def random_images(
    config: ModelConfig, generator: torch.Generator, shape_prefix: tuple[int, ...], side: int = 32
):
    kind = config.image_encoder.kind
    feature_dim = config.image_encoder.feature_dim
    if kind == "global_features":
        return torch.randn(*shape_prefix, feature_dim, generator=generator)
    if kind == "local_features":
        return torch.randn(*shape_prefix, 5, feature_dim, generator=generator)
    return torch.randn(*shape_prefix, 3, side, side, generator=generator)


def make_batch(
    config: ModelConfig,
    num_images: int = 3,
    num_captions: int = 5,
    max_length: int = 7,
    num_views: int = 0,
    seed: int = 0,
    side: int = 32,
) -> dict[str, Any]:
    """A training batch for ``config`` (images by encoder kind, token ids, texts, relevance, views)."""
    generator = torch.Generator().manual_seed(seed)
    tokens, lengths = random_captions(generator, num_captions, max_length, config.vocab_size)
    batch: dict[str, Any] = {
        "images": random_images(config, generator, (num_images,), side),
        "captions": tokens,
        "caption_lengths": lengths,
        "caption_texts": random_texts(generator, num_captions),
        "relevance": torch.rand(num_images, num_captions, generator=generator) < 0.4,
        "image_index": torch.arange(num_images),
        "caption_index": torch.arange(num_captions),
    }
    if num_views:
        batch["image_views"] = random_images(config, generator, (num_images, num_views), side)
        view_tokens, view_lengths = random_captions(
            generator, num_captions * num_views, max_length, config.vocab_size
        )
        batch["caption_views"] = view_tokens.reshape(num_captions, num_views, max_length)
        batch["caption_view_lengths"] = view_lengths.reshape(num_captions, num_views)
        batch["caption_view_texts"] = [random_texts(generator, num_views) for _ in range(num_captions)]
    return batch


@pytest.fixture(autouse=True)
def single_thread():
    """Run each model test on one intra-op thread (these tensors are tiny; on a shared 2-core
    machine two spinning threads per process only slow the whole suite down)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
