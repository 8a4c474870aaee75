"""What a first use of the command line meets: ``--version``, ``--help``, every command's ``--help``, a
usage error of every command and ``list`` answer without importing torch, a refused value prints two lines, output piped into a reader that stops early ends
quietly, and a training that fails before it starts leaves no empty ``--out`` folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcmr.catalog import REGISTERED
from pcmr.cli import COMMANDS, main

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          check=False)


def _torch_free_run(argv: list[str]) -> tuple[object, str, str]:
    """``pcmr.cli.main(argv)`` in a fresh interpreter: (its exit status, its stderr, whether torch, numpy or
    a run module of the command line was imported, as ``"TORCH False NUMPY False RUN []"``)."""
    code = (f"import sys\nfrom pcmr.cli import main\ntry:\n    status = main({argv!r})\nexcept SystemExit as exc:\n"
            "    status = exc.code\n"
            "run = sorted(m for m in sys.modules if m.startswith('pcmr.cli.') and not m.startswith('pcmr.cli.parsers'))\n"
            "print('STATUS', status)\n"
            "print('TORCH', 'torch' in sys.modules, 'NUMPY', 'numpy' in sys.modules, 'RUN', run)")
    done = _python(code)
    lines = done.stdout.splitlines()
    assert lines and lines[-1].startswith("TORCH"), done.stdout + done.stderr
    status = lines[-2].split(" ", 1)[1]
    return (int(status) if status.lstrip("-").isdigit() else status), done.stderr, lines[-1]


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["list", "models"], ["list", "recipes"],
                                  ["list", "similarities"], ["list", "backends"]])
def test_version_help_and_list_do_not_import_torch(argv):
    status, stderr, imported = _torch_free_run(argv)
    assert status in (0, "None"), stderr
    assert imported.startswith("TORCH False NUMPY False"), (argv, imported)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_answers_without_torch(command):
    status, stderr, imported = _torch_free_run([command, "--help"])
    assert status == 0, stderr
    assert imported == "TORCH False NUMPY False RUN []", (command, imported)


#: a usage error of each command: an unknown flag, a missing argument, a refused value
USAGE_ERRORS = {
    "train": [["train", "--bogus"], ["train", "pcme", "--nproc", "two"]],
    "evaluate": [["evaluate"], ["evaluate", "run", "--batch-size", "0"]],
    "search": [["search"], ["search", "idx", "-k", "0"], ["search", "idx", "--backend", "nosuch"]],
    "serve": [["serve"], ["serve", "idx", "--port", "x"]],
    "demo": [["demo", "--bogus"]],
    "list": [["list"], ["list", "nosuch"]],
    "study": [["study"], ["study", "tiny", "--workers", "x"]],
    "convert": [["convert", "nosuch", "a.pth", "out"], ["convert", "pcme-release"]],
}


def test_every_command_has_usage_errors_to_try():
    assert set(USAGE_ERRORS) == set(COMMANDS)


@pytest.mark.parametrize("argv", [argv for cases in USAGE_ERRORS.values() for argv in cases], ids=" ".join)
def test_a_usage_error_is_refused_without_torch(argv):
    """argparse refuses the command line before the command's run module (and torch) is imported: a
    short usage line and the error, exit status 2."""
    status, stderr, imported = _torch_free_run(argv)
    assert status == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"usage: pcmr {argv[0]} [options]"), lines
    assert lines[1].startswith(f"pcmr {argv[0]}: error: "), lines
    assert imported == "TORCH False NUMPY False RUN []", (argv, imported)


@pytest.mark.parametrize("kind", sorted(REGISTERED))
def test_pcmr_list_prints_the_registries(kind, capsys):
    """Every registered name of each registry is listed, in the registry's order (the catalog is checked
    against every registry of the package in tests/test_catalog.py)."""
    from pcmr.data import list_datasets
    from pcmr.evaluation.producers import list_producers
    from pcmr.inference import list_rerankers
    from pcmr.losses import list_losses
    from pcmr.models import list_models
    from pcmr.search.compose import backend_names
    from pcmr.similarity import list_similarities

    registry = {"models": list_models, "similarities": list_similarities, "losses": list_losses,
                "rerankers": list_rerankers, "datasets": list_datasets, "backends": backend_names,
                "producers": list_producers}[kind]
    assert main(["list", kind]) == 0
    assert capsys.readouterr().out.split() == list(registry())


def test_pcmr_list_recipes_prints_the_recipes(capsys):
    from pcmr.train.recipes import list_recipes

    assert main(["list", "recipes"]) == 0
    assert capsys.readouterr().out.split() == list(list_recipes())


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
