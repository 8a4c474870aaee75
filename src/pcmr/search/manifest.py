"""The folder of a :class:`~pcmr.search.gallery.GalleryIndex` and its manifest ``index.json``.

On disk (no pickle anywhere):

- ``index.json``: format/version, sizes, ids, caption texts, image metadata, similarity options,
  uncertainty measure, provenance (model, dataset, split), the ANN sources and gallery statistics;
- ``embeddings.safetensors``: ``image_mean [N_img, D]``, ``image_logvar [N_img, D|1]``,
  ``caption_mean [N_cap, D]``, ``caption_logvar [N_cap, D|1]`` (log-variances absent for points),
  ``image_points`` / ``caption_points [N, K, D]`` for ``pcmr.PointSet`` embeddings (PVSE);
- ``model/`` when the index can encode queries: the :class:`pcmr.Model` as its ``save_pretrained`` folder
  (network, vocabulary, image preprocessing, trained score parameters, run config), every file of it
  under the manifest's checksums (versions 1 and 2 stored the network alone there, with ``vocab.json``
  beside it and the image transform in ``meta``; both are still read);
- ``ann-image.faiss`` / ``ann-caption.faiss`` (faiss backend, :mod:`pcmr.search.ann`); a Milvus
  source is recorded by its uri and collection;
- ``statistics.safetensors`` (:class:`~pcmr.search.searcher.GalleryStatistics`);
- an on-disk index: ``store-image/`` and ``store-caption/`` (:class:`~pcmr.search.store.GalleryStore`)
  instead of ``embeddings.safetensors``, and ``uncertainty.safetensors`` with each item's uncertainty;
- ``index.json`` lists the SHA-256 of every other file and of itself; a file that does not match
  gives one error.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from pcmr.atomic import atomic_write_json, atomic_write_safetensors, repair_folder
from pcmr.data import Vocabulary
from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE, Gaussian
from pcmr.hub import Model, check_image_side
from pcmr.models import load_model as load_pcmr_model
from pcmr.point_set import PointSet
from pcmr.search.candidate_sources import source_kind
from pcmr.search.searcher import STATISTICS_FILE, Gallery
from pcmr.search.sources import entry_engine
from pcmr.search.store import GalleryStore
from pcmr.search.stored import MODALITIES, StoredGallery

__all__ = ["INDEX_FORMAT", "INDEX_VERSION", "IndexFolder", "drop_replaced_sources", "file_sha256", "not_an_index",
           "read_index", "save_index", "source_entries", "stored_similarity"]

INDEX_FORMAT = "pcmr-gallery-index"
INDEX_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
META_FILE = "index.json"
EMBEDDINGS_FILE = "embeddings.safetensors"
MODEL_DIR = "model"
UNCERTAINTY_FILE = "uncertainty.safetensors"  # on-disk indexes: each item's uncertainty, computed once
STORE_DIRS = {"image": "store-image", "caption": "store-caption"}


def save_index(index: StoredGallery, directory: str | os.PathLike[str], include_model: bool = True) -> Path:
    """Write ``index``'s folder (see the module docstring). ``include_model=False`` stores only the
    embeddings (search by Gaussian queries still works)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    store_files = _store_files(index, out)
    for modality, g in (() if index.on_disk else (("image", index.images), ("caption", index.captions))):
        assert isinstance(g, Gaussian)
        tensors[f"{modality}_mean"] = g.mean.detach().cpu().contiguous()
        if isinstance(g, PointSet):  # K points per item (PVSE); the mean above is their centroid
            tensors[f"{modality}_points"] = g.points.detach().cpu().contiguous()
        if g.logvar is not None:
            tensors[f"{modality}_logvar"] = g.logvar.detach().cpu().contiguous()
    if not index.on_disk:
        atomic_write_safetensors(out / EMBEDDINGS_FILE, tensors)
    has_model = include_model and index.model is not None
    if has_model:
        assert index.model is not None
        index.model.save_files(out / MODEL_DIR)  # the index folder is written whole: no second swap
    ann_info = {}
    for modality, ann in index.ann.items():  # a file in the folder, or how to reconnect to a database
        ann_info[modality] = source_kind(ann.engine).save(ann, out, modality)
    statistics_info = index.statistics.save(out)
    uncertain = [m for m in MODALITIES if index.on_disk and not index.gallery(m).is_point]
    if uncertain:  # read once here, not by every load
        atomic_write_safetensors(out / UNCERTAINTY_FILE, {m: index.item_uncertainty(m).contiguous() for m in uncertain})
    files = (([] if index.on_disk else [EMBEDDINGS_FILE]) + store_files
             + [a["file"] for a in ann_info.values() if "file" in a]
             + ([STATISTICS_FILE] if statistics_info else []) + ([UNCERTAINTY_FILE] if uncertain else []))
    if has_model:
        files += sorted(str(p.relative_to(out)) for p in (out / MODEL_DIR).rglob("*") if p.is_file())
    meta = {
        "format": INDEX_FORMAT, "version": INDEX_VERSION,
        "backend": next((entry_engine(a) for a in ann_info.values()), "exact"), "ann": ann_info, "statistics": statistics_info,
        "checksums": {name: _sha256(out / name) for name in files},
        **({"on_disk": True, "stores": dict(STORE_DIRS)} if index.on_disk else {}),
        **({"uncertainty": {"file": UNCERTAINTY_FILE, "measure": index.meta["uncertainty_measure"]}}
           if uncertain else {}),
        "num_images": index.images.num, "num_captions": index.captions.num, "dim": index.images.dim,
        "image_ids": index.image_ids, "caption_ids": index.caption_ids, "caption_texts": index.caption_texts,
        "image_metadata": index.image_metadata, "similarity_options": index.similarity_options,
        "meta": index.meta, "model": MODEL_DIR if has_model else None,
    }
    meta["manifest_sha256"] = _manifest_digest(meta)
    atomic_write_json(out / META_FILE, meta, indent=1, newline=False)
    return out

def stored_similarity(directory: str | os.PathLike[str]) -> str:
    """The similarity a query of the index folder ``directory`` uses when it names none, read from its
    ``index.json`` alone (nothing is loaded): the first of the ``similarity_options`` it records (the one
    its model was trained with), else cosine, also when the manifest cannot be read (loading the index
    then names the problem)."""
    try:
        info = json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8"))
        options = info.get("similarity_options") if isinstance(info, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "cosine"
    first = next(iter(options), None) if isinstance(options, dict) else None
    return first if isinstance(first, str) else "cosine"


#: files an index of any version may hold besides those its manifest lists under ``checksums``
_INDEX_NAMES = frozenset({META_FILE, EMBEDDINGS_FILE, "vocab.json", STATISTICS_FILE, UNCERTAINTY_FILE})


def not_an_index(directory: str | os.PathLike[str]) -> str | None:
    """Why the existing path ``directory`` may not be replaced as a gallery index, or None when it is one.

    It must be a folder whose ``index.json`` is a pcmr gallery index manifest and which holds no file
    the index does not account for (its ``checksums``, the manifest itself, and the fixed names of older
    versions: its ``model/`` folder, ``vocab.json``, faiss files): ``pcmr search --overwrite`` replaces the
    whole folder, so a run folder, a folder of documents or an index someone put other files into is
    refused, naming what is there."""
    root = Path(directory)
    if not root.is_dir():
        return f"{root} is a file, not a pcmr gallery index"
    entries = sorted(p.name for p in root.iterdir())
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    try:
        info = json.loads((root / META_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        info = None
    if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
        return f"{root} is not a pcmr gallery index (it holds {shown}; no {META_FILE} of a gallery index)"
    checksums = info.get("checksums")
    listed: dict[str, Any] = checksums if isinstance(checksums, dict) else {}
    ann = [entry.get("file") for entry in (info.get("ann") or {}).values() if isinstance(entry, dict)] \
        if isinstance(info.get("ann"), dict) else []
    old_model = info.get("version") in (1, 2) and isinstance(info.get("model"), str)
    foreign = sorted(
        name for name in (str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())
        if name not in listed and name not in _INDEX_NAMES and name not in ann
        and not (old_model and name.startswith(f"{info['model']}/")))
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        return f"{root} holds files that are not part of its gallery index ({', '.join(foreign[:5])}{more})"
    return None


def _store_files(index: StoredGallery, out: Path) -> list[str]:
    """The files of the stores of an on-disk index, relative to ``out`` (which must hold them)."""
    files: list[str] = []
    for modality in (MODALITIES if index.on_disk else ()):
        store = index.gallery(modality)
        assert isinstance(store, GalleryStore)
        if store.path.resolve() != (out / STORE_DIRS[modality]).resolve():
            raise ValueError(f"the {modality} store {store.path} must be the folder {STORE_DIRS[modality]!r} of "
                             f"the index folder {out}; an on-disk index is saved where it was built")
        files += sorted(str(p.relative_to(out)) for p in store.path.iterdir() if p.is_file())
    return files


@dataclass
class IndexFolder:
    """What an index folder holds, read and checked (:func:`read_index`): the stored items of each
    modality (``galleries``), the constructor's fields of a gallery index (``fields``: ids, texts,
    metadata, similarity options, meta), the ``model`` (None when not stored or not loaded), the
    reconnected candidate ``sources``, the ``statistics`` entries of ``index.json`` (their values in
    ``root``'s statistics file) and the items' saved ``uncertainty`` (on-disk indexes)."""

    root: Path
    meta_path: Path
    galleries: dict[str, Gallery]
    fields: dict[str, Any]
    model: Model | None
    sources: dict[str, Any]
    statistics: list[dict[str, Any]]
    uncertainty: dict[str, Tensor]


def read_index(directory: str | os.PathLike[str], device: torch.device | str | None = None,
               load_model: bool = True) -> IndexFolder:
    """Read an index folder written by :func:`save_index`; embeddings (and model) go to ``device`` (default
    CPU). Raises FileNotFoundError / ValueError naming the file and the problem."""

    root = Path(directory)
    meta_path, emb_path = root / META_FILE, root / EMBEDDINGS_FILE
    repair_folder(root)  # a writer killed mid-swap left the old folder aside: put it back
    if not root.is_dir():
        raise FileNotFoundError(f"index folder not found: {root} (build one with "
                                f"`pcmr search {root} --build RUN_OR_MODEL`)")
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found; {root} is not a pcmr gallery index")
    try:
        info = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{meta_path} is not valid JSON ({err}); the index is corrupted") from None
    if not isinstance(info, dict) or info.get("format") != INDEX_FORMAT:
        raise ValueError(f"{meta_path}: field 'format' must be {INDEX_FORMAT!r}; not a pcmr gallery index")
    if info.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"{meta_path}: index version {info.get('version')!r} is not supported "
                         f"(expected one of {list(READABLE_VERSIONS)})")
    for key in ("image_ids", "caption_ids", "caption_texts"):
        if not isinstance(info.get(key), list):
            raise ValueError(f"{meta_path}: field {key!r} must be a list")
    on_disk = info.get("on_disk") is True
    if not on_disk and not emb_path.is_file():
        raise FileNotFoundError(f"{emb_path} not found; the index is incomplete")
    _verify_checksums(root, info, meta_path)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    gaussians: dict[str, Gallery] = {}
    if on_disk:
        for modality in MODALITIES:
            try:
                gaussians[modality] = GalleryStore.open(_inside(root, info["stores"][modality],
                                                                f"stores.{modality}", meta_path))
            except (KeyError, TypeError) as err:
                raise ValueError(f"{meta_path}: field 'stores' must name the folder of each modality ({err})"
                                 ) from None
    tensors = {} if on_disk else _read_embeddings(emb_path)
    for modality in () if on_disk else MODALITIES:
        if f"{modality}_mean" not in tensors:
            raise ValueError(f"{emb_path} has no tensor '{modality}_mean'; the index is corrupted")
        try:
            if f"{modality}_points" in tensors:
                gaussians[modality] = PointSet(tensors[f"{modality}_points"]).to(dev)
            else:
                gaussians[modality] = Gaussian(tensors[f"{modality}_mean"],
                                               tensors.get(f"{modality}_logvar")).to(dev)
        except ValueError as err:
            raise ValueError(f"{emb_path}: {err}") from None
    for modality, key in (("image", "image_ids"), ("caption", "caption_ids"), ("caption", "caption_texts")):
        if len(info[key]) != gaussians[modality].num:
            raise ValueError(f"{meta_path}: field {key!r} has {len(info[key])} entries but {emb_path.name} "
                             f"holds {gaussians[modality].num} {modality}s; the index files do not match")
    model = None
    if load_model and info.get("model"):
        folder = _inside(root, info["model"], "model", meta_path)
        if info.get("version") in (1, 2) or info.get("vocab") is not None:
            model = _stored_parts(folder, _inside(root, info.get("vocab"), "vocab", meta_path), info, dev, meta_path)
        else:
            model = Model.from_pretrained(folder, map_location=dev)
    fields = {"image_ids": info["image_ids"], "caption_ids": info["caption_ids"], "caption_texts": info["caption_texts"],
              "image_metadata": info.get("image_metadata"), "similarity_options": info.get("similarity_options"),
              "meta": info.get("meta")}
    statistics = info.get("statistics") or []
    if not isinstance(statistics, list):
        raise ValueError(f"{meta_path}: field 'statistics' must be a list")
    return IndexFolder(root, meta_path, gaussians, fields, model, _load_ann(gaussians, root, info, meta_path),
                       statistics, _load_uncertainty(gaussians, root, info, meta_path))


def _stored_parts(folder: Path, vocab_path: Path, info: dict[str, Any], device: torch.device,
                  meta_path: Path) -> Model:
    """The :class:`pcmr.Model` of a version 1 or 2 index, which stored its parts: the network in ``model/``,
    the vocabulary in ``vocab.json`` and the gallery's image transform in ``meta``."""
    network = load_pcmr_model(folder).to(device).eval()
    model = Model(network, Vocabulary.load(vocab_path), similarity_options=info.get("similarity_options"))
    meta = info.get("meta") or {}
    sizes = {field: meta.get(field) for field in ("image_size", "resize_size")}
    for field, value in sizes.items():  # an edited manifest never sets a size a query would be allocated at
        if value is not None:
            sizes[field] = check_image_side(value, str(meta_path), f"meta.{field}")
    model.set_image_transform(sizes["image_size"], meta.get("image_resize", "square"), sizes["resize_size"])
    return model.eval()


def source_entries(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The candidate-source entries (``ann`` of ``index.json``) the index folder ``directory`` names;
    none when it holds no readable index."""
    try:
        info = json.loads((Path(directory) / META_FILE).read_text(encoding="utf-8"))
        entries = list((info.get("ann") or {}).values())
    except (OSError, ValueError, AttributeError):
        return []
    return [e for e in entries if isinstance(e, dict)]


def drop_replaced_sources(entries: list[dict[str, Any]]) -> None:
    """Drop the candidate sources of a replaced index (:func:`source_entries`, read before it was
    replaced) that live outside its folder, each by its kind."""
    for entry in entries:
        source_kind(entry_engine(entry)).drop_entry(entry)


def _read_embeddings(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read ({err}); the index is corrupted") from None


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in 4 MiB pieces (hex)."""
    return _sha256(Path(path))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest_digest(info: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON without its own digest field."""
    body = {k: v for k, v in info.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _verify_checksums(root: Path, info: dict[str, Any], meta_path: Path) -> None:
    """The manifest's own digest and every file listed under ``checksums`` (version-2 indexes)."""
    if info.get("version", 1) >= 2 and info.get("manifest_sha256") != _manifest_digest(info):
        raise ValueError(f"{meta_path}: its content does not match its 'manifest_sha256'; the manifest was "
                         "edited or damaged, rebuild the index")
    checksums = info.get("checksums", {}) if info.get("version", 1) >= 2 else {}
    required = info.get("version", 1) >= 2 and info.get("on_disk") is not True
    if not isinstance(checksums, dict) or (required and EMBEDDINGS_FILE not in checksums):
        raise ValueError(f"{meta_path}: field 'checksums' must map every index file to its SHA-256")
    for name, expected in checksums.items():
        path = _inside(root, name, "checksums", meta_path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found; the index is incomplete")
        actual = _sha256(path)
        if actual != expected:
            raise ValueError(f"{path}: SHA-256 {actual[:12]}... does not match {expected[:12]}... recorded in "
                             f"{meta_path.name}; the file was truncated or edited, rebuild the index")


def _inside(root: Path, name: Any, field: str, meta_path: Path) -> Path:
    """``root / name`` for a file or folder name of field ``field`` of ``meta_path``, refused unless it is a
    relative path that stays inside the index folder ``root`` (no absolute path, no ``..``, no symbolic
    link leading out): a manifest can never make the loader read, or the server serve, another file."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{meta_path}: field {field!r} must name a file inside the index folder, got {name!r}")
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts or "\\" in name:
        raise ValueError(f"{meta_path}: field {field!r} names {name!r}, which is not inside the index folder "
                         f"{root}; every file an index names must be a relative path inside its folder")
    path = root / name
    real_root = root.resolve()
    if not path.resolve().is_relative_to(real_root):
        raise ValueError(f"{meta_path}: field {field!r} names {name!r}, a link that leads out of the index folder "
                         f"{root} (to {path.resolve()}); every file an index names must lie inside its folder")
    return path


def _load_ann(galleries: dict[str, Gallery], root: Path, info: dict[str, Any], meta_path: Path) -> dict[str, Any]:
    """The candidate sources listed in ``index.json`` (a faiss file, a database collection) by modality,
    each reconnected through its kind (:mod:`pcmr.search.sources`), which checks it fits the gallery."""
    sources = {}
    for modality, entry in (info.get("ann") or {}).items():
        if not isinstance(entry, dict):
            raise ValueError(f"{meta_path}: field 'ann.{modality}' is malformed (not an object)")
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {list(MODALITIES)}, got {modality!r}")
        file = None if entry.get("file") is None else _inside(root, entry["file"], f"ann.{modality}.file", meta_path)
        sources[modality] = source_kind(entry_engine(entry)).reconnect(entry, modality, galleries[modality], file,
                                                                       meta_path)
    return sources


def _load_uncertainty(galleries: dict[str, Gallery], root: Path, info: dict[str, Any],
                      meta_path: Path) -> dict[str, Tensor]:
    """The items' uncertainties an on-disk index saved (``uncertainty`` of ``index.json``) by modality, if
    any, under the measure the index uses."""
    entry = info.get("uncertainty")
    if entry is None:
        return {}
    if not isinstance(entry, dict) or entry.get("file") != UNCERTAINTY_FILE:
        raise ValueError(f"{meta_path}: field 'uncertainty' must be {{'file': {UNCERTAINTY_FILE!r}, 'measure': ...}}")
    if entry.get("measure") != (info.get("meta") or {}).get("uncertainty_measure", DEFAULT_UNCERTAINTY_MEASURE):
        return {}  # another measure: computed from the stores on first use
    values = _read_embeddings(root / UNCERTAINTY_FILE)
    for modality, value in values.items():
        if modality not in MODALITIES or value.shape != (galleries[modality].num,):
            raise ValueError(f"{root / UNCERTAINTY_FILE}: {modality!r} must hold one value per item of a modality")
    return values
