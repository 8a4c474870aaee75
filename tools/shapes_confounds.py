"""Print, for every shapes preset, how multiplicity correlates with caption length and object count,
how far PMRP's label-based plausibility agrees with the true relevance, and what R-Precision a
ranking that ignores the query gets.

    python tools/shapes_confounds.py [--split test] [--seed 0]

The tables are the ones in docs/datasets.md ("Multiplicity and its confounds", "PMRP on shapes").
The second table scores two reference rankings with PMRP (PCME App. C.1; captions take their source
image's (shape, colour) labels): the *true-relevance oracle* (every relevant pair above every other,
ties broken at random) and a random ranking (seed 0). The third table gives the R-Precision of an
*image-blind* (query-blind) ranking: every image query gets the same caption list, the captions with
the most relevant images first (and every caption query the images with the most relevant captions
first), ties broken at random; and of a random ranking. A model's R-Precision near the query-blind
value says it ranks by how generic an item is, not by what the query shows.
"""

from __future__ import annotations

import argparse

import torch

from pcmr.data import RetrievalSplit, load_dataset
from pcmr.data.shapes.config import SHAPES_PRESETS
from pcmr.metrics.correlation import multiplicity_confounds
from pcmr.metrics.pmrp import pmrp
from pcmr.metrics.ranking import retrieval_metrics


def reference_pmrp(split: RetrievalSplit, generator: torch.Generator) -> dict[str, dict[str, dict[str, float]]]:
    """PMRP (both directions) of the true-relevance oracle and of a random ranking of ``split``."""
    relevant = split.relevance_matrix().to(torch.float32)
    noise = torch.rand(relevant.shape, generator=generator)
    rankings = {"true-relevance oracle": relevant + 1e-3 * noise, "random": noise}
    return {name: pmrp(scores, split.image_labels, split.caption_labels) for name, scores in rankings.items()}


def query_blind_r_precision(split: RetrievalSplit, generator: torch.Generator) -> dict[str, dict[str, float]]:
    """R-Precision (percent, both directions) of the query-blind ranking by multiplicity and of a random
    ranking of ``split`` (see the module docstring)."""
    relevant = split.relevance_matrix().bool()  # [N_img, N_cap]
    out: dict[str, dict[str, float]] = {}
    for name in ("query-blind (by multiplicity)", "random"):
        out[name] = {}
        for direction, rel in (("i2t", relevant), ("t2i", relevant.T)):
            noise = torch.rand(rel.shape, generator=generator)
            scores = rel.sum(0, dtype=torch.float32).expand_as(noise) + 1e-3 * noise if name != "random" else noise
            out[name][direction] = retrieval_metrics(scores, rel)["r_precision"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    splits = {preset: load_dataset("shapes", args.split, preset=preset, seed=args.seed, cache=False)
               for preset in SHAPES_PRESETS}
    print("| preset | caption words | rho(length, relevant images) | rho(objects, relevant captions) "
          "| relevant images per caption (mean / max) | relevant captions per image (mean) |")
    print("|---|---|---:|---:|---|---:|")
    for preset, split in splits.items():
        s = multiplicity_confounds(split)
        words = f"{s['caption_words_min']:.0f}-{s['caption_words_max']:.0f}"
        rho = ["n/a (constant)" if r != r else f"{r:+.2f}" for r in (s["rho_length_caption"], s["rho_objects_image"])]
        print(f"| {preset} | {words} | {rho[0]} | {rho[1]} | {s['caption_multiplicity_mean']:.1f} / "
              f"{s['caption_multiplicity_max']:.0f} | {s['image_multiplicity_mean']:.1f} |")
    print("\n| preset | ranking | i2t PMRP (0 / 1 / 2 / mean) | t2i PMRP (0 / 1 / 2 / mean) |")
    print("|---|---|---|---|")
    generator = torch.Generator().manual_seed(0)
    for preset, split in splits.items():
        for name, values in reference_pmrp(split, generator).items():
            cells = [" / ".join(f"{values[d][k]:.1f}" for k in ("pmrp@0", "pmrp@1", "pmrp@2", "pmrp"))
                     for d in ("i2t", "t2i")]
            print(f"| {preset} | {name} | {cells[0]} | {cells[1]} |")
    print("\n| preset | ranking | i2t R-Precision | t2i R-Precision |")
    print("|---|---|---:|---:|")
    generator = torch.Generator().manual_seed(0)
    for preset, split in splits.items():
        for name, values in query_blind_r_precision(split, generator).items():
            print(f"| {preset} | {name} | {values['i2t']:.1f} | {values['t2i']:.1f} |")

if __name__ == "__main__":
    main()
