"""The shared foundations: the override parser, atomic writes and the one Relevance type."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from pcmr.atomic import (
    atomic_write,
    atomic_write_json,
    atomic_write_npz,
    atomic_write_safetensors,
    atomic_write_text,
    atomic_write_via_path,
    write_folder,
)
from pcmr.config import ConfigError, apply_overrides, build_dataclass, load_mapping, parse_override
from pcmr.data import Relevance as DataRelevance
from pcmr.metrics import recall_at_k_from_topk, retrieval_metrics
from pcmr.metrics._relevance import as_sparse
from pcmr.models import config as model_config
from pcmr.relevance import Relevance
from pcmr.train import config as train_config


@dataclass
class Inner:
    size: int = 3
    names: list[str] = field(default_factory=list)


@dataclass
class Outer:
    rate: float = 0.1
    inner: Inner = field(default_factory=Inner)
    options: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- config
def test_one_override_parser_everywhere():
    assert train_config.apply_overrides is apply_overrides
    assert model_config.apply_overrides is apply_overrides
    assert train_config.parse_override is parse_override
    assert train_config.ConfigError is ConfigError


def test_string_and_mapping_overrides():
    data = {"inner": {"size": 1, "names": ["a"]}}
    out = apply_overrides(data, ["inner.size=4", "rate=1e-2", "options.x=none"], schema=Outer)
    assert out == {"inner": {"size": 4, "names": ["a"]}, "rate": 0.01, "options": {"x": None}}
    assert data == {"inner": {"size": 1, "names": ["a"]}}  # the input is not changed
    merged = apply_overrides(data, {"inner": {"size": 7, "names": None}, "rate": None}, schema=Outer)
    assert merged == {"inner": {"size": 7, "names": ["a"]}}  # None means "not given"
    assert apply_overrides(data, {"inner.size": 2})["inner"]["size"] == 2
    assert build_dataclass(Outer, out) == Outer(rate=0.01, inner=Inner(4, ["a"]), options={"x": None})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rat=1"], "unknown config key 'rat' (did you mean 'rate'?); accepted keys: rate, inner, options"),
        (["other.size=1"], "unknown config key 'other.size'; dotted keys start with one of: inner, options"),
        (["rate.x=1"], "config key 'rate' is not a section; cannot set 'rate.x'"),
        ("rate=1", "overrides must be a list of key=value strings"),
        (["rate"], "must have the form key=value"),
        (["inner..size=1"], "has an empty key"),
    ],
)
def test_override_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, overrides, schema=Outer)
    assert message in str(info.value)


def test_dataclass_errors_name_the_key_and_type():
    with pytest.raises(ConfigError, match=r"unknown config key 'inner.sise' \(did you mean 'size'\?\); accepted keys in inner: names, size"):
        build_dataclass(Outer, {"inner": {"sise": 1}})
    with pytest.raises(ConfigError, match="config key 'inner.size' expects an integer, got 'x'"):
        build_dataclass(Outer, {"inner": {"size": "x"}})


def test_load_mapping(tmp_path):
    (tmp_path / "a.yaml").write_text("x: 1\n")
    (tmp_path / "b.json").write_text('{"y": [1, 2]}')
    (tmp_path / "empty.yaml").write_text("")
    assert load_mapping(tmp_path / "a.yaml") == {"x": 1}
    assert load_mapping(tmp_path / "b.json") == {"y": [1, 2]}
    assert load_mapping(tmp_path / "empty.yaml") == {}
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_mapping(tmp_path / "list.yaml")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_mapping(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        load_mapping(tmp_path / "missing.yaml")


# --------------------------------------------------------------------------- atomic writes
def test_atomic_writers_round_trip(tmp_path):
    atomic_write_text(tmp_path / "sub" / "a.txt", "héllo")
    assert (tmp_path / "sub" / "a.txt").read_text(encoding="utf-8") == "héllo"
    atomic_write_json(tmp_path / "b.json", {"k": [1, 2.5, None]})
    assert json.loads((tmp_path / "b.json").read_text()) == {"k": [1, 2.5, None]}
    atomic_write_npz(tmp_path / "c.npz", x=np.arange(4))
    assert np.load(tmp_path / "c.npz")["x"].tolist() == [0, 1, 2, 3]
    atomic_write_safetensors(tmp_path / "d.safetensors", {"w": torch.ones(2, 3)}, metadata={"f": "1"})
    assert torch.equal(load_file(str(tmp_path / "d.safetensors"))["w"], torch.ones(2, 3))
    with pytest.raises(TypeError, match="dtype object"):
        atomic_write_npz(tmp_path / "e.npz", x=np.array([{}], dtype=object))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "c.npz", "d.safetensors", "sub"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    atomic_write_text(target, "old")

    def crash(handle):
        handle.write(b"half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        atomic_write(target, crash)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_path_writer_is_atomic_too(tmp_path):
    """For writers that take a file name (faiss.write_index): the temporary file is moved into place,
    and a writer that fails leaves the old file and no temporary."""
    target = tmp_path / "index.bin"
    atomic_write_via_path(target, lambda path: path.write_bytes(b"first"))
    assert target.read_bytes() == b"first"

    def crash(path):
        path.write_bytes(b"ha")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write_via_path(target, crash)
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["index.bin"]


# --------------------------------------------------------------------------- relevance
def test_one_relevance_type_accepted_by_the_metrics():
    assert DataRelevance is Relevance
    rng = np.random.default_rng(0)
    dense = rng.random((7, 11)) < 0.3
    dense[np.arange(7), np.arange(7)] = True
    for relevance in (Relevance(7, 11, *np.nonzero(dense)), Relevance.from_bits(7, 11, np.packbits(dense.T, axis=1))):
        i2t = as_sparse(relevance, 7, 11).dense()
        t2i = as_sparse(relevance, 11, 7).dense()
        assert torch.equal(i2t, torch.from_numpy(dense)) and torch.equal(t2i, torch.from_numpy(dense.T))
        scores = torch.from_numpy(rng.standard_normal((7, 11)))
        assert retrieval_metrics(scores, relevance) == retrieval_metrics(scores, torch.from_numpy(dense))
        topk = scores.T.topk(3, dim=1).indices  # [11, 3] caption -> image lists
        assert recall_at_k_from_topk(topk, relevance) == recall_at_k_from_topk(topk, torch.from_numpy(dense.T))
    with pytest.raises(ValueError, match="relates 7 images and 11 captions"):
        as_sparse(Relevance(7, 11, [0], [0]), 5, 5)


def test_write_folder_swaps_whole_folders(tmp_path):
    def fill(text):
        def write(folder):
            (folder / "a.txt").write_text(text)
            (folder / "b.txt").write_text(text)
        return write

    target = tmp_path / "model"
    write_folder(target, fill("one"))
    write_folder(target, fill("two"))
    assert sorted(p.name for p in target.iterdir()) == ["a.txt", "b.txt"]
    assert (target / "a.txt").read_text() == "two"

    def crash(folder):
        (folder / "a.txt").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        write_folder(target, crash)
    assert (target / "a.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
