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

Word embeddings start random (uniform in [-0.1, 0.1], as VSE++) or from a GloVe-format text
file the user supplies (:func:`load_word_vectors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pcmr.models.features import EncodedFeatures

__all__ = ["GRUTextBackbone", "get_captions", "last_outputs", "load_word_vectors", "run_gru"]


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


def read_word_vectors(path: str | Path, words: Sequence[str], dim: int) -> tuple[Tensor, Tensor]:
    """Read vectors for ``words`` from a GloVe-format text file (``word v_1 ... v_dim`` per line).

    Returns ``vectors [len(words), dim]`` (float32, zeros where missing) and ``found [len(words)]``
    (bool). A word is matched exactly, else lower-cased. Raises ``ValueError`` naming the file and
    line when a line has a different dimension or a non-number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"word vector file {str(path)!r} does not exist")
    index: dict[str, int] = {}
    for position, word in enumerate(words):
        index.setdefault(word, position)
    for position, word in enumerate(words):
        index.setdefault(word.lower(), position)
    vectors = torch.zeros(len(words), dim)
    found = torch.zeros(len(words), dtype=torch.bool)
    exact = torch.zeros(len(words), dtype=torch.bool)
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line_number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").rstrip().split(" ")
            if len(parts) < 2:
                continue
            word, values = parts[0], parts[1:]
            if len(values) != dim:
                raise ValueError(
                    f"word vector file {str(path)!r} line {line_number}: expected 'word' followed by "
                    f"{dim} numbers (text_encoder.word_dim), got {len(values)}"
                )
            row = index.get(word)
            if row is None or exact[row]:
                continue
            try:
                vectors[row] = torch.tensor([float(v) for v in values])
            except ValueError as error:
                raise ValueError(f"word vector file {str(path)!r} line {line_number}: {error}") from error
            found[row] = True
            exact[row] = words[row] == word
    return vectors, found


def load_word_vectors(model: nn.Module, path: str | Path, words: Sequence[str]) -> int:
    """Initialise the word embeddings of every GRU text backbone in ``model`` from a GloVe file.

    ``words[i]`` is the word of token id ``i`` (the vocabulary's id-to-word list). Rows of words
    absent from the file keep their random values; ``<pad>`` (id 0) stays zero. Returns the number
    of words found. The vectors become part of the weights, so ``save_model`` keeps them.
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
    vectors, found = read_word_vectors(path, words, dim)
    found[0] = False
    with torch.no_grad():
        for backbone in backbones:
            weight = backbone.embedding.weight
            weight[found] = vectors[found].to(dtype=weight.dtype, device=weight.device)
    return int(found.sum())
