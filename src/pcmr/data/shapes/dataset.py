"""The built-in "shapes" benchmark: generation, splits and the on-disk cache.

Splits (each from its own seed, ``SeedSequence([seed, split code])``):
``train``, ``val``, ``test`` (objects never take the held-out shape x colour
combinations), ``test_unseen`` (every image holds at least one held-out
combination, as CUB's unseen classes) and ``binary_selection`` (crops A, B and
their union C with captions A and "A and B"; see :mod:`pcmr.data.shapes.controlled`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from pcmr.atomic import atomic_write_json, atomic_write_npz
from pcmr.data.cache import (
    CACHE_FORMAT_VERSION,
    cache_root,
    config_key,
    load_npz,
)
from pcmr.data.errors import DataError
from pcmr.data.images import ArrayImages
from pcmr.data.shapes.config import SHAPES_SPLITS, ShapesConfig, split_seed
from pcmr.data.shapes.controlled import generate_binary_selection
from pcmr.data.shapes.grammar import caption_text, sample_captions
from pcmr.data.shapes.matching import shapes_relevance
from pcmr.data.shapes.render import add_pixel_noise, render_scenes
from pcmr.data.shapes.scene import (
    Scenes,
    combination_labels,
    combination_names,
    parse_combinations,
    sample_scenes,
)
from pcmr.data.split import RetrievalSplit
from pcmr.relevance import Relevance
from pcmr.suggest import unknown_name

__all__ = ["ShapesConfig", "SHAPES_SPLITS", "distinct_caption_rows", "load_shapes", "generate_shapes_split", "split_seed"]


def _split_size(config: ShapesConfig, split: str) -> int:
    return int(getattr(config, f"num_{split}"))


def generate_shapes_split(config: ShapesConfig, split: str) -> dict[str, Any]:
    """Generate one split's arrays (``pixels``, scene arrays, caption arrays, relevance keys) and texts."""
    if split == "binary_selection":
        return generate_binary_selection(config)
    scene_seed, caption_seed = split_seed(config.seed, split).spawn(2)
    held_out = parse_combinations(config.unseen_combinations)
    rng = np.random.default_rng(scene_seed)
    min_objects, max_objects = config.objects_range
    if split == "test_unseen":
        scenes = sample_scenes(_split_size(config, split), rng, min_objects=min_objects,
                               max_objects=max_objects, allowed=~held_out, required=held_out)
    else:
        scenes = sample_scenes(_split_size(config, split), rng, min_objects=min_objects,
                               max_objects=max_objects, allowed=~held_out)
    preds, count = sample_captions(scenes.objects, config.captions_per_image, np.random.default_rng(caption_seed),
                                   min_attributes=int(cast(int, config.min_attributes)),
                                   count_caption_rate=float(cast(float, config.count_caption_rate)),
                                   style=str(config.caption_style),
                                   descriptions=config.descriptions_per_caption or None)
    caption_image = np.repeat(np.arange(len(scenes), dtype=np.int64), config.captions_per_image)
    relevance = shapes_relevance(scenes.objects, preds, count)
    texts = [caption_text(p, int(c), str(config.caption_style)) for p, c in zip(preds, count)]
    if config.distinct_captions and split != "train":
        bits = relevance.bits
        if bits is None:  # shapes_relevance stores packed bits
            raise RuntimeError("shapes relevance without packed bits")
        keep = distinct_caption_rows(texts, bits, len(scenes))
        preds, count, caption_image = preds[keep], count[keep], caption_image[keep]
        relevance = Relevance.from_bits(len(scenes), len(keep), bits[keep])
        texts = [texts[i] for i in keep]
    pixels = render_scenes(scenes, config.image_size)
    pixel_noise = float(cast(float, config.pixel_noise))
    if pixel_noise > 0:  # from its own stream: the scenes and captions are those of the noiseless data
        noise_rng = np.random.default_rng(split_seed(config.seed, split).spawn(3)[2])
        pixels = add_pixel_noise(pixels, pixel_noise, noise_rng)
    return {
        "pixels": pixels,
        "objects": scenes.objects, "jitter": scenes.jitter, "background": scenes.background,
        "caption_preds": preds, "caption_count": count,
        "caption_image": caption_image,
        "relevance_bits": relevance.bits,
        "caption_texts": texts,
    }


def distinct_caption_rows(texts: list[str], bits: np.ndarray, num_images: int) -> np.ndarray:
    """int64 ``[K]``: the captions an evaluation split keeps under ``distinct_captions``, in written order:
    the first written copy of each text, without any caption relevant to every one of the ``num_images``
    images (``bits``: the packed relevance ``[N_cap, ceil(N_img / 8)]``). A query that fits the whole
    gallery scores R-Precision 100 under any ranking, and a text written many times counts many times."""
    seen: set[str] = set()
    fits = np.unpackbits(bits, axis=1, count=num_images).sum(axis=1) if num_images else np.zeros(len(texts))
    keep = []
    for index, text in enumerate(texts):
        if text not in seen and not (num_images and fits[index] == num_images):
            keep.append(index)
        seen.add(text)
    return np.asarray(keep, dtype=np.int64)


def _cache_paths(config: ShapesConfig, split: str) -> tuple[Path, Path]:
    root = Path(config.cache_dir).expanduser() if config.cache_dir else cache_root()
    folder = root / "shapes" / config_key(config.generation_dict())
    return folder / f"{split}.npz", folder / f"{split}.json"


_SPLIT_ARRAYS = ("pixels", "objects", "jitter", "background", "caption_preds", "caption_count", "caption_image",
                 "relevance_bits")


def _check_cached(data: dict[str, Any], config: ShapesConfig, split: str) -> None:
    """Raise ``ValueError`` when a cached split does not have the layout this code writes."""
    missing = [name for name in _SPLIT_ARRAYS if name not in data]
    if split == "binary_selection":
        missing += [f"role_{r}" for r in ("crop_a", "crop_b", "union", "caption_a", "caption_ab")
                    if f"role_{r}" not in data]
    if missing:
        raise ValueError(f"missing arrays {missing}")
    count = _split_size(config, split) * (3 if split == "binary_selection" else 1)
    size = config.image_size
    num_captions = len(data["caption_texts"])
    expected = {
        "pixels": (count, size, size, 3),
        "relevance_bits": (num_captions, (count + 7) // 8),
        "caption_image": (num_captions,),
        "caption_count": (num_captions,),
    }
    for name, shape in expected.items():
        if tuple(data[name].shape) != shape:
            raise ValueError(f"array {name!r} has shape {tuple(data[name].shape)}, expected {shape}")
    for name in ("objects", "jitter", "background"):
        if len(data[name]) != count:
            raise ValueError(f"array {name!r} has {len(data[name])} rows, expected {count} (one per image)")
    if len(data["caption_preds"]) != num_captions:
        raise ValueError(f"array 'caption_preds' has {len(data['caption_preds'])} rows, expected {num_captions}")


def _read_cache(npz_path: Path, json_path: Path, config: ShapesConfig, split: str) -> dict[str, Any] | None:
    """The cached split, or None (with a warning for an entry that is unreadable, of another cache
    format version or of an inconsistent layout: it is then regenerated and overwritten)."""
    if not (npz_path.is_file() and json_path.is_file()):
        return None
    try:
        with open(json_path, encoding="utf-8") as handle:
            meta = json.load(handle)
        found = meta.get("cache_format", 1) if isinstance(meta, dict) else None
        if found != CACHE_FORMAT_VERSION:
            warnings.warn(f"{npz_path}: cache entry of format version {found} (this pcmr writes version "
                          f"{CACHE_FORMAT_VERSION}); regenerating it", UserWarning, stacklevel=3)
            return None
        arrays: dict[str, Any] = dict(load_npz(npz_path))
        arrays["caption_texts"] = list(meta["caption_texts"])
        _check_cached(arrays, config, split)
        return arrays
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as err:
        warnings.warn(f"{npz_path}: unreadable cache entry ({err}); regenerating it", UserWarning, stacklevel=3)
        return None


def load_shapes(split: str, **config: Any) -> RetrievalSplit:
    """One split of the shapes benchmark (generated once, then read from the cache).

    Args:
        split: one of ``SHAPES_SPLITS`` (train, val, test, test_unseen, binary_selection).
        **config: fields of :class:`ShapesConfig`.
    """
    if split not in SHAPES_SPLITS:
        raise DataError(unknown_name("split", str(split), SHAPES_SPLITS))
    cfg = ShapesConfig.from_dict(config)
    data = None
    if cfg.cache:
        npz_path, json_path = _cache_paths(cfg, split)
        data = _read_cache(npz_path, json_path, cfg, split)
    if data is None:
        data = generate_shapes_split(cfg, split)
        if cfg.cache:
            atomic_write_npz(npz_path, **{k: v for k, v in data.items() if k != "caption_texts"})
            atomic_write_json(json_path, {"cache_format": CACHE_FORMAT_VERSION, "config": cfg.generation_dict(),
                                          "split": split,
                                          "caption_texts": data["caption_texts"]}, indent=1, newline=False)
    num_images, num_captions = data["pixels"].shape[0], len(data["caption_texts"])
    scenes = Scenes(objects=data["objects"], jitter=data["jitter"], background=data["background"])
    return RetrievalSplit(
        name="shapes",
        split=split,
        images=ArrayImages(data["pixels"]),
        caption_texts=data["caption_texts"],
        caption_image=data["caption_image"],
        relevance=Relevance.from_bits(num_images, num_captions, data["relevance_bits"]),
        image_labels=torch.from_numpy(combination_labels(data["objects"])),
        label_names=combination_names(),
        info={"config": cfg.generation_dict(), "scenes": scenes, "caption_preds": data["caption_preds"],
              "caption_count": data["caption_count"],
              **({"roles": {k[5:]: data[k] for k in data if k.startswith("role_")}} if split == "binary_selection"
                 else {})},
    )
