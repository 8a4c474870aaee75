"""Model registry and factory: named family configs, ``list_models()``, ``create_model()``.

The families are YAML files under ``pcmr/models/configs/`` (package data); ``list_models()``
is a scan of that folder. ``create_model(name_or_config, **overrides)`` resolves a config
(family name, config file path, :class:`ModelConfig` or plain dict), applies the overrides
(``None`` ignored; dotted keys such as ``"image_encoder.kind"`` allowed) and builds the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from torch import nn

from pcmr.models.config import (
    HeadConfig,
    ImageEncoderConfig,
    ModelConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config_file,
    text_hidden_dim,
)
from pcmr.models.heads import build_mean_head, build_variance_head
from pcmr.models.image_encoders import GlobalFeatureBackbone, LocalFeatureBackbone, SmallCNNBackbone
from pcmr.models.model import Encoder, RetrievalModel, Tower
from pcmr.models.pretrained import EfficientNetLite0Backbone, MiniLMBackbone
from pcmr.models.pvse import PointSetTower, PVSEHead, PVSEModel
from pcmr.models.text_encoders import GRUTextBackbone
from pcmr.models.vsrn import VSRNReasoning
from pcmr.suggest import unknown_name

__all__ = ["list_models", "get_model_config", "resolve_config", "create_model", "build_model"]

_SUFFIXES = (".yaml", ".yml", ".json")


def _family_files() -> dict[str, Any]:
    files = {}
    for entry in (resources.files("pcmr.models") / "configs").iterdir():
        name = entry.name
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                files[name[: -len(suffix)]] = entry
    return files


def list_models() -> list[str]:
    """Names of the built-in model families (sorted): pcme, pcme_mu_only, probvse, ..."""
    return sorted(_family_files())


def get_model_config(name: str) -> ModelConfig:
    """The :class:`ModelConfig` of the built-in family ``name``."""
    files = _family_files()
    if name not in files:
        raise ValueError(unknown_name("model", str(name), sorted(files)))
    with resources.as_file(files[name]) as path:
        return config_from_dict(load_config_file(path))


def resolve_config(
    name_or_config: str | Path | ModelConfig | Mapping[str, Any], **overrides: Any
) -> ModelConfig:
    """Resolve a family name, a YAML/JSON file path, a :class:`ModelConfig` or a plain dict,
    then apply ``overrides`` (keyword arguments; see :func:`pcmr.config.apply_overrides`)."""
    if isinstance(name_or_config, ModelConfig):
        data = config_to_dict(name_or_config)
    elif isinstance(name_or_config, Mapping):
        data = dict(name_or_config)
    elif isinstance(name_or_config, (str, Path)):
        text = str(name_or_config)
        if isinstance(name_or_config, str) and text in _family_files():
            data = config_to_dict(get_model_config(text))
        elif text.endswith(_SUFFIXES) or Path(text).is_file():
            data = load_config_file(text)
        else:
            raise ValueError(f"{unknown_name('model', text, list_models())}; or pass a .yaml/.json config "
                             f"file, a ModelConfig or a dict")
    else:
        raise TypeError(
            f"create_model expects a model name, a config file path, a ModelConfig or a dict, "
            f"got {type(name_or_config).__name__}"
        )
    return config_from_dict(apply_overrides(data, overrides, schema=ModelConfig, label="model config"))


# --------------------------------------------------------------------------- building
def _image_backbone(config: ImageEncoderConfig, load_pretrained: bool) -> nn.Module:
    if config.kind == "global_features":
        return GlobalFeatureBackbone(config.feature_dim)
    if config.kind == "local_features":
        return LocalFeatureBackbone(config.feature_dim)
    if config.kind == "cnn":
        return SmallCNNBackbone(config.cnn_channels)

    return EfficientNetLite0Backbone(
        config.pretrained and load_pretrained, config.finetune, config.input_size
    )


def _image_refine(config: ImageEncoderConfig, in_dim: int) -> nn.Module | None:
    if config.reasoning == "vsrn":
        if config.kind == "global_features":
            raise ValueError(
                "image_encoder.reasoning 'vsrn' needs region features; image_encoder.kind 'global_features' "
                "has a single region (use local_features, cnn or efficientnet_lite0)"
            )
        return VSRNReasoning(in_dim, config.reasoning_dim, config.reasoning_layers)
    return None


def _text_backbone(config: ModelConfig) -> nn.Module:
    text = config.text_encoder
    if text.kind == "gru":
        return GRUTextBackbone(
            config.vocab_size, text.word_dim, text_hidden_dim(config), text.num_layers, text.bidirectional,
            text.bidirectional_merge, text.sentence_feature, text.local_features,
        )

    return MiniLMBackbone(text.finetune, text.max_length)


def _size(module: nn.Module, name: str, default: int | None = None) -> int:
    """A feature size an encoder part declares (``out_dim``, ``local_dim``), else ``default``."""
    value: Any = getattr(module, name, default)
    return int(value)


def _tower(
    make_backbone: Callable[[], nn.Module],
    make_refine: Callable[[int], nn.Module | None],
    head: HeadConfig,
    embed_dim: int,
    sentence_feature: str = "final_state",
) -> Tower:
    backbone = make_backbone()
    backbone_dim = _size(backbone, "out_dim")
    refine = make_refine(backbone_dim)
    out_dim = _size(refine, "out_dim") if refine is not None else backbone_dim
    encoder = Encoder(backbone, refine, out_dim)
    local_dim = _size(refine if refine is not None else backbone, "local_dim", out_dim)
    if head.kind == "pvse":
        return PointSetTower(encoder, PVSEHead(out_dim, embed_dim, head.num_embeds, head.attention_hidden,
                                               local_dim, head.project_pooled, head.fc_init))
    mean_head = build_mean_head(head, out_dim, embed_dim, local_dim)
    if not head.probabilistic:
        return Tower(encoder, mean_head)
    variance_head = build_variance_head(head, out_dim, embed_dim, local_dim, sentence_feature)
    variance_encoder = None
    if head.variance_source == "duplicate":
        # ProbVSE §4.1: duplicate the trainable part of the encoder, no shared parameters.
        variance_backbone = make_backbone() if encoder.backbone_trainable else None
        variance_refine = make_refine(backbone_dim)
        if variance_backbone is not None or variance_refine is not None:
            variance_encoder = Encoder(variance_backbone, variance_refine, out_dim)
    return Tower(encoder, mean_head, variance_head, variance_encoder)


def build_model(config: ModelConfig, load_pretrained: bool = True) -> RetrievalModel:
    """Build the model described by a validated ``config``.

    ``load_pretrained=False`` skips reading pretrained weight files whose values will be
    overwritten anyway (``load_model``).
    """
    image_tower = _tower(
        lambda: _image_backbone(config.image_encoder, load_pretrained),
        lambda in_dim: _image_refine(config.image_encoder, in_dim),
        config.image_head,
        config.embed_dim,
    )
    caption_tower = _tower(
        lambda: _text_backbone(config), lambda in_dim: None, config.caption_head, config.embed_dim,
        config.text_encoder.sentence_feature,
    )
    model_class = PVSEModel if config.image_head.kind == "pvse" else RetrievalModel
    return model_class(config, image_tower, caption_tower)


def create_model(
    name_or_config: str | Path | ModelConfig | Mapping[str, Any], **overrides: Any
) -> RetrievalModel:
    """Create a model from a family name, a config file, a :class:`ModelConfig` or a dict.

    Args:
        name_or_config: one of :func:`list_models` (``"pcme"``, ``"probvse"``, ...), a path to a
            YAML/JSON config, a :class:`ModelConfig`, or a (partial) plain dict.
        **overrides: config fields to change. ``None`` values are ignored. Top-level keys
            (``embed_dim=64``, ``vocab_size=len(vocab)``), nested mappings
            (``image_encoder={"kind": "global_features", "feature_dim": 2048}``) or dotted keys
            (``**{"caption_head.covariance": "spherical_one_value"}``).

    Returns:
        A :class:`RetrievalModel` (train mode) whose ``config`` is the resolved config.

    Raises:
        ValueError: unknown model name or config key (the message lists the accepted ones), or a
            field with a wrong type/value.

    Example:
        >>> model = create_model("pcme", embed_dim=64, vocab_size=500)
        >>> out = model(batch)  # {"image": Gaussian, "caption": Gaussian}
    """
    return build_model(resolve_config(name_or_config, **overrides))
