"""docs/architecture.md (The path of one call): ``pcmr evaluate`` and ``pcmr search`` (build, then a text
and an image query) traced call by call with ``sys.setprofile`` on a tiny run, at package granularity
(``pcmr.hub``, ``pcmr.evaluation``, ...). The path runs down the layers of ``LIBRARY_LAYERS``: no call
goes from a library layer up into a later one, the evaluation never enters the search or the trainer
and the search never enters the evaluation or the trainer, and the documented packages are entered in
the documented order."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pcmr.cli import main
from test_architecture import APPLICATION_LAYERS, LIBRARY_LAYERS


def _package(frame) -> str | None:
    """``pcmr.<package>`` of the code a frame runs (``pcmr.cli`` for ``pcmr.cli.search``), else None."""
    name = frame.f_globals.get("__name__", "")
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "pcmr" and len(parts) > 1 else None


def _rank(package: str) -> int | None:
    """Rank in LIBRARY_LAYERS (application layers above them all); None for a foundation module."""
    for rank, packages in enumerate(LIBRARY_LAYERS):
        if package in packages:
            return rank
    if package in APPLICATION_LAYERS:
        return len(LIBRARY_LAYERS) + APPLICATION_LAYERS.index(package)
    return None


def trace(action: Callable[[], int]) -> tuple[int, list[tuple[str, str, str, bool]]]:
    """``(return code, crossings)``: every call from code of one pcmr package into another, in order, as
    ``(caller package, callee package, callee function, whether it is a method)``; the caller is the
    nearest pcmr frame (torch's ``Module.__call__`` between an encoder and its ``forward`` is skipped)."""
    crossings: list[tuple[str, str, str, bool]] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _package(frame)
        if callee is None:
            return
        caller, back = None, frame.f_back
        while back is not None and caller is None:
            caller, back = _package(back), back.f_back
        if caller is not None and caller != callee and frame.f_code.co_name != "<module>":  # not an import
            code = frame.f_code
            method = code.co_argcount > 0 and code.co_varnames[0] in ("self", "cls")
            crossings.append((caller, callee, code.co_name, method))

    sys.setprofile(profile)
    try:
        code = action()
    finally:
        sys.setprofile(None)
    return code, crossings


def _upward(crossings: list[tuple[str, str, str, bool]]) -> list[str]:
    """Plain functions of a later layer called from an earlier one. Methods of an object handed down are
    the object's own (the metrics driver calls a re-ranker's ``rescore``, the encoder a network's
    ``forward``), and so are calls into the command (a function it handed down, as ``write_folder`` calls
    back) and calls made by the foundations' higher-order helpers."""
    bad = []
    for caller, callee, function, method in crossings:
        mine, theirs = _rank(caller), _rank(callee)
        if method or callee == "pcmr.cli" or mine is None or theirs is None:
            continue
        if theirs > mine:
            bad.append(f"{caller} -> {callee}.{function}")
    return sorted(set(bad))


def _first_entries(crossings: list[tuple[str, str, str, bool]], packages: tuple[str, ...]) -> list[str]:
    order = ["pcmr.cli"]
    for _, callee, _, _ in crossings:
        if callee in packages and callee not in order:
            order.append(callee)
    return order


@pytest.fixture(scope="module")
def run(search_run_factory, tmp_path_factory) -> Path:
    return search_run_factory(tmp_path_factory.mktemp("path") / "run")


def test_the_path_of_pcmr_evaluate(run, tmp_path):
    code, crossings = trace(lambda: main(["evaluate", str(run), "--similarity", "cosine,match_prob", "--rerank",
                                          "nns,csls", "--out", str(tmp_path / "eval")]))
    assert code == 0
    _check_path(crossings, "pcmr.evaluation", {"pcmr.search", "pcmr.train", "pcmr.study"},
                ("pcmr.hub", "pcmr.encode", "pcmr.run_defaults", "pcmr.evaluation", "pcmr.metrics"))


def _check_path(crossings: list[tuple[str, str, str, bool]], step: str, never: set[str],
                documented: tuple[str, ...]) -> None:
    entered = {callee for _, callee, _, _ in crossings}
    assert not entered & never, sorted(entered & never)
    assert _upward(crossings) == []
    assert _first_entries(crossings, documented) == ["pcmr.cli", *documented]
    # the step's package is entered from the command only (or from the helper it hands a callback to):
    # once the flow has gone below it, it never comes back up into it
    callers = {caller for caller, callee, _, _ in crossings if callee == step}
    assert callers <= {"pcmr.cli", "pcmr.atomic"}, callers


def test_the_path_of_pcmr_search(run, tmp_path):
    index = tmp_path / "index"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(tmp_path / "q.png")
    for args, documented in (
            (["search", str(index), "--build", str(run)],
             ("pcmr.hub", "pcmr.encode", "pcmr.run_defaults", "pcmr.search")),
            (["search", str(index), "--text", "a red circle", "--rerank", "csls", "--image", str(tmp_path / "q.png")],
             ("pcmr.search", "pcmr.hub", "pcmr.encode", "pcmr.scoring"))):
        code, crossings = trace(lambda args=args: main(args))
        assert code == 0
        _check_path(crossings, "pcmr.search", {"pcmr.evaluation", "pcmr.train", "pcmr.study"}, documented)
