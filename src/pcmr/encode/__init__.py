"""Encoding: a network run over a split, caption texts or images into :class:`pcmr.Gaussian`
embeddings, the checks on what goes in and comes out, and the fingerprint of a model's weights with
the gallery it encoded.

This package sits below both the evaluation (``pcmr.evaluation``) and the search (``pcmr.search``),
which import it and never each other; scores of those embeddings are :mod:`pcmr.scoring`.

- :mod:`pcmr.encode.inputs`: the encoders (``encode_split``, ``encode_texts``, ``encode_image_files``,
  ``encode_image_inputs``), each under ``torch.no_grad()`` in eval mode;
- :mod:`pcmr.encode.checks`: non-finite embeddings, a vocabulary that does not fit the model;
- :mod:`pcmr.encode.fingerprint`: what a risk-coverage curve belongs to (model weights and gallery).
"""

from __future__ import annotations

from pcmr.encode.inputs import (
    ImageInput,
    encode_image_files,
    encode_image_inputs,
    encode_split,
    encode_texts,
    model_device,
)

__all__ = ["ImageInput", "encode_image_files", "encode_image_inputs", "encode_split", "encode_texts", "model_device"]
