"""What a first use of the command line meets: ``--version``, ``--help`` and ``list`` answer without
importing torch, a refused value prints two lines, output piped into a reader that stops early ends
quietly, and a training that fails before it starts leaves no empty ``--out`` folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcmr.cli import main
from pcmr.cli.listing import BUILT_IN

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          check=False)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["list", "models"], ["list", "recipes"],
                                  ["list", "similarities"], ["search", "--badflag"]])
def test_version_help_and_list_do_not_import_torch(argv):
    code = (f"import sys\nfrom pcmr.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('TORCH', 'torch' in sys.modules)")
    if argv[0] == "search":  # the command given builds its own parser: its module (and torch) is imported
        assert "TORCH True" in _python(code).stdout
        return
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert "TORCH False" in done.stdout, argv


@pytest.mark.parametrize("kind", sorted(BUILT_IN))
def test_the_listed_names_are_the_registries(kind, capsys):
    from pcmr.data import list_datasets
    from pcmr.inference import list_rerankers
    from pcmr.losses import list_losses
    from pcmr.models import list_models
    from pcmr.similarity import list_similarities

    registry = {"models": list_models, "similarities": list_similarities, "losses": list_losses,
                "rerankers": list_rerankers, "datasets": list_datasets}[kind]
    assert list(BUILT_IN[kind]) == list(registry())
    assert main(["list", kind]) == 0
    assert capsys.readouterr().out.split() == list(registry())


def test_the_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("train", "evaluate", "search", "serve", "demo", "list", "study", "convert"):
        assert f"    {command}" in out


@pytest.mark.parametrize(("argv", "error"), [
    (["search", "idx", "-k", "abc"], "pcmr search: error: argument -k/--top-k: expected a positive integer, got 'abc'"),
    (["evaluate", "run", "--folds", "x"], "pcmr evaluate: error: argument --folds: invalid int value: 'x'"),
    (["train", "pcme", "--nproc", "two"], "pcmr train: error: argument --nproc: invalid int value: 'two'"),
    (["nosuch"], "pcmr: error: argument COMMAND: invalid choice: 'nosuch'"),
])
def test_a_refused_value_prints_a_short_usage_and_the_error(argv, error, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"usage: pcmr{' ' + argv[0] if argv[0] != 'nosuch' else ''} [options]")
    assert "--help" in lines[0] and lines[1].startswith(error)


def _into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``python -m pcmr argv`` writing into a pipe whose reader is gone (``| head`` after its lines)."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        return subprocess.run([sys.executable, "-m", "pcmr", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300, env=env, check=False)
    finally:
        os.close(write)


def test_list_into_a_closed_pipe_ends_quietly():
    done = _into_a_closed_pipe(["list", "similarities"])
    assert done.stderr == "" and done.returncode == 141


def test_search_into_a_closed_pipe_ends_quietly(tmp_path, search_index_factory):
    index = search_index_factory(tmp_path, backend="exact")
    done = _into_a_closed_pipe(["search", str(index), "--text", "a red circle", "-k", "5"])
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr and "Exception" not in done.stderr
    assert done.returncode == 141


def test_a_failed_training_leaves_no_empty_out_folder(tmp_path, capsys):
    out = tmp_path / "new" / "runs"
    status = main(["train", "vsepp_max", "--out", str(out), "--name", "run", "--no-progress", "--set",
                   "data.name=coco", "--set", f"data.options={{root: {tmp_path / 'nowhere'}}}"])
    assert status == 2 and "no Karpathy split JSON" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()  # the run folder and the folders made for it are gone


def test_a_failed_training_keeps_an_out_folder_that_held_anything(tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    status = main(["train", "vsepp_max", "--out", str(out), "--name", "run", "--no-progress", "--set",
                   "data.name=coco", "--set", f"data.options={{root: {tmp_path / 'nowhere'}}}"])
    assert status == 2
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
