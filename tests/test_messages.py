"""One style of "unknown name" message: a "did you mean" hint, the accepted names as plain text, and
YAML errors with their line and column."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pcmr.config import ConfigError, load_mapping
from pcmr.data import load_dataset
from pcmr.data.shapes.config import ShapesConfig
from pcmr.inference import get_reranker
from pcmr.models import create_model
from pcmr.similarity import get_similarity
from pcmr.suggest import closest, did_you_mean, unknown_name
from pcmr.train.loggers import check_loggers
from pcmr.train.recipes import find_recipe
from pcmr.train.state import TrainingProgress


def test_closest_and_hint():
    assert closest("cosin", ["cosine", "kl"]) == "cosine"
    assert closest("zzzz", ["cosine", "kl"]) is None
    assert did_you_mean("num_trian", ["num_train", "num_val"]) == " (did you mean 'num_train'?)"
    assert did_you_mean("banana", ["num_train"]) == ""


def test_unknown_name_is_plain_text():
    text = unknown_name("shapes config key", ["num_trian"], ["num_test", "num_train"])
    assert text == ("unknown shapes config key 'num_trian' (did you mean 'num_train'?); "
                    "expected one of: num_test, num_train")
    two = unknown_name("key", ["a1", "zzz"], ["a", "b"])
    assert two.startswith("unknown keys 'a1' (did you mean 'a'?), 'zzz'; expected one of: a, b")
    for message in (text, two):
        assert "[" not in message and "]" not in message


@pytest.mark.parametrize(
    ("call", "hint"),
    [
        (lambda: get_similarity("cosin"), "unknown similarity 'cosin' (did you mean 'cosine'?)"),
        (lambda: get_reranker("csl"), "unknown re-ranker 'csl' (did you mean 'csls'?)"),
        (lambda: find_recipe("pcmee"), "unknown recipe 'pcmee' (did you mean 'pcme'?)"),
        (lambda: ShapesConfig.from_dict({"num_trian": 3}), "unknown shapes config key 'num_trian' "
                                                           "(did you mean 'num_train'?); accepted keys: "),
        (lambda: load_dataset("shape", "test"), "unknown dataset 'shape' (did you mean 'shapes'?)"),
        (lambda: check_loggers(["jsnl"]), "unknown logger 'jsnl' (did you mean 'jsonl'?); expected one of: jsonl"),
        (lambda: create_model("pcmee"), "unknown model 'pcmee' (did you mean 'pcme'?)"),
        (lambda: TrainingProgress.from_dict({"epochs": 1}), "unknown key 'epochs' (did you mean 'epoch'?)"),
    ],
)
def test_typos_get_a_suggestion(call, hint):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert hint in message
    assert "['" not in message


SRC = Path(__file__).resolve().parents[1] / "src" / "pcmr"


def _message_start(node: ast.expr) -> str:
    """The literal text an exception message starts with ("" when it starts with a value)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return ""


def test_every_unknown_name_is_worded_by_unknown_name():
    """docs/architecture.md: unknown keys of a configuration are reported by build_dataclass
    (pcmr.config), every other unknown name by pcmr.suggest.unknown_name; no module words its own."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name in ("config.py", "suggest.py") and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                if _message_start(node.exc.args[0]).lower().startswith("unknown "):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == [], offenders


def test_yaml_error_names_line_and_column(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 0.1\n  epochs: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_mapping(path)
    message = str(info.value)
    assert f"config file {path} is not valid YAML at line 4, column 1:" in message
    bad_indent = tmp_path / "indent.yaml"
    bad_indent.write_text("a: 1\n b: 2\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML at line 2, column 3: mapping values are not allowed"):
        load_mapping(bad_indent)
    bad_json = tmp_path / "x.json"
    bad_json.write_text('{"a": 1,\n}')
    with pytest.raises(ConfigError, match=r"is not valid JSON at line 2, column 1"):
        load_mapping(bad_json)


def test_undecodable_query_image_names_the_file_once(tmp_path):
    from pcmr.data.images import FileImages

    path = tmp_path / "x.png"
    path.write_text("not an image")
    with pytest.raises(ValueError) as info:
        FileImages([str(path)], image_size=8, keys=["query image"]).load(0)
    message = str(info.value)
    assert message.startswith(f"{path}, query image: image failed to decode (not a format Pillow recognises)")
    assert message.count(str(path)) == 1


def test_study_file_yaml_error_names_line_and_column(tmp_path):
    from pcmr.study.spec import StudyError, load_study

    path = tmp_path / "study.yaml"
    path.write_text("name: s\nseeds: [0, 1\n")
    with pytest.raises(StudyError, match=rf"{path} is not valid YAML at line 3, column 1: "):
        load_study(path)
