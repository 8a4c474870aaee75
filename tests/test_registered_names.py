"""Control flow never compares a registered name outside its registry (docs/architecture.md): what
differs between scores, re-rankers, datasets, models and losses is a property of the registered thing.

The scan reads every module of ``src/pcmr`` (ast) and fails on a comparison (``==``, ``!=``, ``in``,
``not in``) of a string literal that is a registered name (a key of one of the registries, or a kind of
encoder or head) in a module outside the package of every registry that holds the name.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pcmr.data import list_datasets
from pcmr.inference import list_rerankers
from pcmr.losses import list_losses
from pcmr.models import list_models
from pcmr.models.config import HEAD_KINDS, IMAGE_ENCODER_KINDS, TEXT_ENCODER_KINDS
from pcmr.similarity import list_similarities
from pcmr.train.recipes import list_recipes

SRC = Path(__file__).resolve().parents[1] / "src" / "pcmr"

#: each registry's names and the modules that are its home (a package folder or one module)
REGISTRIES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "similarity": (list_similarities(), ("similarity/",)),
    "loss": (list_losses(), ("losses/",)),
    "model": (list_models(), ("models/",)),
    "encoder or head kind": ([*TEXT_ENCODER_KINDS, *IMAGE_ENCODER_KINDS, *HEAD_KINDS], ("models/",)),
    "re-ranker": (list_rerankers(), ("inference/",)),
    "dataset": (list_datasets(), ("data/",)),
    "recipe": (list_recipes(), ("train/recipes.py", "recipes/")),
}

#: (module, name): comparisons with a string that is spelled like a registered name but names something else
ALLOWED = {
    ("encode/checks.py", "coco"): "an id kind of a split's info['image_id_kind'] (COCO image ids), not the dataset",
    ("train/config.py", "cosine"): "the cosine learning-rate schedule, not the score",
}


def _compared_strings(node: ast.Compare) -> list[str]:
    """The string literals that ``node`` compares with ``==``, ``!=``, ``in`` or ``not in``."""
    found: list[str] = []
    left = node.left
    for op, right in zip(node.ops, node.comparators):
        if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            for side in (left, right):
                elements = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        left = right
    return found


def name_comparisons(root: Path = SRC) -> list[str]:
    """``module:line: 'name' (registry)`` for every comparison of a registered name outside its home."""
    homes: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for registry, (names, home) in REGISTRIES.items():
        for name in names:
            homes.setdefault(name, []).append((registry, home))
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare):
                continue
            for name in _compared_strings(node):
                if name not in homes or (module, name) in ALLOWED:
                    continue
                if any(module.startswith(prefix) for _, home in homes[name] for prefix in home):
                    continue
                registries = ", ".join(registry for registry, _ in homes[name])
                problems.append(f"{module}:{node.lineno}: {name!r} ({registries})")
    return problems


def test_no_registered_name_is_compared_outside_its_registry():
    assert name_comparisons() == [], ("behaviour chosen by comparing a registered name; make it a property "
                                      "of the registered thing (docs/architecture.md)")


def test_the_scan_finds_a_comparison_of_a_registered_name(tmp_path):
    """The scan itself: a comparison with a score's name outside pcmr/similarity is reported, one inside
    it or with an unregistered string is not, and an allowed spelling stays allowed."""
    (tmp_path / "search").mkdir()
    (tmp_path / "similarity").mkdir()
    (tmp_path / "search" / "bad.py").write_text('def f(score):\n    return score == "cosine" or score in ("x", "kl")\n')
    (tmp_path / "similarity" / "own.py").write_text('def f(score):\n    return score == "cosine"\n')
    (tmp_path / "search" / "fine.py").write_text('def f(modality):\n    return modality != "image"\n')
    assert name_comparisons(tmp_path) == ["search/bad.py:2: 'cosine' (similarity)", "search/bad.py:2: 'kl' (similarity)"]
    assert set(ALLOWED) and all(reason for reason in ALLOWED.values())


def test_the_properties_that_replace_the_names():
    """What used to be read from a name: the encoder's word ids, the re-weighting's neighbourhood, the
    dataset's rendered images, the score's ANN vectors, the backend's exactness."""
    from types import SimpleNamespace

    from pcmr.data.registry import renders_images
    from pcmr.inference import get_reranker
    from pcmr.models.config import TextEncoderConfig
    from pcmr.search.ann import ANN_SCORES, vector_form
    from pcmr.search.compose import BACKENDS, get_backend
    from pcmr.search.presentation import word_vocabulary
    from pcmr.similarity import get_similarity

    assert [TextEncoderConfig(kind=k).reads_word_ids for k in TEXT_ENCODER_KINDS] == [k == "gru" for k in TEXT_ENCODER_KINDS]
    for kind in TEXT_ENCODER_KINDS:  # the search's word check and the hub agree on every encoder kind
        model = SimpleNamespace(config=SimpleNamespace(text_encoder=TextEncoderConfig(kind=kind)), vocabulary="vocab")
        assert (word_vocabulary(model) is not None) == TextEncoderConfig(kind=kind).reads_word_ids
    assert get_reranker("csls", csls_k=7).neighbourhood == get_reranker("csls+rgm", csls_k=7).neighbourhood == 7
    assert get_reranker("is").neighbourhood == get_reranker("nns").neighbourhood == 1
    assert [name for name in list_datasets() if renders_images(name)] == ["shapes"] and not renders_images("nope")
    assert ANN_SCORES == ("cosine", "l2", "wasserstein", "csd")
    assert all(get_similarity(name).ann_vectors == vector_form(name) for name in ANN_SCORES)
    assert [b for b in BACKENDS if get_backend(b).exact] == ["exact"]
    assert [get_backend(b).engine for b in BACKENDS] == [None, None, "faiss", "milvus"]
