"""Speed of the built-in shapes benchmark: generating 10,000 images (+ captions + exact relevance),
reading them back from the cache, and producing training batches.

Run: ``flock /tmp/pcmr-bench.lock .venv/bin/python benchmarks/data.py [--images 10000]``
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from pcmr.data import Vocabulary, load_dataset, train_loader
from pcmr.data.shapes.dataset import ShapesConfig, split_seed
from pcmr.data.shapes.grammar import caption_text, sample_captions
from pcmr.data.shapes.matching import shapes_relevance
from pcmr.data.shapes.render import render_scenes
from pcmr.data.shapes.scene import parse_combinations, sample_scenes


def best_of(repeats: int, fn):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--captions-per-image", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = ShapesConfig(num_train=args.images, captions_per_image=args.captions_per_image,
                          image_size=args.image_size, cache=False)
    scene_seed, caption_seed = split_seed(config.seed, "train").spawn(2)
    held_out = parse_combinations(config.unseen_combinations)
    rows = []
    t_scene, scenes = best_of(args.repeats, lambda: sample_scenes(args.images, np.random.default_rng(scene_seed),
                                                                  allowed=~held_out))
    t_render, _ = best_of(args.repeats, lambda: render_scenes(scenes, args.image_size))
    t_caps, (preds, count) = best_of(args.repeats, lambda: sample_captions(
        scenes.objects, args.captions_per_image, np.random.default_rng(caption_seed)))
    t_text, _ = best_of(args.repeats, lambda: [caption_text(p, int(c)) for p, c in zip(preds, count)])
    t_rel, relevance = best_of(args.repeats, lambda: shapes_relevance(scenes.objects, preds, count))
    rows += [("sample scenes", t_scene), (f"render {args.image_size}x{args.image_size} images", t_render),
             ("sample captions", t_caps), ("caption texts", t_text), ("exact relevance (all pairs)", t_rel)]
    total = t_scene + t_render + t_caps + t_text + t_rel
    rows.append(("total generation", total))
    with tempfile.TemporaryDirectory() as cache_dir:
        options = dict(num_train=args.images, captions_per_image=args.captions_per_image,
                       image_size=args.image_size, cache_dir=cache_dir)
        t_first, split = best_of(1, lambda: load_dataset("shapes", "train", **options))
        t_cached, split = best_of(args.repeats, lambda: load_dataset("shapes", "train", **options))
        rows += [("load_dataset, first call (generate + write cache)", t_first), ("load_dataset, cached", t_cached)]
        vocab = Vocabulary.from_split(split)
        loader = train_loader(split, vocab, batch_size=128, num_views=0)
        batches = iter(loader)
        t_batches, _ = best_of(1, lambda: [next(batches) for _ in range(20)])
        rows.append(("20 training batches of 128 (augmented)", t_batches))
    print(f"shapes: {args.images} images x {args.captions_per_image} captions, "
          f"{relevance.num_pairs} relevant pairs ({relevance.num_pairs / (args.images ** 2 * args.captions_per_image):.1%})")
    print("| step | seconds |")
    print("|---|---|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
