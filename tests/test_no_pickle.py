"""Nothing pcmr reads can run code: no pickle module, no pickled numpy arrays, torch.load only for weights."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "pcmr"


def calls(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                yield node


def keyword(node: ast.Call, name: str):
    return next((k.value for k in node.keywords if k.arg == name), None)


def test_no_pickle_anywhere_in_the_library():
    files = sorted(SOURCE.rglob("*.py"))
    assert len(files) > 50
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] in ("pickle", "cPickle", "dill", "joblib") for n in names), path
        for node in calls(tree, "load"):
            pickled = keyword(node, "allow_pickle")
            assert not (isinstance(pickled, ast.Constant) and pickled.value is True), f"{path}:{node.lineno}"
            if isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", None) == "torch":
                weights_only = keyword(node, "weights_only")
                assert isinstance(weights_only, ast.Constant) and weights_only.value is True, f"{path}:{node.lineno}"
            if isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", None) == "np":
                assert keyword(node, "allow_pickle") is not None, f"{path}:{node.lineno}: np.load without allow_pickle"
