"""Long steps announce themselves: start and timed finish lines on stderr, in a log as on a terminal."""

from __future__ import annotations

import re

from pcmr.cli import main
from pcmr.progress import phase, status_line


def test_phase_prints_start_and_timed_finish(capsys):
    with phase("scoring things"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "scoring things ..."
    assert re.fullmatch(r"scoring things: done in \d+\.\d s", err[1])
    with phase("silent", enabled=False):
        status_line("nothing", enabled=False)
    assert capsys.readouterr().err == ""


def test_evaluate_and_search_build_report_their_phases(search_run_factory, tmp_path, capsys):
    run = search_run_factory(tmp_path / "run")
    assert main(["evaluate", str(run), "--out", str(tmp_path / "eval"), "--similarity", "cosine,kl",
                 "--rerank", "nns,csls+rgm"]) == 0
    err = capsys.readouterr().err  # not a terminal here: plain lines, no bars
    for pattern in (r"encoding the test split: done in \d+\.\d s",
                    r"encoding the val split \(to select RGM's lambda\): done in",
                    r"evaluating with exact relevance \(2 similarities x 2 re-rankers\)",
                    r"  kl: scoring 13 images x 65 captions, then nns, csls\+rgm \.\.\.",
                    r"  kl: done in \d+\.\d s \(scores \d+\.\d s; nns \d+\.\d s; csls\+rgm with lambda selected on "
                    r"validation \d+\.\d s\)",
                    r"uncertainty under occlusion and word erasure .*: done in",
                    r"writing the report and figures to .*: done in"):
        assert re.search(pattern, err), pattern
    assert "\r" not in err
    assert main(["search", str(tmp_path / "index"), "--build", str(run)]) == 0
    assert re.search(r"encoding the gallery \(13 images, 65 captions\): done in", capsys.readouterr().err)
