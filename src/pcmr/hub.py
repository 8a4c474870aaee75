"""A trained model ready for raw input, saved and loaded in the Hugging Face layout.

:class:`Model` bundles the two-tower :class:`~pcmr.models.RetrievalModel` with what it needs to read
raw input: the training vocabulary (the tokenizer of the GRU text tower) and the image preprocessing
(the side the images were resized to). It encodes caption texts and images (file paths, Pillow
images or tensors) into :class:`pcmr.Gaussian` embeddings, and it is a ``huggingface_hub``
``ModelHubMixin``, so ``save_pretrained`` / ``from_pretrained`` / ``push_to_hub`` behave as in
open_clip or timm. A saved folder (or Hub repository) holds::

    config.json                the ModelConfig (pcmr.models.save_model)
    model.safetensors          every tensor of the state dict (no pickle)
    vocabulary.json            the tokenizer: pcmr.data.Vocabulary (GRU text towers)
    preprocessor_config.json   image input: pixels (image_size, ImageNet mean/std) or features
    similarity_options.json    trained score parameters, e.g. {"match_prob": {"a": .., "b": ..}}
    metrics.json               the run's metrics (validation, and test rows when it was evaluated)
    run_config.json            the resolved config of the run that trained it (its data, split and
                               evaluation defaults), when the model came from a run
    README.md                  a generated model card with those metrics

:func:`load` opens a run folder written by ``pcmr train`` (``RUN/``), a model folder inside it
(``RUN/model``) or a folder written by :meth:`Model.save_pretrained`; every way of opening a trained
model (``pcmr evaluate``, ``pcmr search --build``, ``pcmr demo``, the study) goes through it.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import ModelCard, ModelHubMixin, snapshot_download
from torch import Tensor, nn

from pcmr.atomic import atomic_write_text, repair_folder, write_folder
from pcmr.data import Vocabulary
from pcmr.device import resolve_device
from pcmr.encode.inputs import ENCODE_BATCH_SIZE, ImageInput, encode_image_inputs, encode_texts, model_device
from pcmr.finite import check_finite_tensors
from pcmr.gaussian import Gaussian
from pcmr.model_files import (
    MAX_IMAGE_SIDE,
    METRICS_FILE,
    MODEL_CARD,
    PREPROCESSOR_FILE,
    RUN_CONFIG_FILE,
    RUN_CONFIG_YAML,
    RUN_VOCAB_FILE,
    SIMILARITY_OPTIONS_FILE,
    VOCABULARY_FILE,
    check_image_side,
    check_model_vocabulary,
    companion,
    metrics_markdown,
    not_model_files,
    preprocessor_config,
    preprocessor_transform,
    read_json_file,
    read_run_config,
    read_similarity_options,
    run_metrics,
)
from pcmr.models.config import ModelConfig
from pcmr.models.model import RetrievalModel
from pcmr.models.serialization import WEIGHTS_FILE, load_model, save_model

__all__ = ["MAX_IMAGE_SIDE", "Model", "check_image_side", "load", "preprocessor_config", "read_similarity_options",
           "trained_similarity", "VOCABULARY_FILE", "PREPROCESSOR_FILE", "SIMILARITY_OPTIONS_FILE", "METRICS_FILE",
           "RUN_CONFIG_FILE", "RUN_CONFIG_YAML", "RUN_VOCAB_FILE"]


class Model(nn.Module, ModelHubMixin, library_name="pcmr", tags=["cross-modal-retrieval", "probabilistic-embeddings"],
            model_card_template=MODEL_CARD):
    """A trained two-tower model with its tokenizer and image preprocessing (open it with :func:`load`).

    Args:
        network: the :class:`~pcmr.models.RetrievalModel` (``pcmr.create_model`` / ``load_model``).
        vocabulary: the training vocabulary (needed by GRU text towers; None for MiniLM).
        image_size: side of the square pixel images the model was trained on; None when it reads
            precomputed features (then ``encode_image`` takes feature tensors only).
        image_resize, resize_size: the rest of its test-time image transform (:attr:`image_transform`).
        similarity_options: trained score parameters, e.g. ``{"match_prob": {"a": 12.0, "b": 4.0}}``.
        metrics: ``{"validation": {...}, "test": {"source", "markdown"}}`` for the model card.

    Attributes:
        network, vocabulary, similarity_options, metrics: as given.
        run_config: the resolved config of the run that trained the model, as a plain mapping (its
            ``data``, ``train`` and ``eval`` sections give the defaults of ``pcmr evaluate`` and
            ``pcmr search``), or None; set by :func:`load` and saved by :meth:`save_pretrained`.
        source: the model folder it was loaded from (None when built in memory).
        run_dir: the run folder when the model was loaded from one (``RUN`` or ``RUN/model``), else None.
    """

    def __init__(self, network: RetrievalModel, vocabulary: Vocabulary | None = None, image_size: int | None = None,
                 similarity_options: dict[str, dict[str, Any]] | None = None,
                 metrics: dict[str, Any] | None = None, *, image_resize: str = "square",
                 resize_size: int | None = None) -> None:
        super().__init__()
        if not isinstance(network, RetrievalModel):
            raise TypeError(f"network must be a model made by pcmr.create_model, got {type(network).__name__}")
        if vocabulary is None and network.config.text_encoder.reads_word_ids:
            raise ValueError("a GRU text tower needs its training vocabulary (vocabulary=Vocabulary.load(...))")
        self.network = network
        self.vocabulary = vocabulary
        self._image_size: int | None = None
        self._image_transform: dict[str, Any] = {"image_resize": "square", "resize_size": None}
        self.set_image_transform(image_size, image_resize, resize_size)
        self.similarity_options = dict(similarity_options or {})
        self.metrics = dict(metrics or {})
        self.run_config: dict[str, Any] | None = None
        self.source: Path | None = None
        self.run_dir: Path | None = None
        self._card_model_id: str | None = None

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> ModelConfig:
        """The network's :class:`~pcmr.models.ModelConfig`."""
        return self.network.config

    @property
    def embed_dim(self) -> int:
        """The joint embedding size ``D``."""
        return self.network.embed_dim

    @property
    def device(self) -> torch.device:
        """The device of the parameters (inputs are moved there; move the model with ``.to``)."""
        return model_device(self.network)

    @property
    def image_size(self) -> int | None:
        """Side of the pixel images the model was trained on (None: it reads precomputed features)."""
        return self._image_size

    @property
    def image_transform(self) -> dict[str, Any] | None:
        """The test-time transform of image files and Pillow images: ``{"image_size", "image_resize",
        "resize_size"}`` (``image_resize``: ``square``, or ``center_crop``: Resize ``resize_size`` + CenterCrop
        ``image_size``), stored with the model (its ``preprocessor_config.json``, written by the trainer and by
        :meth:`save_pretrained`); None for a model that reads precomputed features (or a folder that
        records no preprocessing)."""
        size = self.image_size
        if size is None:
            return None
        return {"image_size": size, **self._image_transform}

    def set_image_transform(self, image_size: int | None, image_resize: str = "square",
                            resize_size: int | None = None) -> None:
        """Set the test-time image transform (see :attr:`image_transform`; None: features)."""
        if image_resize not in ("square", "center_crop"):
            raise ValueError(f"image_resize must be 'square' or 'center_crop', got {image_resize!r}")
        self._image_size = image_size
        self._image_transform = {"image_resize": image_resize,
                                 "resize_size": resize_size if image_resize == "center_crop" else None}

    def with_image_transform(self, image_size: int | None, image_resize: str = "square",
                             resize_size: int | None = None) -> Model:
        """This model with the test-time image transform given (see :attr:`image_transform`): the model
        itself when it already has that transform, else a shallow copy sharing the network and every other
        attribute (a gallery index keeps it, so an image query is brought to the size its gallery was
        encoded at)."""
        wanted = {"image_resize": image_resize, "resize_size": resize_size if image_resize == "center_crop" else None}
        if image_size == self._image_size and (image_size is None or wanted == self._image_transform):
            return self
        other = copy.copy(self)
        other.set_image_transform(image_size, image_resize, resize_size)
        return other

    @property
    def text_vocabulary(self) -> Vocabulary:
        """The vocabulary the text encoder's batches are built with: the training vocabulary, or an empty
        one for a text encoder that reads the texts themselves (MiniLM has no word ids)."""
        return self.vocabulary if self.vocabulary is not None else Vocabulary([])

    @property
    def similarity(self) -> str:
        """The score the model was trained with (the first of ``similarity_options``), else ``cosine``."""
        return next(iter(self.similarity_options), "cosine")

    # ------------------------------------------------------------------ encoding
    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The network's forward on a model-ready batch (``{"image", "caption"}`` Gaussians)."""
        return self.network(batch)

    def encode_text(self, texts: Sequence[str], *, batch_size: int = ENCODE_BATCH_SIZE,
                    progress: bool | None = None) -> Gaussian:
        """Caption texts -> ``Gaussian [len(texts), D]`` on the model's device (eval mode, no grad).

        Texts are tokenised with the training vocabulary (unknown words become ``<unk>``) and encoded
        ``batch_size`` at a time; ``progress`` draws a bar (None: on a terminal, for several batches).
        """
        if isinstance(texts, str):
            texts = [texts]
        return encode_texts(self.network, self.text_vocabulary, list(texts), batch_size=batch_size, progress=progress)

    def encode_image(self, images: ImageInput | Sequence[ImageInput] | Tensor, *,
                     batch_size: int = ENCODE_BATCH_SIZE, progress: bool | None = None) -> Gaussian:
        """Images -> ``Gaussian [N, D]`` on the model's device (eval mode, no grad).

        ``images``: one or a list of file paths or Pillow images (brought to :attr:`image_size` by the
        model's test-time transform, :attr:`image_transform`, and ImageNet-normalised), a list of ``[3, H, W]`` normalised pixel tensors, or one batch tensor
        ``[N, 3, H, W]`` (features ``[N, F]`` / ``[N, R, F]`` for feature models).
        """
        if self._image_size is None and not _reads_features(self.network) and _holds_files(images):
            raise ValueError(f"this model ({self.source or 'in memory'}) reads pixel images but stores no image "
                             f"preprocessing ({PREPROCESSOR_FILE}, written by pcmr train since it records the "
                             "model's image size); give it one with model.set_image_transform(IMAGE_SIZE) and "
                             "save it again with save_pretrained, or pass [3, H, W] pixel tensors")
        return encode_image_inputs(self.network, images, image_size=self._image_size, batch_size=batch_size,
                                   progress=progress,
                                   **self._image_transform)

    # ------------------------------------------------------------------ saving / loading
    def _save_pretrained(self, save_directory: Path) -> None:
        extra: dict[str, Any] = {"similarity_options": self.similarity_options, "metrics": self.metrics}
        if self.vocabulary is not None:
            extra["vocabulary"] = self.vocabulary.to_dict()
        size = self.image_size
        extra["preprocessor_config"] = preprocessor_config(size, **self._image_transform)
        if self.run_config is not None:
            extra[RUN_CONFIG_FILE] = self.run_config
        save_model(self.network, save_directory, extra_json=extra)
        card = self.generate_model_card(model_id=self._card_model_id or str(save_directory))
        atomic_write_text(save_directory / "README.md", str(card))

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> str | None:
        """Write the model in the Hugging Face layout (see the module docstring), all or nothing: the new
        folder is written beside ``save_directory`` and swapped in whole (:func:`pcmr.atomic.write_folder`),
        so an earlier export stays complete and loadable until the new one is, and a failed write (a full
        disk) raises one :class:`~pcmr.atomic.FolderWriteError` naming the file and saying that the previous
        folder is intact. A folder holding anything but a saved model's files is refused
        (``FileExistsError``), never replaced. ``push_to_hub=True, repo_id=...`` uploads it (needs network
        and a token). Returns the commit URL when pushed, else None."""
        directory = Path(save_directory)
        foreign = not_model_files(directory)
        if foreign:
            raise FileExistsError(f"{directory} holds files that are not part of a saved model ({foreign}); "
                                  "save_pretrained replaces the whole folder: choose a new or empty folder")
        previous = self._card_model_id  # set by push_to_hub, which saves into a temporary folder
        self._card_model_id = kwargs.get("repo_id") or previous or str(directory)
        pushed: list[str | None] = [None]

        def write(folder: Path) -> None:
            pushed[0] = super(Model, self).save_pretrained(folder, **kwargs)

        try:
            write_folder(directory, write)
            return pushed[0]
        finally:
            self._card_model_id = previous

    def save_files(self, directory: str | Path) -> None:
        """Write the files of a :meth:`save_pretrained` folder into the new folder ``directory`` as they
        are, without the swap: for a folder that is itself inside a folder written whole (a gallery
        index's ``model/``, written under :func:`pcmr.atomic.write_folder`)."""
        folder = Path(directory)
        previous = self._card_model_id
        self._card_model_id = previous or str(folder)
        try:
            super().save_pretrained(folder)
        finally:
            self._card_model_id = previous

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> str:
        """Upload the :meth:`save_pretrained` folder to the Hugging Face Hub repository ``repo_id``
        (``huggingface_hub``'s ``push_to_hub``: needs network access and a token with write access)."""
        self._card_model_id = repo_id
        try:
            return super().push_to_hub(repo_id, **kwargs)
        finally:
            self._card_model_id = None

    def generate_model_card(self, *args: Any, **kwargs: Any) -> ModelCard:
        """The README.md model card: family, embedding size, trained score and the run's metrics."""
        config = self.network.config
        description = (f"Family `{config.name}`: image encoder `{config.image_encoder.kind}`, text encoder "
                       f"`{config.text_encoder.kind}`; trained score `{self.similarity}`"
                       + (" with " + ", ".join(f"{key} = {value:.4g}" if isinstance(value, float) else f"{key} = {value}"
                                              for key, value in self.similarity_options[self.similarity].items())
                          if self.similarity_options.get(self.similarity) else "")
                       + ".")
        kwargs.setdefault("model_id", "PATH_OR_HUB_ID")
        trained = self.similarity_options.get(self.similarity) or {}
        arguments = ", ".join([json.dumps(self.similarity), "images", "captions",
                               *(f"{key}={value!r}" for key, value in trained.items())])
        return super().generate_model_card(*args, title=f"pcmr model: {config.name}", embed_dim=config.embed_dim,
                                           description=description, similarity=self.similarity,
                                           pairwise_arguments=arguments, metrics=metrics_markdown(self.metrics),
                                           **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *,
                        force_download: bool = False, token: str | bool | None = None,
                        cache_dir: str | Path | None = None, local_files_only: bool = False,
                        revision: str | None = None, map_location: str | torch.device = "cpu",
                        **model_kwargs: Any) -> Model:
        """Load a model from a local folder (written by :meth:`save_pretrained`, or ``RUN/model``) or a
        Hugging Face Hub repository id (downloaded with ``huggingface_hub.snapshot_download``; set
        ``HF_HUB_OFFLINE=1`` to use the local cache only). Returned in eval mode on ``map_location``.

        Raises:
            FileNotFoundError: the id is neither a local folder nor a downloadable repository.
        """
        return cls._from_pretrained(model_id=str(pretrained_model_name_or_path), revision=revision,
                                    cache_dir=cache_dir, force_download=force_download,
                                    local_files_only=local_files_only, token=token, map_location=map_location)

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision: str | None, cache_dir: str | Path | None,
                         force_download: bool, local_files_only: bool, token: str | bool | None,
                         map_location: str | torch.device = "cpu", **model_kwargs: Any) -> Model:
        repair_folder(model_id)  # a local export whose write was killed between its renames: put it back
        if os.path.isdir(model_id):
            return _load_folder(Path(model_id), map_location)
        try:
            folder = snapshot_download(repo_id=model_id, revision=revision, cache_dir=cache_dir,
                                       force_download=force_download, token=token, local_files_only=local_files_only)
        except Exception as error:  # the hub client raises many types (offline, not found, auth, invalid id)
            raise FileNotFoundError(f"{model_id!r} is neither a local folder nor a Hugging Face Hub model this machine "
                                    f"can download ({type(error).__name__}: {error})") from error
        return _load_folder(Path(folder), map_location)


def _load_folder(directory: Path, map_location: str | torch.device,
                 vocabulary: str | os.PathLike[str] | None = None) -> Model:
    """A model folder: ``RUN/model`` (the run's files beside it) or a save_pretrained folder; its weights are
    checked finite and its vocabulary checked to be the one it was trained with."""
    map_location = resolve_device(map_location, what="device")
    network = load_model(directory, map_location=map_location)
    check_finite_tensors(network.state_dict(), directory / WEIGHTS_FILE)
    in_run = (directory.parent / RUN_CONFIG_YAML).is_file()  # RUN/model: the run's files sit beside it
    vocab_path = companion(directory, VOCABULARY_FILE, RUN_VOCAB_FILE)
    if vocabulary is not None:
        vocab_path = Path(vocabulary)
        if not vocab_path.is_file():
            raise FileNotFoundError(f"vocabulary file {str(vocab_path)!r} does not exist; expected the vocab.json "
                                    "or vocabulary.json of the run that trained the model")
    vocab = Vocabulary.load(vocab_path) if vocab_path is not None else None
    if vocab is not None and vocab_path is not None:
        check_model_vocabulary(network, vocab, directory, vocab_path)
    elif network.config.text_encoder.reads_word_ids:
        raise FileNotFoundError(f"{str(directory)!r} has no vocabulary (looked for {VOCABULARY_FILE} in it and "
                                f"{RUN_VOCAB_FILE} beside it); pass the vocab.json of the run that trained it")
    options_path = companion(directory, SIMILARITY_OPTIONS_FILE)
    options = read_similarity_options(options_path) if options_path is not None else {}
    metrics: dict[str, Any] = {}
    if in_run:  # the run's own record is newer than the card written with the model (its evaluations)
        metrics = run_metrics(directory.parent)
    elif (directory / METRICS_FILE).is_file():
        metrics = read_json_file(directory / METRICS_FILE, "metrics")
    model = Model(network, vocab, similarity_options=options, metrics=metrics)
    model.source = directory
    if in_run:
        model.run_dir = directory.parent
        model.run_config = read_run_config(directory.parent / RUN_CONFIG_YAML)
    elif (directory / RUN_CONFIG_FILE).is_file():
        model.run_config = read_run_config(directory / RUN_CONFIG_FILE)
    preprocessor_path = directory / PREPROCESSOR_FILE
    if preprocessor_path.is_file():
        preprocessor = read_json_file(preprocessor_path, "preprocessor config")
        if not isinstance(preprocessor, dict) or preprocessor.get("input") not in ("pixels", "features"):
            raise ValueError(f"preprocessor config file {str(preprocessor_path)!r} must hold "
                             "{'input': 'pixels', 'image_size': N} or {'input': 'features'}")
        model._image_size = check_image_side(preprocessor.get("image_size"), str(preprocessor_path), "image_size",
                                             model.run_config) if preprocessor["input"] == "pixels" else None
        if model._image_size is not None:
            model._image_transform = preprocessor_transform(preprocessor, preprocessor_path)
            if model._image_transform["resize_size"] is not None:
                check_image_side(model._image_transform["resize_size"], str(preprocessor_path), "resize_size")
    return model.eval()


def _reads_features(network: RetrievalModel) -> bool:
    """Whether ``network``'s image side reads precomputed features rather than pixels."""
    return str(network.config.image_encoder.kind).endswith("_features")


def _holds_files(images: Any) -> bool:
    """Whether ``images`` holds a file path or a Pillow image (inputs that need the test-time transform)."""
    items = images if isinstance(images, (list, tuple)) else [images]
    return any(isinstance(item, (str, os.PathLike)) or type(item).__module__.startswith("PIL") for item in items)


def trained_similarity(path: str | os.PathLike[str], *, which: str = "model") -> str:
    """The similarity the model :func:`load` would open at ``path`` was trained with (the first entry of its
    ``similarity_options.json``), else ``cosine``; reads that small file only, no weights."""
    folder = Path(path).expanduser()
    if (folder / RUN_CONFIG_YAML).is_file() and not (folder / "config.json").is_file():
        folder = folder / which
    options_path = companion(folder, SIMILARITY_OPTIONS_FILE) if folder.is_dir() else None
    options = read_similarity_options(options_path) if options_path is not None else {}
    return next(iter(options), "cosine")


#: the models a run folder holds, as ``load(RUN, which=...)`` names them
RUN_MODELS = ("model", "model_last")


def load(path: str | os.PathLike[str], *, which: str = "model", device: str | torch.device = "cpu",
         vocabulary: str | os.PathLike[str] | None = None) -> Model:
    """Open a trained model: a run folder (``RUN``, its ``which`` model: ``model`` or ``model_last``),
    a model folder (``RUN/model``) or a :meth:`Model.save_pretrained` folder; eval mode, on ``device``.

    The vocabulary is ``vocabulary`` when given (a ``vocab.json``), else the folder's ``vocabulary.json``
    or the ``vocab.json`` beside it; the trained score parameters are the folder's (or its run's)
    ``similarity_options.json`` (:func:`read_similarity_options`); :attr:`Model.run_config` is the run's
    ``config.yaml`` or the folder's ``run_config.json``.

    Raises:
        FileNotFoundError: naming the path when it is none of these (NotADirectoryError for a file).
        ValueError: ``which`` not one of :data:`RUN_MODELS`.
        ValueError: naming the file when one is malformed, the weights are not finite or the vocabulary
            is not the one the model was trained with.
    """
    if which not in RUN_MODELS:
        raise ValueError(f"which={which!r}: expected one of {', '.join(map(repr, RUN_MODELS))} (the run's selected "
                         f"model, or the model of its last epoch)")
    folder = Path(path).expanduser()
    expected = "a run folder from `pcmr train`, its model/ folder or a folder written by Model.save_pretrained"
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{str(path)!r} is a file, not a run or model folder (expected {expected})")
    for written in (folder, folder / which):  # a model folder write killed between its renames: put it back
        repair_folder(written)
    if not folder.is_dir():
        raise FileNotFoundError(f"folder not found: {str(path)!r} (expected {expected})")
    if (folder / RUN_CONFIG_YAML).is_file() and not (folder / "config.json").is_file():
        if not (folder / which).is_dir():
            raise FileNotFoundError(f"{str(folder / which)!r} is missing: {str(path)!r} is not a finished pcmr run "
                                    "(train or resume it first)")
        folder = folder / which
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a pcmr run folder (config.yaml and {which}/) nor a model "
                                "folder (config.json and model.safetensors)")
    return _load_folder(folder, device, vocabulary)
