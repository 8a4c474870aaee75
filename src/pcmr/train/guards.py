"""Checks and notes a training run gives before and while it trains: a split too small for one batch is
refused with the fix, the size image files are made is said, and without a progress bar (output to a
log) a progress line is written at a fixed interval (:data:`PROGRESS_LINE_SECONDS`)."""

from __future__ import annotations

import sys
import time
from typing import Any

from pcmr.config import ConfigError
from pcmr.progress import write_line

__all__ = ["PROGRESS_LINE_SECONDS", "SMALL_VALIDATION", "ProgressLines", "check_steps_per_epoch", "note_image_size",
           "small_validation_note"]

#: validation splits with fewer images than this get a note on what their rsum can tell
SMALL_VALIDATION = 100

#: seconds between two progress lines inside an epoch when no bar is drawn (output to a log file)
PROGRESS_LINE_SECONDS = 60.0


def note_image_size(split: Any, options: dict[str, Any]) -> None:
    """Say on stderr the size image files are made when ``data.options`` names none (the reader's
    default, 224 x 224 pixels), so a user's own images are not shrunk or enlarged silently."""
    images = getattr(split, "images", None)
    size = getattr(images, "image_size", None)
    if getattr(images, "paths", None) is None or size is None or "image_size" in options:
        return
    print(f"note: image files are made {size} x {size} pixels ({getattr(images, 'image_resize', 'square')} resize), "
          f"the default; set another size with --set data.options.image_size=N", file=sys.stderr)


def small_validation_note(split: Any) -> str | None:
    """A sentence on how little the validation numbers of a split of few images mean (None for a split of
    at least :data:`SMALL_VALIDATION` images, or none)."""
    if split is None or split.num_images >= SMALL_VALIDATION:
        return None
    images = split.num_images
    return (f"validation has {images} image{'s' if images != 1 else ''} and {split.num_captions} captions: rsum "
            f"sums six recalls (R@1, 5, 10 both ways, up to 600) and with {images} images R@10 or R@5 can be 100 "
            f"by ranking alone ({min(images, 10)} of {images} images listed), so a high rsum here says little; "
            f"R-Precision is the more telling number, and a larger validation split the real fix")


def check_steps_per_epoch(sampler: Any, batch_size: int) -> None:
    """Refuse, before any training, a split too small for one batch (every epoch would run 0 steps and
    validation would pick an untrained model), naming the fix; warn when the dropped last partial
    batch holds a quarter of the pairs or more. ``sampler``: the loader's ``PairBatchSampler``."""
    steps = len(sampler)
    mode = getattr(sampler, "mode", "captions")
    count = sampler.num_captions if mode != "one_per_image" else len(sampler.source_captions)
    unit = "images" if mode == "one_per_image" else "captions"
    keep = ("" if mode == "one_per_class" or getattr(sampler, "num_replicas", 1) > 1 else
            " or keep the last partial batch (--set data.loader_options.drop_last=false)")
    if steps == 0:
        raise ConfigError(
            f"training would run 0 steps per epoch: the training split has {count} {unit} (one pair each per "
            f"epoch), fewer than data.batch_size={batch_size}, and the last partial batch is dropped; lower the "
            f"batch size (--set data.batch_size={max(1, min(count, batch_size // 2))} or less){keep}")
    dropped = count - steps * batch_size if mode != "one_per_class" else 0
    if getattr(sampler, "drop_last", True) and dropped * 4 >= count > 0:
        print(f"warning: each epoch drops {dropped} of the {count} training {unit} (the last partial batch of "
              f"data.batch_size={batch_size}); lower the batch size{keep}", file=sys.stderr)


class ProgressLines:
    """Progress of one epoch as plain lines, one every :data:`PROGRESS_LINE_SECONDS` (read when the
    epoch starts): step, share done, the first loss terms of the last step, throughput and time. For
    a run whose output goes to a log (no bar drawn and no ``--no-progress``); ``enabled=False``: silent."""

    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled, self.label, self.total = enabled, label, total
        self.interval = PROGRESS_LINE_SECONDS
        self.start = self.last = time.perf_counter()

    def step(self, now: float, step: int, terms: dict[str, float], pairs_per_s: float) -> None:
        """After step ``step`` (1-based within the epoch) ended at ``now`` (``time.perf_counter()``)."""
        if not self.enabled or now - self.last < self.interval:
            return
        self.last = now
        shown = ", ".join(f"{k} {v:.4g}" for k, v in list(terms.items())[:4])
        write_line(f"{self.label}: step {step}/{self.total} ({100 * step / max(self.total, 1):.0f} %), {shown}, "
                   f"{pairs_per_s:.0f} pairs/s, {now - self.start:.0f} s into the epoch")
