"""optictx.renderers: text -> page images. Pillow only; knows nothing of memory or budgets."""

from .config import RenderConfig
from .draw import Columns, LineBox, RenderError, draw_page, keep_with, line_boxes
from .fonts import FontError, FontSet
from .layout import RULE, Block, Layout, Line, Style, displayable

__all__ = [
    "RULE",
    "Block",
    "Columns",
    "FontError",
    "FontSet",
    "Layout",
    "Line",
    "LineBox",
    "RenderConfig",
    "RenderError",
    "Style",
    "displayable",
    "draw_page",
    "keep_with",
    "line_boxes",
]
