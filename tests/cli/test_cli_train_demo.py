"""``pcmr demo`` end to end at a tiny size: both recipes train, are evaluated, the table is printed."""

from __future__ import annotations

import re

import pytest

from pcmr.cli import main


def test_demo_tiny(tmp_path, tiny_training, as_set_args, capsys):
    tiny = [*tiny_training, "data.options.num_val=10", "data.options.num_test=10",
            "eval.similarities=[cosine, match_prob]", "eval.rerankers=[nns, csls]"]
    argv = ["demo", "--out", str(tmp_path / "demo"), *as_set_args(tiny)]
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    demo = tmp_path / "demo"
    for recipe in ("pcme", "pcme_mu_only"):
        assert (demo / recipe / "model" / "model.safetensors").is_file()
        assert (demo / recipe / "evaluation" / "results.md").is_file()
        assert f"{recipe}: run {demo / recipe}" in out
    table = (demo / "comparison.md").read_text()
    assert "pcme_mu_only" in table and "match_prob" in table and "csls" in table
    assert "| pcme | match_prob | nns | exact |" in table and "| pcme | match_prob | nns | source |" in table
    assert re.search(r"total time: \d+ s \(\d+ s of CPU time on \d+ logical CPUs", out)  # the machine it ran on
    # a second demo replaces the first one; a folder with other files is refused
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    status = main(["demo", "--out", str(tmp_path / "other")])
    assert status == 2 and "not from pcmr demo" in capsys.readouterr().err
    assert (tmp_path / "other" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("argv", [["demo", "--help"], ["train", "--help"], ["list", "--help"], ["--help"]])
def test_help_texts(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage: pcmr" in capsys.readouterr().out
