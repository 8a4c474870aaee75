"""Settings of the shapes benchmark and the per-split seeds (shared by the generators)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

import numpy as np

from pcmr.config import ConfigError, build_dataclass
from pcmr.data.errors import DataError
from pcmr.data.shapes.grammar import CAPTION_STYLES, MAX_DESCRIPTIONS
from pcmr.data.shapes.scene import COLOURS, SHAPES, parse_combinations, sample_scenes

__all__ = ["ShapesConfig", "SHAPES_SPLITS", "SHAPES_PRESETS", "GENERATOR_VERSION", "split_seed"]

GENERATOR_VERSION = 1
#: the settings each preset gives to the fields left at None (docs/datasets.md). "hard" makes every
#: caption specific (3+ attributes per description, no counting captions), every scene busy (3-4
#: objects) and every image noisy, so that retrieval does not saturate at a small training budget.
#: "multiplicity" separates how many images a caption fits from how long it is, and how many captions
#: an image fits from how many objects it holds: every scene has 3 objects, every caption describes 2
#: of them in the fixed-length "slots" wording (15 words), naming 0-5 of each object's 5 attributes.
#: "multiplicity_simple" keeps the fixed-length slots and the 0-5 named attributes but makes the images
#: learnable by a small CNN trained from scratch: 1-2 objects per scene, one description per caption
#: (7 words) and clean renders; an image with two objects fits more captions than one with one.
#: "multiplicity_distinct" is "multiplicity_simple" with at least one named slot per description (no
#: caption fits every image) and evaluation splits that hold each caption text once (``distinct_captions``).
#: "specific" is "multiplicity_distinct" with every slot named: each caption is one full description of
#: one object (size, colour, shape, column, row), as specific as a written COCO caption; a caption fits
#: only the images holding such an object (the papers study's data).
SHAPES_PRESETS: dict[str, dict[str, Any]] = {
    "standard": {"min_objects": 1, "max_objects": 4, "min_attributes": 1, "count_caption_rate": 0.1,
                 "pixel_noise": 0.0, "caption_style": "natural", "descriptions_per_caption": 0,
                 "distinct_captions": False},
    "hard": {"min_objects": 3, "max_objects": 4, "min_attributes": 3, "count_caption_rate": 0.0,
             "pixel_noise": 24.0, "caption_style": "natural", "descriptions_per_caption": 0,
             "distinct_captions": False},
    "multiplicity": {"min_objects": 3, "max_objects": 3, "min_attributes": 0, "count_caption_rate": 0.0,
                     "pixel_noise": 24.0, "caption_style": "slots", "descriptions_per_caption": 2,
                     "distinct_captions": False},
    "multiplicity_simple": {"min_objects": 1, "max_objects": 2, "min_attributes": 0, "count_caption_rate": 0.0,
                            "pixel_noise": 0.0, "caption_style": "slots", "descriptions_per_caption": 1,
                            "distinct_captions": False},
    "multiplicity_distinct": {"min_objects": 1, "max_objects": 2, "min_attributes": 1, "count_caption_rate": 0.0,
                              "pixel_noise": 0.0, "caption_style": "slots", "descriptions_per_caption": 1,
                              "distinct_captions": True},
    "specific": {"min_objects": 1, "max_objects": 2, "min_attributes": 5, "count_caption_rate": 0.0,
                 "pixel_noise": 0.0, "caption_style": "slots", "descriptions_per_caption": 1,
                 "distinct_captions": True},
}
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
    # a key of SHAPES_PRESETS (docs/datasets.md): the defaults of the settings below that are None
    preset: str = "standard"
    min_objects: int | None = None  # objects per image, lower bound (standard 1, hard 3)
    max_objects: int | None = None  # objects per image, upper bound, at most 4 (standard 4, hard 4)
    # each description names at least this many of (shape, colour, size, position) (standard 1, hard 3)
    min_attributes: int | None = None
    count_caption_rate: float | None = None  # share of counting captions, "two red shapes" (standard 0.1, hard 0)
    pixel_noise: float | None = None  # std of Gaussian pixel noise, 0-255 scale (standard 0, hard 24)
    caption_style: str | None = None  # "natural" noun phrases or fixed-length "slots" (multiplicity preset)
    # descriptions in every caption, 1-3 (0: 1-3 at random, the natural mixture; "slots" needs 1-3)
    descriptions_per_caption: int | None = None
    # evaluation splits (all but "train") keep the first written copy of each caption text and drop any
    # caption that fits every image (standard, hard, multiplicity, multiplicity_simple: False)
    distinct_captions: bool | None = None
    # (colour, shape) combinations that appear only in "test_unseen"
    unseen_combinations: tuple[str, ...] = ("yellow circle", "purple square", "cyan triangle", "red diamond",
                                            "green cross")
    seed: int = 0  # base seed; each split draws from SeedSequence([seed, split code])
    cache: bool = True  # read/write generated splits under cache_dir
    cache_dir: str | None = None  # default: $PCMR_CACHE, else $XDG_CACHE_HOME/pcmr, else ~/.cache/pcmr

    def __post_init__(self) -> None:
        """Fill the preset's settings and check value ranges (types are checked by :meth:`from_dict`,
        through ``pcmr.config.build_dataclass``)."""
        if self.preset not in SHAPES_PRESETS:
            raise DataError(f"preset={self.preset!r}", location="shapes config 'preset'",
                            expected=f"one of {sorted(SHAPES_PRESETS)}")
        for name, value in SHAPES_PRESETS[self.preset].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.distinct_captions = bool(self.distinct_captions)
        self.count_caption_rate = float(self.count_caption_rate or 0.0)
        self.pixel_noise = float(self.pixel_noise or 0.0)
        if not 0.0 <= self.count_caption_rate <= 1.0:
            raise DataError(f"count_caption_rate={self.count_caption_rate!r}",
                            location="shapes config 'count_caption_rate'", expected="a number in [0, 1]")
        if not 0.0 <= self.pixel_noise <= 255.0:
            raise DataError(f"pixel_noise={self.pixel_noise!r}", location="shapes config 'pixel_noise'",
                            expected="a number in [0, 255]")
        if self.caption_style not in CAPTION_STYLES:
            raise DataError(f"caption_style={self.caption_style!r}", location="shapes config 'caption_style'",
                            expected=" or ".join(CAPTION_STYLES))
        slots = self.caption_style == "slots"
        if isinstance(self.min_attributes, bool) or self.min_attributes not in range(0 if slots else 1, 6 if slots else 5):
            raise DataError(f"min_attributes={self.min_attributes!r}", location="shapes config 'min_attributes'",
                            expected="an integer in 0..5 (slots captions)" if slots else "an integer in 1..4")
        if (isinstance(self.descriptions_per_caption, bool)
                or self.descriptions_per_caption not in range(1 if slots else 0, MAX_DESCRIPTIONS + 1)):
            raise DataError(f"descriptions_per_caption={self.descriptions_per_caption!r}",
                            location="shapes config 'descriptions_per_caption'",
                            expected=f"an integer in {1 if slots else 0}..{MAX_DESCRIPTIONS}")
        if slots and self.count_caption_rate > 0:
            raise DataError(f"count_caption_rate={self.count_caption_rate!r}",
                            location="shapes config 'count_caption_rate'", expected="0 with slots captions")
        if slots and isinstance(self.min_objects, int) and self.min_objects < int(self.descriptions_per_caption or 0):
            raise DataError(f"min_objects={self.min_objects!r}", location="shapes config 'min_objects'",
                            expected=f"at least descriptions_per_caption ({self.descriptions_per_caption}) "
                                     "with slots captions")
        self.unseen_combinations = tuple(self.unseen_combinations)
        for name in ("image_size", "captions_per_image", "num_train", "num_val", "num_test", "num_test_unseen",
                     "num_binary_selection"):
            value = getattr(self, name)
            if value < (1 if name in ("image_size", "captions_per_image") else 0):
                raise DataError(f"{name}={value!r}", location=f"shapes config '{name}'", expected="a positive integer")
        try:
            held_out = parse_combinations(self.unseen_combinations)
            sample_scenes(0, np.random.default_rng(0), min_objects=self.objects_range[0],
                          max_objects=self.objects_range[1])
        except ValueError as err:
            raise DataError(str(err), location="shapes config", expected="valid shapes settings") from None
        if held_out.all():
            raise DataError("every combination is held out", location="shapes config 'unseen_combinations'",
                            expected=f"a strict subset of the {len(SHAPES) * len(COLOURS)} combinations")

    @property
    def objects_range(self) -> tuple[int, int]:
        """``(min_objects, max_objects)`` after the preset filled them in."""
        return int(cast(int, self.min_objects)), int(cast(int, self.max_objects))

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> ShapesConfig:
        """Build from keyword settings with ``pcmr.config.build_dataclass``: an unknown key or a value of
        the wrong type raises :class:`DataError` naming the key and what it accepts."""
        try:
            built: ShapesConfig = build_dataclass(cls, config, label="shapes config")
        except ConfigError as exc:
            raise DataError(str(exc), location="shapes config") from None
        return built

    def generation_dict(self) -> dict[str, Any]:
        """The settings that determine the generated data (the cache key)."""
        out = asdict(self)
        out.pop("cache")
        out.pop("cache_dir")
        out["unseen_combinations"] = list(self.unseen_combinations)
        out["version"] = GENERATOR_VERSION
        if not out["distinct_captions"]:  # the data (and cache key) of every split written before the option
            out.pop("distinct_captions")
        return out


def split_seed(seed: int, split: str) -> np.random.SeedSequence:
    """The seed sequence of one split: independent across splits."""
    return np.random.SeedSequence([seed, SHAPES_SPLITS[split]])
