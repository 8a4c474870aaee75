"""CPU cost of the training loader per (image, caption) pair: the per-item path against batch-wise loading.

Data: the uncertainty study's preset (shapes ``multiplicity_simple``, 64 px images, 3,000 training images x 5
captions, source relevance) with the PCME recipes' augmentation (random erasing with probability 0.2 of
2-33 % of the image, aspect 0.3; word dropout 0.1, ``unk_then_delete``), batches of 128, ``num_workers=0``.
Each repeat reads one whole epoch and records the process's CPU time (``time.process_time``) per pair:

- ``per-item (before)``: the path pcmr used before batch-wise loading, reimplemented here: a numpy
  ``Generator`` per item, normalisation, ``random_erase`` and ``drop_words`` per item, then stacking;
- ``batch-wise, uint8 out``: :func:`pcmr.data.train_loader` with ``finish=False``, what the loader costs
  when the images are normalised and erased on the training device (a GPU);
- ``batch-wise, finished on the CPU``: the same batches normalised and erased on the CPU (the default, and
  what training on the CPU does in its step).

Printed: the median over ``--repeats`` of each, and the ratio before / after.

Run: ``OMP_NUM_THREADS=1 nice .venv/bin/python benchmarks/loader.py [--repeats 5]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from pcmr.data import Vocabulary, load_dataset, train_loader
from pcmr.data.augment import drop_words, random_erase
from pcmr.data.batching import PairBatchSampler, TrainCollate
from pcmr.data.split import RetrievalSplit

#: the PCME recipes' augmentation (src/pcmr/recipes/pcme.yaml)
RECIPE_AUGMENT: dict[str, Any] = dict(erase_prob=0.2, erase_ratio=[0.02, 0.3333333333], erase_aspect=0.3,
                                      word_dropout=0.1, word_dropout_rule="unk_then_delete")


class PerItemPairs(Dataset):
    """The per-item training items pcmr built before batch-wise loading (random erasing and word dropout only)."""

    def __init__(self, split: RetrievalSplit, vocab: Vocabulary) -> None:
        self.split = split
        self.encoded = [vocab.encode(text) for text in split.caption_texts]

    def __len__(self) -> int:
        return self.split.num_captions

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        caption_index, item_seed = key[0], key[1]
        rng = np.random.default_rng(item_seed)
        image_index = int(self.split.caption_image[caption_index])
        image = random_erase(self.split.images.load(image_index), rng, prob=0.2, min_area=0.02,
                             max_area=0.3333333333, min_aspect=0.3)
        ids = drop_words(self.encoded[caption_index], 0.1, rng, "unk_then_delete")
        return {"image_index": image_index, "caption_index": int(caption_index),
                "caption_text": self.split.caption_texts[caption_index], "holds_image": True,
                "image": image, "caption": ids}


def cpu_per_pair(make_loader: Callable[[int], DataLoader], repeats: int) -> list[float]:
    """CPU seconds per pair of one whole epoch, per repeat (epoch ``r`` in repeat ``r``)."""
    out = []
    for repeat in range(repeats):
        loader = make_loader(repeat)
        start, pairs = time.process_time(), 0
        for batch in loader:
            pairs += len(batch["captions"])
        out.append((time.process_time() - start) / pairs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache_dir:
        split = load_dataset("shapes", "train", preset="multiplicity_simple", image_size=64, num_train=args.images,
                             num_val=10, num_test=10, num_test_unseen=0, num_binary_selection=0,
                             cache_dir=cache_dir).with_relevance("source")
    vocab = Vocabulary.from_split(split)
    per_item = PerItemPairs(split, vocab)

    def before(epoch: int) -> DataLoader:
        sampler = PairBatchSampler(split, args.batch_size, seed=0)
        sampler.epoch = epoch
        return DataLoader(per_item, batch_sampler=sampler, collate_fn=TrainCollate(split.relevance))

    def after(finish: bool) -> Callable[[int], DataLoader]:
        def make(epoch: int) -> DataLoader:
            loader = train_loader(split, vocab, args.batch_size, seed=0, finish=finish, **RECIPE_AUGMENT)
            loader.batch_sampler.epoch = epoch  # type: ignore[union-attr]
            return loader
        return make

    rows = [("per-item (before)", cpu_per_pair(before, args.repeats)),
            ("batch-wise, uint8 out (images finished on the training device)", cpu_per_pair(after(False), args.repeats)),
            ("batch-wise, finished on the CPU", cpu_per_pair(after(True), args.repeats))]
    baseline = statistics.median(rows[0][1])
    print(f"shapes multiplicity_simple, 64 px, {split.num_captions} captions, batch {args.batch_size}, "
          f"num_workers=0, median of {args.repeats} epochs")
    print("| loader | CPU us / pair (median) | all repeats | before / this |")
    print("|---|---|---|---|")
    for name, values in rows:
        median = statistics.median(values)
        every = ", ".join(f"{1e6 * v:.1f}" for v in values)
        print(f"| {name} | {1e6 * median:.1f} | {every} | {baseline / median:.1f}x |")


if __name__ == "__main__":
    main()
