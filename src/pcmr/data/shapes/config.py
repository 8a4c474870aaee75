"""Settings of the shapes benchmark and the per-split seeds (shared by the generators)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from pcmr.data.errors import DataError
from pcmr.data.shapes.scene import COLOURS, SHAPES, parse_combinations, sample_scenes

__all__ = ["ShapesConfig", "SHAPES_SPLITS", "GENERATOR_VERSION", "split_seed"]

GENERATOR_VERSION = 1
SHAPES_SPLITS = {"train": 1, "val": 2, "test": 3, "test_unseen": 4, "binary_selection": 5}


@dataclass
class ShapesConfig:
    """Configuration of the shapes benchmark (the ``**config`` of ``load_dataset("shapes", split)``)."""

    image_size: int = 64  # side of the square RGB images, pixels
    num_train: int = 3000  # images in "train"
    num_val: int = 500  # images in "val"
    num_test: int = 500  # images in "test"
    num_test_unseen: int = 500  # images in "test_unseen"
    num_binary_selection: int = 500  # (A, B, C) triplets in "binary_selection"
    captions_per_image: int = 5  # captions written for each image
    min_objects: int = 1  # objects per image, lower bound
    max_objects: int = 4  # objects per image, upper bound (at most 4)
    # (colour, shape) combinations that appear only in "test_unseen"
    unseen_combinations: tuple[str, ...] = ("yellow circle", "purple square", "cyan triangle", "red diamond",
                                            "green cross")
    seed: int = 0  # base seed; each split draws from SeedSequence([seed, split code])
    cache: bool = True  # read/write generated splits under cache_dir
    cache_dir: str | None = None  # default: $PCMR_CACHE, else $XDG_CACHE_HOME/pcmr, else ~/.cache/pcmr

    def __post_init__(self) -> None:
        kinds = {"min_objects": (int, "an integer"), "max_objects": (int, "an integer"), "seed": (int, "an integer"),
                 "cache": (bool, "true or false"), "cache_dir": ((str, type(None)), "a folder path or null"),
                 "unseen_combinations": ((list, tuple), "a list of 'colour shape' strings")}
        for name, (kind, expected) in kinds.items():
            value = getattr(self, name)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
                raise DataError(f"{name}={value!r}", location=f"shapes config '{name}'", expected=expected)
        if not all(isinstance(item, str) for item in self.unseen_combinations):
            raise DataError(f"unseen_combinations={self.unseen_combinations!r}",
                            location="shapes config 'unseen_combinations'", expected="a list of 'colour shape' strings")
        self.unseen_combinations = tuple(self.unseen_combinations)
        for name in ("image_size", "captions_per_image", "num_train", "num_val", "num_test", "num_test_unseen",
                     "num_binary_selection"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name in ("image_size", "captions_per_image") else 0):
                raise DataError(f"{name}={value!r}", location=f"shapes config '{name}'", expected="a positive integer")
        try:
            held_out = parse_combinations(self.unseen_combinations)
            sample_scenes(0, np.random.default_rng(0), min_objects=self.min_objects, max_objects=self.max_objects)
        except ValueError as err:
            raise DataError(str(err), location="shapes config", expected="valid shapes settings") from None
        if held_out.all():
            raise DataError("every combination is held out", location="shapes config 'unseen_combinations'",
                            expected=f"a strict subset of the {len(SHAPES) * len(COLOURS)} combinations")

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> ShapesConfig:
        """Build from keyword settings; an unknown key raises :class:`DataError` listing the valid ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise DataError(f"unknown shapes config key(s) {unknown}", location="config", expected=f"keys in {sorted(known)}")
        return cls(**config)

    def generation_dict(self) -> dict[str, Any]:
        """The settings that determine the generated data (the cache key)."""
        out = asdict(self)
        out.pop("cache")
        out.pop("cache_dir")
        out["unseen_combinations"] = list(self.unseen_combinations)
        out["version"] = GENERATOR_VERSION
        return out


def split_seed(seed: int, split: str) -> np.random.SeedSequence:
    """The seed sequence of one split: independent across splits."""
    return np.random.SeedSequence([seed, SHAPES_SPLITS[split]])
