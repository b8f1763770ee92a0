"""optictx: an agent memory that fits any context budget.

Recent turns stay text; older turns are drawn onto page images that fade through DeepSeek-OCR's
resolution tiers as they age. `import optictx` needs no torch: models live in optictx.models.
"""

from .budget import Budget
from .context import Context
from .cost import COST_MODELS, CostModel, get_cost_model
from .errors import (
    BudgetError,
    CheckpointError,
    ConfigError,
    ConversationFileError,
    MissingExtraError,
    ModelError,
    OptictxError,
    StoreError,
    TurnError,
    TurnTooLargeError,
)
from .gate import LegibilityGate
from .kv import KV_PRESETS, KVGeometry
from .limits import Limits
from .memory import Memory
from .pieces import PageSegment, Piece, TextSegment
from .policy import Policy
from .renderers import RenderConfig, RenderError
from .schedule import AgeLadder, DropOldest, Fitter, Ladder, OldestFirst
from .tiers import Tier
from .tokens import Tokenizer, get_tokenizer
from .turns import ToolCall, Turn

__version__ = "0.1.0"

__all__ = [
    "COST_MODELS",
    "KV_PRESETS",
    "AgeLadder",
    "Budget",
    "BudgetError",
    "CheckpointError",
    "ConfigError",
    "Context",
    "ConversationFileError",
    "CostModel",
    "DropOldest",
    "Fitter",
    "KVGeometry",
    "Ladder",
    "LegibilityGate",
    "Limits",
    "Memory",
    "MissingExtraError",
    "ModelError",
    "OldestFirst",
    "OptictxError",
    "PageSegment",
    "Piece",
    "Policy",
    "RenderConfig",
    "RenderError",
    "StoreError",
    "TextSegment",
    "Tier",
    "Tokenizer",
    "ToolCall",
    "Turn",
    "TurnError",
    "TurnTooLargeError",
    "get_cost_model",
    "get_tokenizer",
]
