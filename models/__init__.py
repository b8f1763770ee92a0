"""optictx.models: local vision-language models on optictx contexts (torch + transformers).

Install with `pip install optictx[models]`. Nothing here is imported by `import optictx`, and
`KVGeometry` (torch-free) imports without torch; the rest loads torch on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from optictx.errors import need
from optictx.kv import KVGeometry

_LAZY = {
    "RSWACache": ".rswa", "RSWALayer": ".rswa", "rswa_cache": ".rswa", "rswa_mask": ".rswa",
    "WindowedNGramGuard": ".guard", "distinct_n": ".guard",
    "tiny_unlimited_ocr": ".tiny", "tiny_deepseek_ocr2": ".tiny", "tiny_tokenizer": ".tiny",
    "Views": ".pages", "views": ".families", "encode": ".pages",
    "Family": ".families", "FAMILIES": ".families", "family_of": ".families",
    "OpticalModel": ".optical", "OpticalInputs": ".optical", "VisualCache": ".optical", "build_inputs": ".optical",
    "UnlimitedOcrReader": ".optical",
}
_NUMPY_ONLY = {"ReflexReader": ".reflex", "ReflexModel": ".reflex"}  # no torch needed to read

__all__ = ["KVGeometry", *_LAZY, *_NUMPY_ONLY]


def __getattr__(name: str) -> Any:
    if name in _NUMPY_ONLY:
        return getattr(import_module(_NUMPY_ONLY[name], __name__), name)
    if name in _LAZY:
        for dependency in ("torch", "transformers"):
            need(dependency, "models")  # says which extra to install, not only "No module named 'torch'"
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
