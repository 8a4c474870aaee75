"""Package structure: no import cycle inside pcmr, and no function-local import hiding one."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is_package) for every module of src/pcmr."""
    found = {}
    for path in sorted((SRC / "pcmr").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The pcmr modules an import statement loads (``from pkg import submodule`` names the submodule)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        names = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # "pcmr.data.split.RetrievalSplit" -> "pcmr.data.split"
            name = name.rpartition(".")[0]
        if name and name != module:
            out.append(name)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]], list[tuple[str, int, str]]]:
    """``(top, every, local)``: module-level import edges inside pcmr, the edges with function-local
    imports added, and the function-local imports themselves as (module, line, statement)."""
    modules = _modules()
    known = set(modules)
    top: dict[str, set[str]] = {m: set() for m in modules}
    every: dict[str, set[str]] = {m: set() for m in modules}
    local: list[tuple[str, int, str]] = []
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_level: set[int] = set()
        type_only: set[int] = set()
        pending = list(tree.body)
        while pending:  # statements run at import time: the body, and try/if blocks in it
            stmt = pending.pop()
            module_level.add(id(stmt))
            if isinstance(stmt, ast.If) and _is_type_checking(stmt):
                type_only.update(id(s) for s in stmt.body)  # annotations only: never executed, no edge
                continue
            if isinstance(stmt, (ast.If, ast.Try)):
                pending.extend(stmt.body + stmt.orelse + getattr(stmt, "finalbody", []))
                for handler in getattr(stmt, "handlers", []):
                    pending.extend(handler.body)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in type_only:
                continue
            targets = _targets(node, module, is_package, known)
            if id(node) in module_level:
                top[module].update(targets)
            else:
                local.append((module, node.lineno, ast.unparse(node)))
            every[module].update(targets)
    return top, every, local


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _edges(graph: dict[str, set[str]], cycle: list[str]) -> list[str]:
    members = set(cycle)
    return [f"{a} -> {b}" for a in cycle for b in sorted(graph[a] & members)]


def test_find_cycles_on_known_graphs():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_the_graph_sees_relative_and_submodule_imports():
    top, _, _ = import_graph()
    assert "pcmr.data.split" in top["pcmr.data.batching"]  # from pcmr.data.split import RetrievalSplit
    assert "pcmr.gaussian" in top["pcmr.point_set"]  # from pcmr.gaussian import Gaussian, NonFiniteEmbeddingError
    assert "pcmr.data.batching" not in top["pcmr.data.split"]


def test_no_import_cycle_inside_pcmr():
    top, _, _ = import_graph()
    cycles = find_cycles(top)
    assert not cycles, "import cycles: " + "; ".join(", ".join(_edges(top, c)) for c in cycles)


def test_function_local_imports_do_not_hide_a_cycle():
    """Hoisting every function-local import to module level must not create a cycle: local imports
    are for optional dependencies or start-up time, never to break a cycle."""
    _, every, local = import_graph()
    cycles = find_cycles(every)
    listing = "\n".join(f"  {m}:{line}: {stmt}" for m, line, stmt in local)
    assert not cycles, (
        "cycles through function-local imports: "
        + "; ".join(", ".join(_edges(every, c)) for c in cycles)
        + f"\nfunction-local imports ({len(local)}):\n{listing}"
    )


# Application layers, lowest first: each may import the library and the layers before it, never
# a later one; the library (every other module) imports none of them.
APPLICATION_LAYERS = ("pcmr.train", "pcmr.study", "pcmr.cli")


def _layer(module: str) -> int | None:
    for rank, layer in enumerate(APPLICATION_LAYERS):
        if module == layer or module.startswith(layer + "."):
            return rank
    return None


def test_library_never_imports_the_trainer_the_study_or_the_cli():
    top, every, _ = import_graph()
    for module, targets in every.items():
        if module == "pcmr.__main__":
            continue
        own = _layer(module)
        allowed = -1 if own is None else own
        bad = sorted(t for t in targets if (_layer(t) is not None and _layer(t) > allowed))
        assert not bad, f"{module} imports {bad}"


# The library's layers above the foundations, lowest first (docs/architecture.md, Layers). A module
# imports modules of its own package, of an earlier layer or of the foundations (every library module
# not listed: pcmr.gaussian, pcmr.report, ...), never a later layer nor another package of its own
# layer: encoding and scoring sit below both the evaluation and the search, which import them and
# never each other; the loaded model (pcmr.hub, its on-disk form in pcmr.model_files) and its run's
# defaults (pcmr.run_defaults) sit between, so both take a pcmr.Model.
LIBRARY_LAYERS = (
    ("pcmr.similarity",),
    ("pcmr.losses", "pcmr.models", "pcmr.data"),
    ("pcmr.ranking",),
    ("pcmr.metrics",),
    ("pcmr.inference",),
    ("pcmr.encode", "pcmr.scoring"),
    ("pcmr.model_files",),
    ("pcmr.hub",),
    ("pcmr.run_defaults",),
    ("pcmr.evaluation", "pcmr.search"),
)


def _library_layer(module: str) -> tuple[int, str] | None:
    """(rank in LIBRARY_LAYERS, package) of a library module; None for a foundation."""
    for rank, packages in enumerate(LIBRARY_LAYERS):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return rank, package
    return None


def test_library_layers_import_only_downwards():
    _, every, _ = import_graph()
    bad = []
    for module, targets in every.items():
        if module == "pcmr" or _layer(module) is not None or module == "pcmr.__main__":
            continue  # the package's lazy front door and the application layers
        own = _library_layer(module)
        for target in sorted(targets):
            theirs = _library_layer(target)
            if theirs is None or (own is not None and theirs[1] == own[1]):
                continue
            if own is None or theirs[0] >= own[0]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports against the library layers: " + "; ".join(bad)


def test_evaluation_and_search_share_the_encode_and_score_layer_not_each_other():
    _, every, _ = import_graph()
    for module, targets in every.items():
        for this, other in (("pcmr.evaluation", "pcmr.search"), ("pcmr.search", "pcmr.evaluation")):
            if module == this or module.startswith(this + "."):
                assert not [t for t in targets if t == other or t.startswith(other + ".")], f"{module} imports {other}"
    for lower in ("pcmr.encode", "pcmr.scoring"):
        assert any(t.startswith(lower) for m in every if m.startswith("pcmr.evaluation.") for t in every[m])
        assert any(t.startswith(lower) for m in every if m.startswith("pcmr.search.") for t in every[m])


# Runtime dependencies of pcmr (pyproject.toml); everything else third-party is optional.
CORE_PACKAGES = {"torch", "numpy", "yaml", "safetensors", "PIL", "tqdm", "matplotlib"}
# Core packages still imported inside functions: matplotlib is loaded only when figures are drawn.
LAZY_CORE_PACKAGES = {"matplotlib"}


def _root(statement: str) -> str:
    node = ast.parse(statement).body[0]
    name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
    return (name or "").split(".")[0]


def _needs_optional_package(module: str) -> bool:
    path, _ = _modules()[module]
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            root = _root(ast.unparse(node))
            if root not in CORE_PACKAGES and root not in sys.stdlib_module_names and root != "pcmr":
                return True
    return False


def test_function_local_imports_only_for_optional_dependencies():
    """A function-local import loads an optional package (or a pcmr module that needs one), or a lazily
    loaded core package; every other import sits at the top of its module."""
    _, _, local = import_graph()
    known = set(_modules())
    bad = []
    for module, line, statement in local:
        root = _root(statement)
        if root in ("pcmr", ""):
            node = ast.parse(statement).body[0]
            targets = _targets(node, module, _modules()[module][1], known)
            if targets and all(_needs_optional_package(t) for t in targets):
                continue
        elif root in LAZY_CORE_PACKAGES or (root not in CORE_PACKAGES and root not in sys.stdlib_module_names):
            continue
        bad.append(f"{module}:{line}: {statement}")
    assert not bad, f"function-local imports that belong at the top ({len(bad)} of {len(local)}):\n" + "\n".join(bad)


def test_cli_modules_import_no_other_cli_module():
    """A command's module is not a library: what two commands share lives in the library or in
    ``pcmr.train`` / ``pcmr.study``. Only ``pcmr.cli`` itself (the dispatcher) loads the commands."""
    _, every, _ = import_graph()
    for module, targets in every.items():
        if module.startswith("pcmr.cli."):
            others = sorted(t for t in targets if t.startswith("pcmr.cli") and t != module)
            assert not others, f"{module} imports {others}"


def _calls(module_path: Path, names: set[str]) -> list[int]:
    """Lines of ``module_path`` calling ``os.<name>`` for a name in ``names``."""
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "os"]


def _renames(module_path: Path) -> list[int]:
    """Lines of ``module_path`` that rename a file: ``os.replace`` / ``os.rename`` / ``os.renames``,
    ``shutil.move``, and ``Path.replace`` / ``Path.rename`` (a ``.replace`` or ``.rename`` call with
    one positional argument and no keywords: ``str.replace`` takes two, ``dataclasses.replace``
    keywords)."""
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    lines = _calls(module_path, {"replace", "rename", "renames"})
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if node.func.attr == "move" and isinstance(owner, ast.Name) and owner.id == "shutil":
            lines.append(node.lineno)
        elif (node.func.attr in ("replace", "rename") and len(node.args) == 1 and not node.keywords
              and not (isinstance(owner, ast.Name) and owner.id in ("os", "dataclasses"))):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_rename_detection_sees_every_form(tmp_path):
    module = tmp_path / "sample.py"
    module.write_text("import os, shutil, dataclasses\nfrom pathlib import Path\n"
                      "os.replace('a', 'b')\nshutil.move('a', 'b')\nPath('a').replace('b')\n"
                      "Path('a').rename(Path('b'))\n'text'.replace('a', 'b')\ndataclasses.replace(x, y=1)\n")
    assert _renames(module) == [3, 4, 5, 6]


def test_every_rename_into_place_goes_through_pcmr_atomic():
    """docs/architecture.md: every rename into place is pcmr.atomic's ``move_into_place``: no other
    module renames files itself (``os.replace``, ``Path.replace`` / ``rename``, ``shutil.move``)."""
    offenders = {name: lines for name, (path, _) in _modules().items() if name != "pcmr.atomic"
                 for lines in [_renames(path)] if lines}
    assert not offenders, f"renames outside pcmr.atomic: {offenders}"


def test_dir_lists_the_lazily_loaded_subpackages():
    import pcmr

    listed = dir(pcmr)
    for name in ("similarity", "metrics", "evaluation", "search", "report", "hub", "load", "Model", "create_model",
                 "Gaussian", "__version__"):
        assert name in listed, name


def test_every_configuration_error_comes_from_build_dataclass():
    """docs/architecture.md: one unknown-key and wrong-type error path. The readers of run configs,
    study files, claims, shapes options and dataset settings all call build_dataclass."""
    readers = ("pcmr.train.config", "pcmr.study.spec", "pcmr.study.claims", "pcmr.data.shapes.config",
               "pcmr.data.errors", "pcmr.models.config")
    modules = _modules()
    for name in readers:
        tree = ast.parse(modules[name][0].read_text(encoding="utf-8"))
        called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Name)}
        assert "build_dataclass" in called, f"{name} reads its configuration without build_dataclass"


#: modules that write a file without pcmr.atomic, and why each write is safe (docs/architecture.md, Files)
DIRECT_WRITERS = {
    "pcmr.train.loggers": "log.jsonl is appended one whole line per event; a torn last line is dropped on read",
    "pcmr.train.lock": "the lock file is written under a temporary name and hard-linked or moved into place; "
                       "the guard is an empty side file",
    "pcmr.train.checkpoint": "files inside a temporary checkpoint folder, which is renamed into place whole",
    "pcmr.search.store": "a store's rows, marked complete by its meta file written last (atomically)",
    "pcmr.study.runner": "each run's child process log, appended",
}


def _direct_writes(module_path: Path) -> list[int]:
    """Lines of ``module_path`` that write a file directly: ``open(..., mode)`` with a mode that writes
    (``w``, ``a``, ``x``, ``+``), ``Path.write_text`` / ``write_bytes``."""
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("write_text", "write_bytes"):
            lines.append(node.lineno)
        elif isinstance(func, ast.Name) and func.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+"):
                lines.append(node.lineno)
    return lines


def test_every_file_write_goes_through_pcmr_atomic_or_is_listed():
    """docs/architecture.md: files are written through pcmr.atomic; the few direct writes are listed
    in DIRECT_WRITERS with the reason each survives a kill -9."""
    writers = {name for name, (path, _) in _modules().items() if name != "pcmr.atomic" and _direct_writes(path)}
    assert writers == set(DIRECT_WRITERS), (f"direct writes outside pcmr.atomic: {sorted(writers - set(DIRECT_WRITERS))}; "
                                            f"listed but gone: {sorted(set(DIRECT_WRITERS) - writers)}")


#: a parameter of this name, wherever a signature or config field gives it a default, takes this constant
PROTOCOL_DEFAULTS = {"ks": "DEFAULT_KS", "hubness_ks": "HUBNESS_KS", "lambda_grid": "DEFAULT_LAMBDA_GRID",
                     "uncertainty_measure": "DEFAULT_UNCERTAINTY_MEASURE", "similarities": "DEFAULT_SIMILARITIES",
                     "rerankers": "DEFAULT_RERANKERS", "csls_k": "CSLS_K", "select_on": "DEFAULT_SELECT_ON"}
#: (module, function or class, parameter) whose parameter of that name means something else
OTHER_MEANING = {("pcmr.metrics.hubness", "hubness_sum", "ks"),  # the hubness ks
                 ("pcmr.metrics.scan", "scan", "hubness_ks"),  # none unless asked (the driver passes them)
                 ("pcmr.inference.rerankers", "Matching", "lambda_grid")}  # the grid of a matching without one


def _default_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Lambda):  # default_factory=lambda
        return _default_name(node.args[0].body)
    if isinstance(node, ast.Call) and node.keywords:
        factory = next((k.value for k in node.keywords if k.arg == "default_factory"), None)
        if factory is not None:
            return _default_name(factory)
    if isinstance(node, ast.Lambda):
        return _default_name(node.body)
    if isinstance(node, ast.Call) and len(node.args) == 1:  # list(DEFAULT_...), tuple(...)
        return _default_name(node.args[0])
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ast.unparse(node)


def test_each_protocol_default_is_defined_once():
    """docs/architecture.md (Where defaults live): every signature and config field that defaults a
    protocol parameter (Ks, hubness Ks, the lambda grid, the uncertainty measure, the evaluated
    similarities and re-rankers, CSLS's k, the selection metric) takes the one constant."""
    offenders = []
    for module, (path, _) in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pairs: list[tuple[str, ast.expr]] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = node.args.posonlyargs + node.args.args
                pairs += [(a.arg, d) for a, d in zip(positional[len(positional) - len(node.args.defaults):],
                                                      node.args.defaults)]
                pairs += [(a.arg, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
            elif isinstance(node, ast.ClassDef):
                pairs += [(item.target.id, item.value) for item in node.body if isinstance(item, ast.AnnAssign)
                          and isinstance(item.target, ast.Name) and item.value is not None]
            else:
                continue
            for name, default in pairs:
                if name not in PROTOCOL_DEFAULTS or (module, node.name, name) in OTHER_MEANING:
                    continue
                if isinstance(default, ast.Constant) and default.value is None:
                    continue
                if _default_name(default) != PROTOCOL_DEFAULTS[name]:
                    offenders.append(f"{module}.{node.name}({name}={ast.unparse(default)})")
    assert offenders == [], offenders


def test_test_helpers_are_fixtures_not_imports():
    """Shared test helpers are conftest fixtures: no test module imports a conftest by name (pytest
    hands its fixtures to every test below it)."""
    tests = Path(__file__).resolve().parent
    local = {"conftest"}
    offenders = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(tests)}:{node.lineno}" for name in names if name.split(".")[0] in local]
    assert offenders == [], offenders


def test_the_default_uncertainty_measure_is_spelled_once():
    """docs/architecture.md (Where defaults live): the measure's name appears as a string only where
    ``pcmr.gaussian`` defines the default and its table of measures."""
    spelled = sorted(name for name, (path, _) in _modules().items()
                     for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                     if isinstance(node, ast.Constant) and node.value == "log_det")
    assert spelled == ["pcmr.gaussian", "pcmr.gaussian"], spelled
