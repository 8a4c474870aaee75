"""Per-process shards of the training batches: disjoint, reproducible, together the one-process batch."""

from __future__ import annotations

import pytest
import torch

from pcmr.data import Vocabulary, load_dataset
from pcmr.data.batching import SAMPLERS, PairBatchSampler, PairDataset, TrainCollate, train_loader

SMALL = dict(num_train=37, num_val=5, num_test=5, num_test_unseen=5, num_binary_selection=3, image_size=16)


@pytest.fixture(scope="module")
def shapes_train(tmp_path_factory):
    return load_dataset("shapes", "train", **SMALL, cache_dir=str(tmp_path_factory.mktemp("shapes")))


@pytest.mark.parametrize("mode", SAMPLERS)
@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_are_disjoint_and_make_the_global_batch(shapes_train, mode, world_size):
    batch_size = 12
    single = PairBatchSampler(shapes_train, batch_size, mode=mode, seed=4)
    shards = [PairBatchSampler(shapes_train, batch_size, mode=mode, seed=4, num_replicas=world_size, rank=r)
              for r in range(world_size)]
    for epoch in (0, 1):
        for sampler in (single, *shards):
            sampler.epoch = epoch
        expected = list(single)
        per_rank = [list(sampler) for sampler in shards]
        assert all(len(batches) == len(expected) == len(single) for batches in per_rank)
        for step, batch in enumerate(expected):
            parts = [batches[step] for batches in per_rank]
            assert all(len(part) == batch_size // world_size for part in parts)
            assert [key[:2] for part in parts for key in part] == batch  # rank order = the global batch
            captions = [caption for part in parts for caption, _, _ in part]
            assert len(set(captions)) == len(captions)  # disjoint
            # an image is held by the first item of the global batch that has it, whatever the shard
            images = [int(shapes_train.caption_image[caption]) for caption in captions]
            holds = [holds for part in parts for _, _, holds in part]
            assert holds == [image not in images[:position] for position, image in enumerate(images)]
    again = PairBatchSampler(shapes_train, batch_size, mode=mode, seed=4, num_replicas=world_size, rank=1)
    again.epoch = 1
    assert list(again) == per_rank[1]  # reproducible from (seed, epoch)


@pytest.mark.parametrize("mode", SAMPLERS)
def test_gathered_shards_give_the_one_process_batch_and_relation(shapes_train, mode):
    """Concatenating the shards' batches in rank order gives the one-process batch: captions,
    images (each held by one shard only, the one of its first item) and the true relation."""
    vocab = Vocabulary.from_split(shapes_train)
    options = dict(sampler=mode, seed=2, num_views=0)
    single = next(iter(train_loader(shapes_train, vocab, 16, **options)))
    shards = [next(iter(train_loader(shapes_train, vocab, 16, num_replicas=2, rank=r, **options))) for r in range(2)]
    caption_index = torch.cat([shard["caption_index"] for shard in shards])
    assert torch.equal(caption_index, single["caption_index"])
    assert torch.equal(torch.cat([shard["captions"][:, :4] for shard in shards]), single["captions"][:, :4])
    image_index = torch.cat([shard["image_index"] for shard in shards])
    images = torch.cat([shard["images"] for shard in shards])
    assert torch.equal(image_index, single["image_index"])
    assert torch.equal(images, single["images"])  # the same augmented image is kept
    relation = shapes_train.relevance.submatrix(image_index.numpy(), caption_index.numpy())
    assert torch.equal(torch.from_numpy(relation), single["relevance"])
    assert int(single["relevance"].sum()) > len(caption_index)  # many-to-many: relation beyond the pairs
    for shard in shards:  # each shard's own relation is the block of its items
        expected = shapes_train.relevance.submatrix(shard["image_index"].numpy(), shard["caption_index"].numpy())
        assert torch.equal(shard["relevance"], torch.from_numpy(expected))


def test_sharding_rejects_uneven_batches(shapes_train):
    with pytest.raises(ValueError, match="batch_size=10 .* divisible by the number of processes \\(3\\)"):
        PairBatchSampler(shapes_train, 10, num_replicas=3, rank=0)
    with pytest.raises(ValueError, match="rank=2 must lie in"):
        PairBatchSampler(shapes_train, 10, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="drop_last=False"):
        PairBatchSampler(shapes_train, 10, num_replicas=2, rank=0, drop_last=False)


def test_a_shard_whose_images_are_all_held_elsewhere_has_an_empty_image_batch(shapes_train):
    """Both captions of shard 1 show an image of shard 0: shard 1 encodes no image at all."""
    vocab = Vocabulary.from_split(shapes_train)
    first = int(shapes_train.caption_image[0])
    captions = [c for c in range(shapes_train.num_captions) if int(shapes_train.caption_image[c]) == first][:4]
    dataset = PairDataset(shapes_train, vocab, augment=False)
    collate = TrainCollate(shapes_train.relevance)
    held = [(captions[0], 0, True), (captions[1], 1, False)]
    elsewhere = [(captions[2], 2, False), (captions[3], 3, False)]
    batch = collate([dataset[key] for key in elsewhere])
    assert batch["images"].shape == (0, *collate([dataset[key] for key in held])["images"].shape[1:])
    assert batch["image_index"].tolist() == [] and batch["caption_index"].tolist() == captions[2:]
