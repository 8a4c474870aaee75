"""The relevance relation of a split: :class:`pcmr.relevance.Relevance` (defined once, re-exported here)."""

from pcmr.relevance import Relevance

__all__ = ["Relevance"]
