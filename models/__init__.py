"""optictx.models: local vision-language models on optictx contexts (torch + transformers).

Install with `pip install optictx[models]`. Nothing here is imported by `import optictx`; the
R-SWA cache and the local optical model arrive with their own issues.
"""

from __future__ import annotations

from optictx.kv import KVGeometry

__all__ = ["KVGeometry"]
