"""What every pcmr loss module shares: its configuration, the score it trains, and the call.

Call convention (open_clip style: the model's output names are the
loss's argument names)::

    terms = loss_fn(image=Gaussian[B_img], caption=Gaussian[B_cap],
                    positives=BoolTensor[B_img, B_cap], **optional)
    terms["loss"].backward()

``terms`` is a ``dict[str, Tensor]`` of named scalar terms; the total that is
optimised is ``terms["loss"]``; the other entries are for logging. Optional
inputs a loss does not use (e.g. ``image_views`` for a triplet loss) are ignored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from pcmr.gaussian import Gaussian
from pcmr.similarity import list_similarities, pairwise


def check_similarity_name(name: str) -> None:
    """Raise ``ValueError`` listing the registered scores when ``name`` is not one of them."""

    names = list_similarities()
    if name not in names:
        raise ValueError(f"similarity must be one of {names}, got {name!r}")


@dataclass
class ScoreConfig:
    """Configuration shared by losses that train a registered pairwise score.

    Attributes:
        similarity: name of the score in ``pcmr.similarity.list_similarities()``
            (higher = more similar), e.g. ``cosine`` (VSE++), ``kl`` / ``min_kl`` /
            ``wasserstein`` (ProbVSE), ``mahalanobis_caption`` (GCE).
        similarity_kwargs: options passed to ``pcmr.similarity.pairwise`` (e.g.
            ``{"num_samples": 7}`` for a sampled score); also what
            ``loss.similarity_options()`` reports for evaluation.
    """

    similarity: str = "cosine"
    similarity_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.similarity, str):
            raise ValueError(f"similarity must be a score name (str), got {type(self.similarity).__name__}")
        check_similarity_name(self.similarity)
        if not isinstance(self.similarity_kwargs, dict):
            raise ValueError(
                f"similarity_kwargs must be a dict of options for pcmr.similarity.pairwise, "
                f"got {type(self.similarity_kwargs).__name__}"
            )


class RetrievalLoss(nn.Module):
    """Base class: holds the dataclass ``config`` and reports the score it trains.

    Subclasses implement ``forward(image, caption, positives, **optional) -> dict``.
    """

    similarity_name: str
    #: what the number ``loss`` of a training line is, for a reader who has not read the paper (printed
    #: once by the trainer); a loss with an unusual scale says so in its own
    scale_note: str = ("the training objective averaged over the epoch's steps; its scale depends on the loss "
                       "and the batch size, so compare it between epochs of one run, not between runs or losses")

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    def similarity_options(self) -> dict[str, Any]:
        """Options for ``pcmr.similarity.pairwise(self.similarity_name, ...)`` at evaluation."""
        return {}

    def config_dict(self) -> dict[str, Any]:
        """The resolved configuration as a plain dict (for saving next to a run)."""
        return asdict(self.config)

    def extra_repr(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in self.config_dict().items())


class ScoredLoss(RetrievalLoss):
    """A loss defined on the score matrix of a registered similarity (``ScoreConfig``)."""

    @property
    def similarity_name(self) -> str:  # type: ignore[override]
        return self.config.similarity

    def similarity_options(self) -> dict[str, Any]:
        return dict(self.config.similarity_kwargs)

    def pairwise_scores(self, image: Gaussian, caption: Gaussian) -> Tensor:
        """``S = pcmr.similarity.pairwise(similarity, image, caption)``: ``[B_img, B_cap]``."""

        return pairwise(self.config.similarity, image, caption, **self.config.similarity_kwargs)
