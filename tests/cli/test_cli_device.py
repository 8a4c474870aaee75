"""A device this machine lacks gives the same one line in every command (:func:`pcmr.device.resolve_device`).

CUDA is switched off with monkeypatch (``torch.cuda.is_available`` answers False), so these tests mean
the same on a machine with a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pcmr.cli import main
from pcmr.device import DeviceError, resolve_device

NO_CUDA = "--device=cuda: CUDA is not available here (devices: cpu); use --device=cpu"
NO_CUDA_CONFIG = "train.device=cuda: CUDA is not available here (devices: cpu); use train.device=cpu"


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], command: str, message: str) -> None:
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.err == f"pcmr {command}: error: {message}\n"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, search_index_factory) -> Path:
    """A gallery index of an untrained tiny run (built on the CPU)."""
    root = tmp_path_factory.mktemp("device-index")
    search_index_factory(root, backend="exact")
    return root


@pytest.mark.parametrize("argv", [
    ["train", "vsepp_max", "--device", "cuda", "--no-progress"],
    ["evaluate", "RUN", "--device", "cuda"],
    ["search", "INDEX", "--build", "RUN", "--device", "cuda"],
    ["search", "INDEX", "--text", "a red circle", "--device", "cuda"],
    ["serve", "INDEX", "--device", "cuda"],
    ["demo", "--device", "cuda"],
])
def test_every_command_rejects_cuda_without_cuda_in_one_line(no_cuda: None, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             argv: list[str]) -> None:
    """Checked before the command does any work: no run, index or output folder is needed or written."""
    argv = [str(tmp_path / a) if a in ("RUN", "INDEX") else a for a in argv]
    if argv[0] in ("train", "demo"):
        argv += ["--out", str(tmp_path / "out")]
    _one_line_error(capsys, argv, argv[0], NO_CUDA)
    assert not (tmp_path / "out").exists() and not (tmp_path / "INDEX").exists()


def test_search_text_on_a_real_index(no_cuda: None, index: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, ["search", str(index / "index"), "--text", "a red circle", "--device", "cuda"],
                    "search", NO_CUDA)
    assert main(["search", str(index / "index"), "--text", "a red circle", "--device", "cpu"]) == 0


def test_config_device_gives_the_same_line(no_cuda: None, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """train.device from --set (train, demo) or from a study file: the same sentence, naming the field."""
    _one_line_error(capsys, ["train", "vsepp_max", "--set", "train.device=cuda", "--out", str(tmp_path / "t"),
                             "--no-progress"], "train", NO_CUDA_CONFIG)
    _one_line_error(capsys, ["demo", "--set", "train.device=cuda", "--out", str(tmp_path / "d")], "demo",
                    NO_CUDA_CONFIG)
    study = tmp_path / "cuda.yaml"
    study.write_text("name: cuda\nseeds: [0]\nset: {train.device: cuda}\nrelevance: [exact]\n"
                     "recipes: {pcme_mu_only: {}}\n")
    for extra in ([], ["--only", "0", "--threads", "1"]):  # the whole study; one run, as its child process runs
        status = main(["study", str(study), "--out", str(tmp_path / "s"), *extra])
        last = capsys.readouterr().err.splitlines()[-1]  # --only first says which run it starts
        assert status == 2 and last.startswith("pcmr study: error: ") and last.endswith(NO_CUDA_CONFIG), last
    assert not (tmp_path / "s" / "runs").exists()


def test_library_entry_points_use_the_same_check(no_cuda: None, tiny_run_factory, tmp_path: Path) -> None:
    from pcmr import load
    from pcmr.search import GalleryIndex

    run = tiny_run_factory(tmp_path / "run")
    with pytest.raises(DeviceError, match=r"^device=cuda: CUDA is not available here"):
        load(run, device="cuda")
    with pytest.raises(DeviceError, match=r"^device=cuda:1: CUDA is not available here"):
        GalleryIndex.load(tmp_path / "no-index", device="cuda:1")


@pytest.mark.parametrize(("value", "message"), [
    ("gpu0", "--device=gpu0: not a torch device (e.g. cpu, cuda, cuda:1)"),
    ("cuda", NO_CUDA),
])
def test_resolve_device_messages(no_cuda: None, value: str, message: str) -> None:
    with pytest.raises(DeviceError) as info:
        resolve_device(value)
    assert str(info.value) == message


def test_resolve_device_accepts_what_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu", 0), what="train.device") == torch.device("cpu", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with two GPUs
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match=r"^--device=cuda:2: this machine has no cuda device 2 "
                                          r"\(devices: cpu, cuda:0, cuda:1\)$"):
        resolve_device("cuda:2")
