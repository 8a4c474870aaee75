"""The search package stays readable: no module of ``src/pcmr/search`` over 600 lines and no function
(method, nested function) over 80 lines, and no module outside the candidate sources' own names an
engine (``engine == "milvus"``): the manifest, the backends and the commands ask the registered kind."""

from __future__ import annotations

import ast
from pathlib import Path

SEARCH = Path(__file__).resolve().parents[2] / "src" / "pcmr" / "search"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: the modules of the kinds of candidate source, which may name their own engine
SOURCE_MODULES = {"faiss_source.py", "milvus_source.py", "vectordb.py", "ann.py", "sources.py"}
ENGINES = {"faiss", "milvus"}


def _modules() -> list[Path]:
    return sorted(SEARCH.rglob("*.py"))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``module:line name (N lines)`` for each function of ``path`` longer than ``limit`` lines, from
    its ``def`` (decorators excluded) to its last line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit]


def engine_switches(path: Path) -> list[str]:
    """``module:line`` of each comparison of something with an engine's name (``x == "milvus"``,
    ``backend in ("auto", "faiss")``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        constants = [c for part in node.comparators for c in ast.walk(part) if isinstance(c, ast.Constant)]
        if any(c.value in ENGINES for c in constants):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_the_checks_see_what_they_look_for(tmp_path):
    sample = tmp_path / "sample.py"
    body = "\n".join(f"    x = {i}" for i in range(81))
    sample.write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n\nif engine == 'milvus':\n    pass\n"
                      "ok = backend in ('auto', 'faiss')\n")
    assert long_functions(sample) == ["sample.py:1 long (82 lines)"]
    assert engine_switches(sample) == ["sample.py:87", "sample.py:89"]


def test_no_search_module_over_600_lines():
    long = {path.name: n for path in _modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"search modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_search_function_over_80_lines():
    long = [entry for path in _modules() for entry in long_functions(path)]
    assert not long, f"search functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_only_the_candidate_sources_name_an_engine():
    cli = SEARCH.parent / "cli"
    paths = [p for p in _modules() if p.name not in SOURCE_MODULES] + [cli / "search.py", cli / "serve.py"]
    switches = [entry for path in paths if path.is_file() for entry in engine_switches(path)]
    assert not switches, f"engine-name switches outside the candidate sources: {switches}"
