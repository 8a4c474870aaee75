"""Text backbone: word embeddings + GRU (VSE++, ProbVSE, GCIE: uni-directional; PCME: bi-directional).

Reads ``batch["captions"]`` (``[B, L]`` token ids, 0 = ``<pad>``) and
``batch["caption_lengths"]`` (``[B]``, >= 1) and returns local features with a padding mask and
a sentence feature ``pooled``. Three options (``TextEncoderConfig``) choose between the layouts:

- ``bidirectional_merge``: ``average`` the forward and backward halves (``F = H``) or ``concat``
  them (``H = F / 2`` per direction; PCME's release: ``F = D``);
- ``sentence_feature``: ``final_state`` (the GRU's final hidden states) or ``last_output`` (the GRU
  output at the last real word, ``lengths - 1``, for both directions: PCME's and PVSE's releases;
  for the backward direction that is its first step, which has read the last word only);
- ``local_features``: ``gru_outputs`` (the GRU output at every word) or ``word_embeddings`` (the
  word embeddings themselves: what PCME's release attends over, in both the mean and the
  variance head, PCME eq. 4).

Word embeddings start random (uniform in [-0.1, 0.1], as VSE++) or from a word-vector file the
user supplies (:func:`load_word_vectors`: GloVe text, or a ``.npy`` / ``.safetensors`` export).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pcmr.models.features import EncodedFeatures

__all__ = ["WORD_VECTOR_MATCHES", "GRUTextBackbone", "get_captions", "last_outputs", "load_word_vectors",
           "read_word_vectors", "release_word_fallback", "run_gru", "words_file_of"]


def get_captions(batch: Mapping[str, Any], vocab_size: int) -> tuple[Tensor, Tensor]:
    """``batch["captions"] [B, L]`` and ``batch["caption_lengths"] [B]``, validated."""
    for key in ("captions", "caption_lengths"):
        if key not in batch:
            raise ValueError(
                f"the batch has no {key!r} entry; the gru text encoder needs 'captions' and 'caption_lengths'"
            )
    tokens, lengths = batch["captions"], batch["caption_lengths"]
    if (
        not isinstance(tokens, Tensor)
        or tokens.dtype != torch.long
        or tokens.dim() != 2
        or tokens.shape[1] < 1
    ):
        shape = (tuple(tokens.shape), tokens.dtype) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(
            f"batch['captions'] must be a LongTensor of token ids with shape [B, L], got {shape}"
        )
    if (
        not isinstance(lengths, Tensor)
        or lengths.dtype != torch.long
        or tuple(lengths.shape) != (tokens.shape[0],)
    ):
        shape = (
            (tuple(lengths.shape), lengths.dtype) if isinstance(lengths, Tensor) else type(lengths).__name__
        )
        raise ValueError(
            f"batch['caption_lengths'] must be a LongTensor of shape [B] = [{tokens.shape[0]}], got {shape}"
        )
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"batch['captions'] holds token ids in [{int(tokens.min())}, {int(tokens.max())}]; the model's "
            f"vocab_size is {vocab_size} (ids must lie in [0, {vocab_size - 1}]); create the model with "
            f"vocab_size=len(vocabulary)"
        )
    if lengths.numel() and (int(lengths.min()) < 1 or int(lengths.max()) > tokens.shape[1]):
        raise ValueError(
            f"batch['caption_lengths'] must lie in [1, L] = [1, {tokens.shape[1]}], got values in "
            f"[{int(lengths.min())}, {int(lengths.max())}]"
        )
    return tokens, lengths


def last_outputs(outputs: Tensor, lengths: Tensor) -> Tensor:
    """The GRU output at the last real position of each sequence: ``outputs [B, L, F]`` (padded,
    batch first), ``lengths [B]`` -> ``[B, F]``. For a bi-directional GRU with concatenated halves
    this is PCME's / PVSE's release sentence feature (``torch.gather`` at ``lengths - 1``)."""
    index = (lengths.to(outputs.device) - 1).view(-1, 1, 1).expand(-1, 1, outputs.shape[2])  # [B, 1, F]
    return outputs.gather(1, index).squeeze(1)  # [B, F]


def run_gru(gru: nn.GRU, inputs: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``gru`` over padded ``inputs [B, L, E]`` of ``lengths [B]`` (any order): padded outputs
    ``[B, L, H * dirs]`` (zeros past each length) and final hidden states ``[layers * dirs, B, H]``.

    When every sequence fills all ``L`` positions (fixed-length captions) there is nothing to pack:
    the GRU runs on the padded tensor, the same computation without the packing (about 1.4x faster
    for a bi-GRU's forward and backward on CPU)."""
    if inputs.shape[1] > 0 and bool((lengths == inputs.shape[1]).all()):
        return gru(inputs)
    packed = pack_padded_sequence(inputs, lengths.cpu(), batch_first=True, enforce_sorted=False)
    output, hidden = gru(packed)
    padded, _ = pad_packed_sequence(output, batch_first=True, total_length=inputs.shape[1])
    return padded, hidden


class GRUTextBackbone(nn.Module):
    """Word embeddings + GRU.

    Args:
        vocab_size: number of token ids (row 0 is ``<pad>``).
        word_dim: embedding size.
        hidden_dim: the feature size ``F``: the GRU's hidden size per direction, or with ``concat``
            twice it (``F / 2`` per direction, which must be whole).
        num_layers: stacked GRU layers.
        bidirectional: forward and backward GRU (PCME).
        bidirectional_merge: ``average`` (feature size ``H``) or ``concat`` (``2H``) of the halves.
        sentence_feature: ``final_state`` or ``last_output`` (see the module docstring).
        local_features: ``gru_outputs`` or ``word_embeddings`` (see the module docstring).

    Attributes:
        out_dim: size of ``pooled``; local_dim: size of ``local``.
    """

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        hidden_dim: int,
        num_layers: int,
        bidirectional: bool,
        bidirectional_merge: str = "average",
        sentence_feature: str = "final_state",
        local_features: str = "gru_outputs",
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        self.concat = bidirectional and bidirectional_merge == "concat"
        if self.concat and hidden_dim % 2:
            raise ValueError(f"text_encoder.hidden_dim must be even with concatenated bi-GRU halves, got {hidden_dim}")
        per_direction = hidden_dim // 2 if self.concat else hidden_dim
        self.gru = nn.GRU(
            word_dim, per_direction, num_layers=num_layers, batch_first=True, bidirectional=bidirectional
        )
        self.vocab_size = vocab_size
        self.hidden_dim = per_direction
        self.bidirectional = bidirectional
        self.sentence_feature = sentence_feature
        self.local_features = local_features
        self.out_dim = hidden_dim
        self.local_dim = word_dim if local_features == "word_embeddings" else self.out_dim

    def pretrained_parameters(self) -> list[Tensor]:
        """The parts a pretrained model supplies (the word vectors, e.g. GloVe); the GRU is not one:
        PCME's warm-up freezes these and trains the GRU with the heads (PCME §4.1)."""
        return [self.embedding.weight]

    def forward(self, batch: Mapping[str, Any]) -> EncodedFeatures:
        tokens, lengths = get_captions(batch, self.vocab_size)
        max_length = tokens.shape[1]
        embedded = self.embedding(tokens)  # [B, L, E]
        words, hidden = run_gru(self.gru, embedded, lengths)  # [B, L, H * dirs], [layers * dirs, B, H]
        if self.sentence_feature == "last_output":
            sentence = last_outputs(words, lengths)  # [B, H * dirs]
        elif self.bidirectional:
            sentence = torch.cat([hidden[-2], hidden[-1]], dim=1)  # [B, 2H]
        else:
            sentence = hidden[-1]  # [B, H]
        if self.bidirectional and not self.concat:
            words = 0.5 * (words[..., : self.hidden_dim] + words[..., self.hidden_dim :])  # [B, L, H]
            sentence = 0.5 * (sentence[:, : self.hidden_dim] + sentence[:, self.hidden_dim :])  # [B, H]
        positions = torch.arange(max_length, device=tokens.device)
        mask = positions.unsqueeze(0) < lengths.to(tokens.device).unsqueeze(1)  # [B, L]
        local = embedded if self.local_features == "word_embeddings" else words
        return EncodedFeatures(local=local, pooled=sentence, mask=mask)


#: how a vocabulary word finds its vector (:func:`read_word_vectors`)
WORD_VECTOR_MATCHES = ("lowercase", "release")


def release_word_fallback(word: str) -> str:
    """The PCME release's second try for a word missing from GloVe (``models/caption_encoder.py``,
    ``init_weights``): ``-``, ``.`` and ``'`` removed, then the part before the first ``/``."""
    word = word.replace("-", "").replace(".", "").replace("'", "")
    return word.split("/")[0] if "/" in word else word


def _candidates(word: str, match: str) -> list[str]:
    """The file words tried for a vocabulary word, in order: itself, then the rule's fallback."""
    fallback = release_word_fallback(word) if match == "release" else word.lower()
    return [word] if fallback == word else [word, fallback]


def words_file_of(path: Path) -> Path:
    """The word list of a ``.npy`` / ``.safetensors`` vector file: ``NAME.words.txt`` next to it
    (one word per line, line ``i`` naming row ``i``)."""
    return path.with_suffix(".words.txt")


def _read_text_table(path: Path, wanted: set[str], dim: int, keep_last: bool) -> dict[str, Tensor]:
    """Vectors of the ``wanted`` words in a GloVe text file (``word v_1 ... v_dim`` per line).

    A line with more than ``dim + 1`` fields has spaces in its word (``glove.840B.300d.txt`` has a few):
    the last ``dim`` fields are the vector. A two-field line (word2vec's ``count dim`` header) is skipped."""
    table: dict[str, Tensor] = {}
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").rstrip().split(" ")
            if len(parts) <= 2 and line_number == 1:
                continue
            if len(parts) < dim + 1:
                raise ValueError(
                    f"word vector file {str(path)!r} line {line_number}: expected 'word' followed by "
                    f"{dim} numbers (text_encoder.word_dim), got {len(parts) - 1}"
                )
            word, values = " ".join(parts[: len(parts) - dim]), parts[len(parts) - dim :]
            if word not in wanted or (word in table and not keep_last):
                continue
            try:
                table[word] = torch.tensor([float(v) for v in values])
            except ValueError as error:
                raise ValueError(f"word vector file {str(path)!r} line {line_number}: {error}") from error
    return table


def _read_array_table(path: Path, wanted: set[str], dim: int, keep_last: bool) -> dict[str, Tensor]:
    """Vectors of the ``wanted`` words in a ``.npy`` or ``.safetensors`` matrix ``[N, dim]`` whose row
    words are in :func:`words_file_of`."""
    words_path = words_file_of(path)
    if not words_path.is_file():
        raise FileNotFoundError(f"word vector file {str(path)!r} needs its word list {str(words_path)!r} "
                                f"(one word per line, line i naming row i)")
    words = words_path.read_text(encoding="utf-8").split("\n")
    if words and words[-1] == "":
        words.pop()
    if path.suffix == ".npy":
        try:
            matrix: Any = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as error:
            raise ValueError(f"word vector file {str(path)!r} is not a numeric .npy array: {error}") from None
    else:
        with safe_open(str(path), framework="pt") as handle:
            keys = list(handle.keys())
            if len(keys) != 1 and "vectors" not in keys:
                raise ValueError(f"word vector file {str(path)!r} holds tensors {keys}; expected one tensor, or "
                                 f"one named 'vectors'")
            matrix = handle.get_tensor("vectors" if "vectors" in keys else keys[0])
    shape = tuple(matrix.shape)
    if len(shape) != 2 or shape[1] != dim or shape[0] != len(words):
        raise ValueError(f"word vector file {str(path)!r} holds a {list(shape)} array; expected "
                         f"[{len(words)}, {dim}]: one row per line of {words_path.name} and "
                         f"text_encoder.word_dim = {dim} columns")
    table: dict[str, Tensor] = {}
    for row, word in enumerate(words):
        if word in wanted and (keep_last or word not in table):
            table[word] = (torch.tensor(np.array(matrix[row], dtype=np.float32)) if path.suffix == ".npy"
                           else matrix[row].float())
    return table


def read_word_vectors(
    path: str | Path, words: Sequence[str], dim: int, *, match: str = "lowercase"
) -> tuple[Tensor, Tensor]:
    """Read vectors for ``words`` from a word-vector file.

    Formats: GloVe text (``word v_1 ... v_dim`` per line, e.g. ``glove.840B.300d.txt``), or a ``.npy``
    / ``.safetensors`` matrix ``[N, dim]`` (one tensor, or one named ``vectors``) with its words in
    ``NAME.words.txt`` (:func:`words_file_of`).

    ``match`` says which file word a vocabulary word takes: ``lowercase``: itself, else its lower-cased
    form (a word repeated in the file: its first row); ``release``: itself, else
    :func:`release_word_fallback` (PCME's release, whose torchtext table keeps a repeated word's last row).

    Returns ``vectors [len(words), dim]`` (float32, zeros where missing) and ``found [len(words)]``
    (bool). Raises ``ValueError`` naming the file (and line) when a row has another dimension or a
    non-number.
    """
    if match not in WORD_VECTOR_MATCHES:
        raise ValueError(f"word vector match {match!r} is unknown; expected one of {list(WORD_VECTOR_MATCHES)}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word vector file {str(path)!r} does not exist")
    candidates = [_candidates(word, match) for word in words]
    wanted = {candidate for options in candidates for candidate in options}
    keep_last = match == "release"
    if path.suffix in (".npy", ".safetensors"):
        table = _read_array_table(path, wanted, dim, keep_last)
    else:
        table = _read_text_table(path, wanted, dim, keep_last)
    vectors = torch.zeros(len(words), dim)
    found = torch.zeros(len(words), dtype=torch.bool)
    for row, options in enumerate(candidates):
        hit = next((option for option in options if option in table), None)
        if hit is not None:
            vectors[row] = table[hit]
            found[row] = True
    return vectors, found


def load_word_vectors(model: nn.Module, path: str | Path, words: Sequence[str], *, match: str = "lowercase") -> int:
    """Initialise the word embeddings of every GRU text backbone in ``model`` from a word-vector file
    (GloVe text, or ``.npy`` / ``.safetensors`` with a word list: :func:`read_word_vectors`).

    ``words[i]`` is the word of token id ``i`` (the vocabulary's id-to-word list): rows are placed by
    the model's vocabulary. Rows of words absent from the file keep their initial values; ``<pad>``
    (id 0) stays zero. ``match``: see :func:`read_word_vectors`. Returns the number of words found.
    The vectors become part of the weights, so ``save_model`` keeps them.
    """
    backbones = [m for m in model.modules() if isinstance(m, GRUTextBackbone)]
    if not backbones:
        raise ValueError("load_word_vectors needs a model whose text_encoder.kind is 'gru'")
    vocab_size, dim = backbones[0].embedding.weight.shape
    if len(words) != vocab_size:
        raise ValueError(
            f"load_word_vectors got {len(words)} words but the model's vocab_size is {vocab_size}; "
            f"pass the vocabulary's full id-to-word list"
        )
    vectors, found = read_word_vectors(path, words, dim, match=match)
    found[0] = False
    with torch.no_grad():
        for backbone in backbones:
            weight = backbone.embedding.weight
            weight[found] = vectors[found].to(dtype=weight.dtype, device=weight.device)
    return int(found.sum())
