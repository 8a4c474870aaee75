"""``pcmr convert pcme-release CKPT.pth RUN/``: a checkpoint of PCME's official release as a pcmr model.

Writes, into ``RUN/`` (created; an existing ``RUN/model`` is replaced atomically):

- ``model/``: the pcmr model folder, written by ``pcmr.Model.save_pretrained`` (the one on-disk form of a
  model: ``config.json``, ``model.safetensors``, its vocabulary, score parameters and preprocessing);
- ``vocab.json``: the release's vocabulary in pcmr's id order;
- ``similarity_options.json``: ``{"match_prob": {"a": ..., "b": ...}}`` from the release's loss;
- ``image_backbone.safetensors`` (when the checkpoint has any): the release's ResNet weights
  (``cnn.*``), which pcmr does not run: the converted image tower reads the ResNet's ``7 x 7``
  feature grid (``docs/models.md``);
- ``release_config.json``: the release's own configuration, for the record.

``pcmr evaluate RUN/model --data ...`` then evaluates it on precomputed grid features.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pcmr.atomic import atomic_write_json, atomic_write_safetensors
from pcmr.data import Vocabulary
from pcmr.hub import Model
from pcmr.models.convert_pcme_release import convert_pcme_release
from pcmr.train.run import MODEL_DIR, SIMILARITY_OPTIONS_FILE, VOCAB_FILE

__all__ = ["run"]

def run(args: argparse.Namespace) -> int:
    converted = convert_pcme_release(args.checkpoint)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocabulary = Vocabulary(converted.words)
    Model(converted.model, vocabulary, similarity_options=converted.similarity_options).save_pretrained(out / MODEL_DIR)
    vocabulary.save(out / VOCAB_FILE)
    atomic_write_json(out / SIMILARITY_OPTIONS_FILE, converted.similarity_options)
    if converted.backbone:
        atomic_write_safetensors(
            out / "image_backbone.safetensors", {k: v.contiguous() for k, v in converted.backbone.items()}
        )
    atomic_write_json(out / "release_config.json", converted.release_config)
    print(f"converted {args.checkpoint} -> {out} ({MODEL_DIR}/, {VOCAB_FILE}, {SIMILARITY_OPTIONS_FILE})")
    return 0
