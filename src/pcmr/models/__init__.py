"""pcmr.models: image/text encoders, probabilistic heads, the model families, factory, save/load.

Families (``list_models()``): pcme, pcme_mu_only (PCME, Chun et al. CVPR 2021), probvse,
probvsrn (ProbVSE, Pishdad et al.), gce, gie, gcie (GCIE), vsepp, vsepp_wide (deterministic
baselines). See docs/models.md.

Example:
    >>> import pcmr
    >>> model = pcmr.create_model("pcme", vocab_size=len(vocab))
    >>> out = model(batch)          # {"image": Gaussian [B_img, D], "caption": Gaussian [B_cap, D]}
    >>> pcmr.save_model(model, "run/model", extra_json={"vocabulary": vocab_dict})
    >>> model = pcmr.load_model("run/model")
"""

from pcmr.models.config import (
    HeadConfig,
    ImageEncoderConfig,
    ModelConfig,
    TextEncoderConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_config_file,
)
from pcmr.models.factory import build_model, create_model, get_model_config, list_models, resolve_config
from pcmr.models.features import EncodedFeatures
from pcmr.models.heads import (
    AttentionPool,
    LinearMeanHead,
    LinearVarianceHead,
    PCMEMeanHead,
    PCMEVarianceHead,
    bound_logvar,
)
from pcmr.models.image_encoders import GlobalFeatureBackbone, LocalFeatureBackbone, SmallCNNBackbone
from pcmr.models.model import Encoder, RetrievalModel, Tower, count_parameters
from pcmr.models.serialization import load_model, read_extra_json, save_model
from pcmr.models.text_encoders import GRUTextBackbone, load_word_vectors, read_word_vectors
from pcmr.models.vsrn import RegionGraphConvolution, VSRNReasoning

__all__ = [
    "AttentionPool",
    "EncodedFeatures",
    "Encoder",
    "GRUTextBackbone",
    "GlobalFeatureBackbone",
    "HeadConfig",
    "ImageEncoderConfig",
    "LinearMeanHead",
    "LinearVarianceHead",
    "LocalFeatureBackbone",
    "ModelConfig",
    "PCMEMeanHead",
    "PCMEVarianceHead",
    "RegionGraphConvolution",
    "RetrievalModel",
    "SmallCNNBackbone",
    "TextEncoderConfig",
    "Tower",
    "VSRNReasoning",
    "apply_overrides",
    "bound_logvar",
    "build_model",
    "config_from_dict",
    "config_to_dict",
    "count_parameters",
    "create_model",
    "get_model_config",
    "list_models",
    "load_config_file",
    "load_model",
    "load_word_vectors",
    "read_extra_json",
    "read_word_vectors",
    "resolve_config",
    "save_model",
]
