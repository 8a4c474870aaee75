"""Datasets for cross-modal retrieval: the built-in "shapes" benchmark, real formats, text, batching.

Entry points: :func:`load_dataset` / :func:`list_datasets` return a
:class:`RetrievalSplit` (images, captions, the exact relevance of every
image-caption pair and PMRP labels); :func:`train_loader`,
:func:`image_loader` and :func:`caption_loader` turn a split into batches;
:class:`Vocabulary` and :func:`tokenize` handle text.
"""

from pcmr.data.augment import drop_words, erase_image, occlusion_series, random_erase, word_erasure_series
from pcmr.data.batching import ENCODE_BATCH_SIZE, caption_loader, image_loader, train_loader
from pcmr.data.errors import DataError, MissingDataError, SkippedItem
from pcmr.data.images import ArrayImages, FeatureImages, FileImages, ImageSource
from pcmr.data.registry import DATASETS, list_datasets, load_dataset, offers_split
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import SPECIAL_TOKENS, Vocabulary, tokenize
from pcmr.relevance import Relevance

__all__ = ["DATASETS", "load_dataset", "list_datasets", "offers_split", "RetrievalSplit", "Relevance", "Vocabulary", "tokenize",
           "SPECIAL_TOKENS", "DataError", "MissingDataError", "SkippedItem", "ImageSource", "ArrayImages",
           "FileImages", "FeatureImages", "erase_image", "random_erase", "drop_words", "occlusion_series", "word_erasure_series",
           "train_loader", "image_loader", "caption_loader", "ENCODE_BATCH_SIZE"]

