"""Tokenizer and vocabulary (no downloaded data).

The tokenizer lower-cases, applies Unicode NFKC normalisation and keeps runs of
letters/digits (with inner apostrophes, ``"dog's"``) as words; punctuation is
dropped. The literal ``<unk>`` survives as one token so that word-erasure series
can mark erased words.

The vocabulary is built from the training split only (the VSE++ release built its
vocabulary from test captions; pcmr refuses that), with fixed special ids:
``<pad>`` = 0, ``<unk>`` = 1, ``<start>`` = 2, ``<end>`` = 3 (``docs/datasets.md``).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from pcmr.atomic import atomic_write_json
from pcmr.data.errors import DataError, require_file
from pcmr.data.split import RetrievalSplit

__all__ = ["tokenize", "Vocabulary", "PAD_ID", "UNK_ID", "START_ID", "END_ID", "SPECIAL_TOKENS"]

PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<start>", "<end>")
_TOKEN = re.compile(r"<unk>|[^\W_]+(?:'[^\W_]+)*")
_FORMAT = "pcmr-vocabulary"


def tokenize(text: str) -> list[str]:
    """Split ``text`` into lower-case word tokens; ``"A red-circle!"`` -> ``["a", "red", "circle"]``."""
    if not isinstance(text, str):
        raise DataError(f"tokenize needs a str, got {type(text).__name__}", location="text", expected="str")
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


class Vocabulary:
    """Word <-> id mapping with the contract's special ids (``<pad>``=0 ... ``<end>``=3).

    Build it with :meth:`build` (from texts) or :meth:`from_split` (from a training
    split); save/load as JSON. ``encode`` maps unknown words to ``<unk>``.
    """

    def __init__(self, words: Sequence[str], *, min_count: int = 1) -> None:
        words = list(words)
        if tuple(words[:4]) != SPECIAL_TOKENS:
            words = list(SPECIAL_TOKENS) + [w for w in words if w not in SPECIAL_TOKENS]
        if len(set(words)) != len(words):
            duplicates = sorted({w for w in words if words.count(w) > 1})
            raise DataError(f"duplicate words {duplicates[:5]}", location="words", expected="unique words")
        self.words: list[str] = words
        self.word_to_id: dict[str, int] = {w: i for i, w in enumerate(words)}
        self.min_count = int(min_count)

    @classmethod
    def build(cls, texts: Iterable[str], *, min_count: int = 1, max_size: int | None = None) -> Vocabulary:
        """Vocabulary of the words occurring at least ``min_count`` times in ``texts``.

        Words are ordered by decreasing count, ties alphabetically (deterministic);
        ``max_size`` caps the total size including the 4 special tokens.
        """
        if min_count < 1:
            raise DataError(f"min_count={min_count}", location="min_count", expected="an integer >= 1")
        counts = Counter(token for text in texts for token in tokenize(text) if token not in SPECIAL_TOKENS)
        kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        if max_size is not None:
            kept = kept[: max(0, max_size - len(SPECIAL_TOKENS))]
        return cls(list(SPECIAL_TOKENS) + kept, min_count=min_count)

    @classmethod
    def from_split(cls, split: RetrievalSplit, *, min_count: int = 1, max_size: int | None = None) -> Vocabulary:
        """Vocabulary of a *training* split's captions; any other split raises :class:`DataError`."""
        if not split.is_training:
            raise DataError(
                f"refusing to build a vocabulary from split {split.split!r} of {split.name!r}",
                location="split",
                expected="a training split (validation/test words must not enter the vocabulary)",
            )
        return cls.build(split.caption_texts, min_count=min_count, max_size=max_size)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.word_to_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.words == other.words

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)}, min_count={self.min_count})"

    def encode(self, text: str, *, add_special: bool = True) -> list[int]:
        """Token ids of ``text``: ``[<start>, w_1, ..., w_n, <end>]`` (``add_special``), unknown words -> 1."""
        ids = [self.word_to_id.get(token, UNK_ID) for token in tokenize(text)]
        return [START_ID, *ids, END_ID] if add_special else ids

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        """Words of ``ids`` joined by spaces (special tokens other than ``<unk>`` left out)."""
        out = []
        for i in ids:
            i = int(i)
            if skip_special and i in (PAD_ID, START_ID, END_ID):
                continue
            out.append(self.words[i] if 0 <= i < len(self.words) else SPECIAL_TOKENS[UNK_ID])
        return " ".join(out)

    def to_dict(self) -> dict:
        """JSON-ready description (``format``, ``version``, ``min_count``, ``words``)."""
        return {"format": _FORMAT, "version": 1, "min_count": self.min_count, "words": self.words}

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary as JSON (atomically)."""
        atomic_write_json(path, self.to_dict(), indent=1, newline=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a vocabulary written by :meth:`save`; a malformed file names the key at fault."""
        require_file(path, "a vocabulary JSON written by Vocabulary.save")
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DataError(f"not valid JSON ({err})", path=path, expected="a vocabulary JSON") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise DataError("missing or wrong 'format'", path=path, location="key 'format'", expected=repr(_FORMAT))
        words = data.get("words")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise DataError("'words' is not a list of strings", path=path, location="key 'words'",
                            expected="a list of strings")
        if tuple(words[:4]) != SPECIAL_TOKENS:
            raise DataError(f"first words are {words[:4]}", path=path, location="key 'words'",
                            expected=f"{list(SPECIAL_TOKENS)} first")
        return cls(words, min_count=int(data.get("min_count", 1)))
