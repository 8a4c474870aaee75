"""Read a checkpoint of PCME's official release (github.com/naver-ai/pcme) into a pcmr model.

The release saves one ``torch.save`` dict per checkpoint (``engine/base.py``, ``save_models``):
``model`` (the ``PCME`` module's state dict), ``criterion`` (the loss's ``shift`` and
``negative_scale``), ``optimizer``, ``lr_scheduler``, ``config`` (plain dicts), ``word2idx`` and
``metadata``. It is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and
containers only, never code. Nothing is dropped silently: an entry pcmr does not map (a model
weight, a criterion entry, a top-level key other than those above) is an error naming it, and a
weight of the wrong shape is reported under the release's name. The optimiser and scheduler states
are not converted. Checkpoints of mixed-precision runs (``train.use_fp16``: apex O2 saves float16
weights) become float32 models.

pcmr builds the release's architecture exactly (PCME Fig. 3, eq. 4; ``docs/models.md``), with
one part left out: the ResNet image backbone (torchvision), which pcmr does not ship. The converted
image tower reads the ResNet's last ``C x 7 x 7`` feature grid as precomputed local features
``[B, 49, C]`` (``image_encoder.kind: local_features``); the backbone's own weights are returned
separately (``cnn.*`` names, as in the release) so they can be kept next to the model.

Names, release -> pcmr (``img_enc`` -> ``image_tower``, ``txt_enc`` -> ``caption_tower``):

- ``fc`` (image) -> ``mean_head.fc``;
- ``pie_net.{attention.w_1, attention.w_2, fc, layer_norm}`` ->
  ``mean_head.{attention.w1, attention.w2, fc_attn, layer_norm}``;
- ``uncertain_net.{attention.w_1, attention.w_2, fc}`` ->
  ``variance_head.{attention.w1, attention.w2, fc_attn}``; image ``uncertain_net.fc2`` ->
  ``variance_head.fc``; caption ``uncertain_net.rnn`` -> ``variance_head.gru``;
- ``txt_enc.embed`` -> ``caption_tower.encoder.backbone.embedding`` (rows reordered to pcmr's
  vocabulary order, special tokens first), ``txt_enc.rnn`` -> ``caption_tower.encoder.backbone.gru``.

The release's heads predict log sigma; pcmr's converted heads keep that output
(``variance_output: logsigma``) and report ``logvar = 2 log sigma``. The release's match logit
``-a d + b`` enters a softmax over ``(l, -l)``, i.e. ``sigmoid(2 l)``: pcmr's ``match_prob`` takes
``a = 2 negative_scale``, ``b = 2 shift``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pcmr.models.config import ModelConfig, config_from_dict
from pcmr.models.factory import build_model
from pcmr.models.model import RetrievalModel

__all__ = [
    "CHECKPOINT_KEYS",
    "CRITERION_KEYS",
    "ConvertedRelease",
    "ReleaseCheckpointError",
    "SPECIAL_TOKENS",
    "convert_pcme_release",
    "image_uncertainty_state",
    "pienet_state",
    "release_model_config",
    "text_uncertainty_state",
]

# pcmr's vocabulary puts these first, in this order (pcmr.data.text)
SPECIAL_TOKENS = ("<pad>", "<unk>", "<start>", "<end>")

_ATTENTION = {"attention.w_1.weight": "attention.w1.weight", "attention.w_2.weight": "attention.w2.weight"}
_PIENET = {**_ATTENTION, "fc.weight": "fc_attn.weight", "fc.bias": "fc_attn.bias",
           "layer_norm.weight": "layer_norm.weight", "layer_norm.bias": "layer_norm.bias"}
_IMAGE_UNCERTAINTY = {**_ATTENTION, "fc.weight": "fc_attn.weight", "fc.bias": "fc_attn.bias",
                      "fc2.weight": "fc.weight", "fc2.bias": "fc.bias"}
_GRU = tuple(f"{kind}_{part}_l0{suffix}" for kind in ("weight", "bias") for part in ("ih", "hh")
             for suffix in ("", "_reverse"))
_TEXT_UNCERTAINTY = {**_ATTENTION, "fc.weight": "fc_attn.weight", "fc.bias": "fc_attn.bias",
                     **{f"rnn.{name}": f"gru.{name}" for name in _GRU}}


class ReleaseCheckpointError(ValueError):
    """A file that is not a PCME release checkpoint pcmr can convert; the message says why."""


def _rename(state: Mapping[str, Tensor], table: Mapping[str, str], source: str, target: str,
            where: str) -> dict[str, Tensor]:
    missing = [f"{source}{name}" for name in table if f"{source}{name}" not in state]
    if missing:
        raise ReleaseCheckpointError(f"{where}: the release's state dict lacks {', '.join(missing[:4])}")
    return {f"{target}{new}": state[f"{source}{old}"] for old, new in table.items()}


def pienet_state(state: Mapping[str, Tensor], prefix: str = "", target: str = "",
                 where: str = "state dict") -> dict[str, Tensor]:
    """The release's ``PIENet`` weights (under ``prefix``) as a pcmr ``PCMEMeanHead``'s (under ``target``)."""
    return _rename(state, _PIENET, prefix, target, where)


def image_uncertainty_state(state: Mapping[str, Tensor], prefix: str = "", target: str = "",
                            where: str = "state dict") -> dict[str, Tensor]:
    """The release's ``UncertaintyModuleImage`` weights as a pcmr image ``PCMEVarianceHead``'s."""
    return _rename(state, _IMAGE_UNCERTAINTY, prefix, target, where)


def text_uncertainty_state(state: Mapping[str, Tensor], prefix: str = "", target: str = "",
                           where: str = "state dict") -> dict[str, Tensor]:
    """The release's ``UncertaintyModuleText`` weights as a pcmr word_gru ``PCMEVarianceHead``'s."""
    return _rename(state, _TEXT_UNCERTAINTY, prefix, target, where)


def release_model_config(embed_dim: int, feature_dim: int, word_dim: int, vocab_size: int) -> ModelConfig:
    """The pcmr config of the release's PCME (attention and probabilistic heads on both sides)."""
    head = {"kind": "pcme", "probabilistic": True, "attention_bias": False, "variance_output": "logsigma"}
    return config_from_dict({
        "name": "pcme_release",
        "description": "PCME (Chun et al., CVPR 2021) converted from the authors' release checkpoint",
        "embed_dim": embed_dim,
        "vocab_size": vocab_size,
        "image_encoder": {"kind": "local_features", "feature_dim": feature_dim},
        "text_encoder": {"kind": "gru", "word_dim": word_dim, "hidden_dim": embed_dim, "bidirectional": True,
                         "bidirectional_merge": "concat", "sentence_feature": "last_output",
                         "local_features": "word_embeddings"},
        "image_head": head,
        "caption_head": {**head, "project_pooled": False, "variance_source": "word_gru"},
    })


@dataclass(frozen=True)
class ConvertedRelease:
    """A converted release checkpoint.

    Attributes:
        model: the pcmr model (eval mode), outputs equal to the release's for the same grid features.
        words: pcmr's vocabulary, id order (the special tokens first, then the release's order).
        similarity_options: ``{"match_prob": {"a": ..., "b": ...}}`` from the release's criterion.
        backbone: the release's image backbone weights (``cnn.*``), not part of the pcmr model.
        release_config: the release's own config dict, kept for the record.
    """

    model: RetrievalModel
    words: list[str]
    similarity_options: dict[str, dict[str, float]]
    backbone: dict[str, Tensor]
    release_config: dict[str, Any]


def _require(checkpoint: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = checkpoint.get(key)
    if not isinstance(value, kind):
        raise ReleaseCheckpointError(
            f"{where}: expected the release's checkpoint dict with a {kind.__name__} under {key!r} "
            f"(keys: model, criterion, config, word2idx), got {type(value).__name__}"
        )
    return value


def _words(word2idx: Mapping[str, Any], where: str) -> tuple[list[str], list[int]]:
    """pcmr's word order and, for each pcmr id, the release's row of the embedding."""
    for word, index in word2idx.items():
        if not isinstance(word, str) or isinstance(index, bool) or not isinstance(index, int):
            raise ReleaseCheckpointError(f"{where}: word2idx[{word!r}] is {index!r}; expected str words mapped to "
                                         f"int ids")
    by_id = sorted(word2idx.items(), key=lambda item: int(item[1]))
    if [int(i) for _, i in by_id] != list(range(len(by_id))):
        raise ReleaseCheckpointError(f"{where}: word2idx ids must be 0 .. N-1 without gaps")
    missing = [token for token in SPECIAL_TOKENS if token not in word2idx]
    if missing:
        raise ReleaseCheckpointError(f"{where}: word2idx lacks the special token(s) {missing}")
    words = list(SPECIAL_TOKENS) + [word for word, _ in by_id if word not in SPECIAL_TOKENS]
    return words, [int(word2idx[word]) for word in words]


#: the top-level entries of a release checkpoint (``engine/base.py: save_models``); the optimiser,
#: scheduler and metadata are read by the release's training loop only and are not converted
CHECKPOINT_KEYS = ("model", "criterion", "optimizer", "lr_scheduler", "config", "word2idx", "metadata")
#: the release's criterion state (``criterions/probemb.py``: the match logit's shift and scale)
CRITERION_KEYS = ("shift", "negative_scale")
#: half-precision weights (apex O2 training) become float32: the converted model runs in float32
_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def _release_names() -> dict[str, str]:
    """pcmr parameter name -> the release's name, for every converted parameter."""
    names = {
        "image_tower.mean_head.fc.weight": "img_enc.fc.weight",
        "image_tower.mean_head.fc.bias": "img_enc.fc.bias",
        "caption_tower.encoder.backbone.embedding.weight": "txt_enc.embed.weight",
        **{f"caption_tower.encoder.backbone.gru.{name}": f"txt_enc.rnn.{name}" for name in _GRU},
    }
    for table, source, target in (
        (_PIENET, "img_enc.pie_net.", "image_tower.mean_head."),
        (_PIENET, "txt_enc.pie_net.", "caption_tower.mean_head."),
        (_IMAGE_UNCERTAINTY, "img_enc.uncertain_net.", "image_tower.variance_head."),
        (_TEXT_UNCERTAINTY, "txt_enc.uncertain_net.", "caption_tower.variance_head."),
    ):
        names.update({f"{target}{new}": f"{source}{old}" for old, new in table.items()})
    return names


def _tensor(state: Mapping[str, Any], key: str, rank: int, where: str, what: str = "model state dict") -> Tensor:
    """``state[key]``, a tensor of ``rank`` dimensions, or a :class:`ReleaseCheckpointError` naming the key."""
    value = state.get(key)
    if not isinstance(value, Tensor) or value.dim() != rank:
        shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
        raise ReleaseCheckpointError(f"{where}: {what} entry {key!r} is {shape}; expected a tensor of "
                                     f"{rank} dimension{'s' if rank != 1 else ''}")
    return value


def _refuse_unknown(keys: Any, known: Any, what: str, where: str) -> None:
    unknown = [str(key) for key in keys if key not in known]
    if unknown:
        raise ReleaseCheckpointError(
            f"{where}: {what} has entries pcmr does not convert: {', '.join(unknown[:6])}"
            f"{' ...' if len(unknown) > 6 else ''} (a different release version or a modified model; "
            f"pcmr converts the PCME of github.com/naver-ai/pcme at commit 4947684 and refuses to drop weights)"
        )


def _unreadable(where: str, error: BaseException) -> str:
    """One line for a file torch cannot read as a weights-only checkpoint (torch's own message advises
    loading with ``weights_only=False``, which would run the file's code: never done here)."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(error))
    if found:
        return (f"{where} holds a Python object ({found.group(1)}) besides tensors, numbers and strings; pcmr reads "
                f"checkpoints without running code, so expected the .pth written by the release's save_models")
    return f"{where} is not a torch checkpoint; expected the .pth written by the release's save_models"


def convert_pcme_release(path: str | Path) -> ConvertedRelease:
    """Convert the release checkpoint at ``path`` (a ``.pth`` written by its ``save_models``).

    Every entry is accounted for: a model weight pcmr does not map, a criterion entry other than
    ``shift`` / ``negative_scale`` or an unknown top-level entry is a :class:`ReleaseCheckpointError`
    naming it, and so is a weight whose shape does not fit the dimensions read from
    ``img_enc.fc.weight`` and ``txt_enc.embed.weight`` (named as the release names it). Half-precision
    weights (the release's ``use_fp16``: apex O2 casts every weight but BatchNorm's to float16 before
    ``save_models``) are converted to float32; other float types are kept.
    """
    path = Path(path)
    where = f"PCME release checkpoint {str(path)!r}"
    if not path.is_file():
        raise FileNotFoundError(f"{where} does not exist")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of files it then refuses
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a weights-only load refuses anything that would run code
        raise ReleaseCheckpointError(_unreadable(where, error)) from None
    if not isinstance(checkpoint, dict):
        raise ReleaseCheckpointError(f"{where}: expected a dict, got {type(checkpoint).__name__}")
    raw_state = _require(checkpoint, "model", dict, where)
    for key, value in raw_state.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise ReleaseCheckpointError(f"{where}: model state dict entry {key!r} is a {type(value).__name__}; "
                                         f"expected str names mapped to tensors")
    state = {k.replace("module.", ""): v for k, v in raw_state.items()}
    criterion = _require(checkpoint, "criterion", dict, where)
    release_config = _require(checkpoint, "config", dict, where)
    words, rows = _words(_require(checkpoint, "word2idx", dict, where), where)
    _refuse_unknown(checkpoint, CHECKPOINT_KEYS, "the checkpoint", where)
    _refuse_unknown(criterion, CRITERION_KEYS, "the criterion state", where)
    model_config = release_config.get("model", {})
    if not isinstance(model_config, dict):
        raise ReleaseCheckpointError(f"{where}: config.model is a {type(model_config).__name__}; expected a dict")
    for flag in ("img_attention", "txt_attention", "img_probemb", "txt_probemb"):
        if model_config.get(flag) is False:
            raise ReleaseCheckpointError(f"{where}: config.model.{flag} is false; pcmr converts the full "
                                         f"PCME (attention and uncertainty modules on both sides)")
    names = _release_names()
    missing = [name for name in names.values() if name not in state]
    if missing:
        raise ReleaseCheckpointError(f"{where}: the model state dict lacks {', '.join(missing[:4])}")
    _refuse_unknown([key for key in state if not key.startswith("img_enc.cnn.")], set(names.values()),
                    "the model state dict", where)
    embed_dim, feature_dim = _tensor(state, "img_enc.fc.weight", 2, where).shape
    vocab_size, word_dim = _tensor(state, "txt_enc.embed.weight", 2, where).shape
    if vocab_size != len(rows):
        raise ReleaseCheckpointError(f"{where}: {vocab_size} embedding rows but {len(rows)} words in word2idx")
    config = release_model_config(int(embed_dim), int(feature_dim), int(word_dim), int(vocab_size))
    dtype = state["img_enc.fc.weight"].dtype
    model = build_model(config).to(_UPCAST.get(dtype, dtype))  # the release's dtype; half -> float32
    reference = model.state_dict()
    for ours, theirs in names.items():
        if tuple(state[theirs].shape) != tuple(reference[ours].shape):
            raise ReleaseCheckpointError(
                f"{where}: {theirs} has shape {list(state[theirs].shape)}, expected {list(reference[ours].shape)} "
                f"for a PCME with embed_dim {embed_dim}, image feature size {feature_dim}, word_dim {word_dim} "
                f"and {vocab_size} words (read from img_enc.fc.weight and txt_enc.embed.weight)"
            )
    converted = {ours: state[theirs] for ours, theirs in names.items()}
    converted["caption_tower.encoder.backbone.embedding.weight"] = state["txt_enc.embed.weight"][rows]
    converted = {key: value.to(reference[key].dtype) for key, value in converted.items()}
    model.load_state_dict(converted, strict=True)
    model.eval()
    for key in CRITERION_KEYS:
        value = criterion.get(key)
        if not isinstance(value, Tensor) or value.numel() != 1:
            found = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ReleaseCheckpointError(f"{where}: criterion entry {key!r} is {found}; expected a tensor of one "
                                         f"value (the release's criterion state holds 'negative_scale' and 'shift')")
    scale, shift = criterion["negative_scale"], criterion["shift"]
    options = {"match_prob": {"a": 2.0 * float(scale.reshape(-1)[0]), "b": 2.0 * float(shift.reshape(-1)[0])}}
    backbone = {k[len("img_enc."):]: v.to(_UPCAST.get(v.dtype, v.dtype))
                for k, v in state.items() if k.startswith("img_enc.cnn.")}
    return ConvertedRelease(model, words, options, backbone, release_config)
