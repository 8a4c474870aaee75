"""The built-in "shapes" benchmark: procedurally rendered scenes, a caption grammar and exact relevance."""

from pcmr.data.shapes.dataset import SHAPES_SPLITS, ShapesConfig, generate_shapes_split, load_shapes
from pcmr.data.shapes.grammar import caption_text, describe
from pcmr.data.shapes.matching import shapes_relevance
from pcmr.data.shapes.render import render_scenes
from pcmr.data.shapes.scene import COLOURS, SHAPES, SIZES, Scenes, combination_labels, sample_scenes

__all__ = ["SHAPES_SPLITS", "ShapesConfig", "generate_shapes_split", "load_shapes", "caption_text", "describe",
           "shapes_relevance", "render_scenes", "COLOURS", "SHAPES", "SIZES", "Scenes", "combination_labels",
           "sample_scenes"]
