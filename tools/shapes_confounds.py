"""Print, for every shapes preset, how multiplicity correlates with caption length and object count.

    python tools/shapes_confounds.py [--split test] [--seed 0]

The table is the one in docs/datasets.md ("Multiplicity and its confounds").
"""

from __future__ import annotations

import argparse

from pcmr.data import load_dataset
from pcmr.data.shapes.config import SHAPES_PRESETS
from pcmr.metrics.correlation import multiplicity_confounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| preset | caption words | rho(length, relevant images) | rho(objects, relevant captions) "
          "| relevant images per caption (mean / max) | relevant captions per image (mean) |")
    print("|---|---|---:|---:|---|---:|")
    for preset in SHAPES_PRESETS:
        split = load_dataset("shapes", args.split, preset=preset, seed=args.seed, cache=False)
        s = multiplicity_confounds(split)
        words = f"{s['caption_words_min']:.0f}-{s['caption_words_max']:.0f}"
        rho = ["n/a (constant)" if r != r else f"{r:+.2f}" for r in (s["rho_length_caption"], s["rho_objects_image"])]
        print(f"| {preset} | {words} | {rho[0]} | {rho[1]} | {s['caption_multiplicity_mean']:.1f} / "
              f"{s['caption_multiplicity_max']:.0f} | {s['image_multiplicity_mean']:.1f} |")


if __name__ == "__main__":
    main()
