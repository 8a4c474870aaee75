"""An evaluation report is never lost: ``pcmr evaluate --out DIR --overwrite`` under a full disk at the
steps of its folder swap, SIGTERM while writing, and two evaluations into one folder at once (the
second is refused; a killed one's temporary folder is removed by the next run)."""

from __future__ import annotations

import pytest

from _faults import full_disk_at
from _kill_runner import pcmr_process
from pcmr.cli import main

ARGS = ["--similarity", "cosine", "--rerank", "nns"]


@pytest.fixture(scope="module")
def run_dir(search_run_factory, tmp_path_factory):
    return search_run_factory(tmp_path_factory.mktemp("evalfaults") / "run")


def report(out) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}



def test_overwrite_under_a_full_disk_keeps_the_previous_report(run_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    with monkeypatch.context() as patch:
        calls = full_disk_at(patch, 0, out)
        assert main(["evaluate", str(run_dir), "--out", str(out), *ARGS]) == 0
    before = report(out)
    files = calls[0] - 1  # every file of the report, then the folder renamed in (nothing to set aside)
    assert files == len(before)
    for k in (1, files + 1, files + 2):  # a file of the report, the old report set aside, the new one in
        with monkeypatch.context() as patch:
            full_disk_at(patch, k, out)
            assert main(["evaluate", str(run_dir), "--out", str(out), *ARGS, "--overwrite"]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"pcmr evaluate: error: writing {out}"), err
        assert f"failed (No space left on device); the previous {out} is intact; free disk space" in err
        assert report(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["eval"], k


def test_two_evaluations_into_one_folder_and_sigterm(run_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    first = pcmr_process("hold:2", "evaluate", str(run_dir), "--out", str(out), *ARGS, wait=False)
    try:
        assert first.stdout.readline().strip() == "holding", first.communicate()
        assert main(["evaluate", str(run_dir), "--out", str(out), *ARGS]) == 2
        err = capsys.readouterr().err
        assert f"{out} is in use: process {first.pid} is writing this evaluation report (lock file " in err
    finally:
        first.kill()  # kill -9 while writing the report: its temporary folder stays behind
        first.communicate()
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != ".eval.lock")  # the dead holder's lock file
    assert not out.exists() and len(left) == 1 and left[0].startswith(".eval.") and left[0].endswith(".tmp"), left
    assert main(["evaluate", str(run_dir), "--out", str(out), *ARGS]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]  # the next run removed it
    before = report(out)
    stopped = pcmr_process("term:2", "evaluate", str(run_dir), "--out", str(out), *ARGS, "--overwrite")
    assert stopped.returncode == 128 + 15, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"pcmr evaluate: stopped by SIGTERM; its temporary files were removed and an unfinished write left {out} "
        "as it was")
    assert report(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["eval"]


def test_a_report_whose_swap_was_killed_is_put_back_by_any_reader_and_sigterm_after_it_says_so(run_dir, tmp_path,
                                                                                                capsys):
    from pcmr.report import Report
    from pcmr.search.abstain import read_risk_curve

    out = tmp_path / "ev"
    assert main(["evaluate", str(run_dir), "--out", str(out), *ARGS]) == 0
    before = report(out)
    readers = [lambda: Report.load(out), lambda: read_risk_curve(out, "cosine", "t2i"),
               lambda: main(["evaluate", str(run_dir), "--out", str(out), *ARGS])]  # refused: a report is there
    for read in readers:
        killed = pcmr_process("in", "evaluate", str(run_dir), "--out", str(out), *ARGS, "--overwrite")
        assert killed.returncode == -9, killed.stderr
        assert not out.exists() and any(p.name.endswith(".old") for p in tmp_path.iterdir())
        read()
        assert report(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["ev"]
    assert "already holds an evaluation report" in capsys.readouterr().err
    stopped = pcmr_process("term-cleanup", "evaluate", str(run_dir), "--out", str(out), *ARGS, "--overwrite")
    assert stopped.returncode == 128 + 15, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"pcmr evaluate: stopped by SIGTERM after its write was complete: {out} holds the new content (do not run "
        "the same command again to finish it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ev"] and (out / "results.json").is_file()
