"""CUB's ``protocol`` option: the release's training images (trainval classes minus seen_test_images.txt),
the shipped copy of that list, and the errors."""

from __future__ import annotations

import pytest

from _real_layouts import write_cub_folder
from pcmr.data import DataError, load_dataset
from pcmr.data.cub import SHIPPED_SEEN_TEST

LAYOUT = {"001.Black_footed_Albatross": ["Black_Footed_Albatross_0038_212.jpg", "a.jpg"],
          "002.Laysan_Albatross": ["b.jpg", "c.jpg"], "003.Sooty_Albatross": ["d.jpg"]}


def test_shipped_list_is_the_releases_and_used_without_a_local_one(tmp_path):
    lines = SHIPPED_SEEN_TEST.read_text().splitlines()
    assert len(lines) == 1764 and len(set(lines)) == 1764 and all(line.count("/") == 1 for line in lines)
    # the first image of the layout is in the release's list (its class 001, a trainval class)
    assert "001.Black_footed_Albatross/Black_Footed_Albatross_0038_212.jpg" in lines
    root = write_cub_folder(tmp_path, LAYOUT, list(LAYOUT)[:2], list(LAYOUT)[2:])
    train = load_dataset("cub", "train", root=str(root), image_size=8, protocol="release")
    assert train.num_images == 3 and train.info["protocol"] == "release"
    assert load_dataset("cub", "train", root=str(root), image_size=8).num_images == 4
    seen = load_dataset("cub", "seen_test", root=str(root), image_size=8)
    assert seen.num_images == 1 and seen.images.paths[0].endswith("Black_Footed_Albatross_0038_212.jpg")


def test_a_local_list_wins_and_bad_input_names_the_file(tmp_path):
    root = write_cub_folder(tmp_path, LAYOUT, list(LAYOUT)[:2], list(LAYOUT)[2:], ["002.Laysan_Albatross/b.jpg"])
    train = load_dataset("cub", "train", root=str(root), image_size=8, protocol="release")
    assert [p.rsplit("/", 1)[-1] for p in train.images.paths] == ["Black_Footed_Albatross_0038_212.jpg", "a.jpg",
                                                                  "c.jpg"]
    (root / "seen_test_images.txt").write_text("002.Laysan_Albatross/b.jpg\nb.jpg\n")
    with pytest.raises(DataError, match=r"seen_test_images.txt, line 2.*'<class dir>/<file>.jpg' per line"):
        load_dataset("cub", "train", root=str(root), protocol="release")
    with pytest.raises(DataError, match=r"unknown protocol 'paper'.*pcmr.*release"):
        load_dataset("cub", "train", root=str(root), protocol="paper")
