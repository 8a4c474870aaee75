"""A model folder as users get one: a ``save_pretrained`` folder works as it is with ``pcmr evaluate``,
``pcmr search --build`` and ``pcmr serve`` (it records its run's config: no --data, no --vocab); a malformed
``similarity_options.json`` and a file that is not a checkpoint are one plain error line each."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import pcmr
from pcmr.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def run_dir(tiny_shapes, tmp_path_factory, tiny_run_factory):
    return tiny_run_factory(tmp_path_factory.mktemp("run"), shapes=tiny_shapes,
                            eval_section={"similarities": ["cosine", "kl"], "rerankers": ["nns"]},
                            similarity_options={"match_prob": {"a": 3.0, "b": 1.0}})


@pytest.fixture(scope="module")
def pretrained(run_dir, tmp_path_factory):
    """``pcmr.load(RUN).save_pretrained(folder)``, copied where no run folder is beside it."""
    folder = tmp_path_factory.mktemp("hf") / "model"
    pcmr.load(run_dir).save_pretrained(folder)
    return folder


def _one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pcmr {command}: error: ") and "Traceback" not in err, err
    return err


def test_save_pretrained_records_the_run_config(tiny_shapes, run_dir, pretrained):
    from pcmr.train.loading import run_config

    recorded = json.loads((pretrained / "run_config.json").read_text())
    assert recorded["data"]["name"] == "shapes" and recorded["data"]["options"]["num_test"] == tiny_shapes["num_test"]
    assert recorded["eval"]["similarities"] == ["cosine", "kl"]
    loaded = pcmr.load(pretrained)
    assert loaded.run_dir is None and loaded.source == pretrained
    assert run_config(loaded) == run_config(pcmr.load(run_dir))


def test_evaluate_a_save_pretrained_folder_as_it_is(run_dir, pretrained, tmp_path, capsys):
    assert main(["evaluate", str(pretrained), "--out", str(tmp_path / "hf")]) == 0
    assert main(["evaluate", str(run_dir), "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    from_folder = json.loads((tmp_path / "hf" / "results.json").read_text())
    from_run = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [(r["similarity"], r["rerank"]) for r in from_folder["rows"]][:2] == [("cosine", "nns"), ("kl", "nns")]
    assert from_folder["rows"] == from_run["rows"]  # the same data, split and defaults as the run's own
    assert from_folder["meta"]["split"] == "test" and from_folder["meta"]["run"] == str(pretrained)


def test_search_build_and_serve_a_save_pretrained_folder(tiny_shapes, run_dir, pretrained, tmp_path, capsys):
    index = tmp_path / "index"
    assert main(["search", str(index), "--build", str(pretrained)]) == 0
    assert f"{tiny_shapes['num_test']} images" in capsys.readouterr().out
    assert main(["search", str(index), "--text", "a red circle", "-k", "2", "--similarity", "cosine", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["results"]
    assert len(hits) == 2
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "pcmr", "serve", str(index), "--port", str(port),
                                "--no-access-log"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert line.startswith(f"serving {index} ({tiny_shapes['num_test']} images"), process.stderr.read()
        url = f"http://127.0.0.1:{port}/api/search?text=a+red+circle&k=2&similarity=cosine"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    body = json.loads(response.read())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert [hit["id"] for hit in body["results"]] == [hit["id"] for hit in hits]
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(("content", "problem"), [
    ('{"match_prob": {"a": 3.0,', "is not valid JSON (Expecting"),
    ('[1, 2]', "holds a JSON list"),
    ('{"match_prob": 3.0}', "the options of 'match_prob' are a JSON float"),
    ('{"match_prob": {"a": "three"}}', "match_prob.a is 'three', not a number"),
])
def test_malformed_similarity_options_is_one_clear_error(run_dir, tmp_path, capsys, content, problem):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    options = run / "similarity_options.json"
    options.write_text(content)
    expected = 'expected an object mapping similarity names to their options, e.g. {"match_prob": {"a": 12.0'
    with pytest.raises(ValueError, match="similarity options file") as caught:
        pcmr.load(run)
    assert str(options) in str(caught.value) and problem in str(caught.value) and expected in str(caught.value)
    assert main(["evaluate", str(run), "--out", str(tmp_path / "out")]) == 2
    err = _one_error_line(capsys, "evaluate")
    assert str(options) in err and problem in err and expected in err
    assert main(["search", str(tmp_path / "index"), "--build", str(run)]) == 2
    assert str(options) in _one_error_line(capsys, "search")


@pytest.mark.parametrize("kind", ["text", "pickle", "object"])
def test_convert_a_file_that_is_not_a_checkpoint_is_one_plain_line(tmp_path, kind):
    import argparse
    import pickle

    import torch

    path = tmp_path / "file.pth"
    if kind == "text":
        path.write_text("hello\n")
    elif kind == "pickle":
        path.write_bytes(pickle.dumps({"a": 1}))
    else:
        torch.save({"config": argparse.Namespace(a=1)}, path)
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "pcmr", "convert", "pcme-release", str(path), str(tmp_path / "out")],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"pcmr convert: error: PCME release checkpoint '{path}' ")
    assert "weights_only" not in result.stderr and "Warning" not in result.stderr
    if kind == "object":
        assert "holds a Python object (argparse.Namespace)" in result.stderr
    else:
        assert "is not a torch checkpoint; expected the .pth written by the release's save_models" in result.stderr
    assert not (tmp_path / "out").exists()
