"""`optictx serve`: a memory proxy for the OpenAI Chat Completions and Anthropic Messages APIs.

Point a chat app's base URL at it: every request goes upstream with its history fitted to a
budget (old turns as page images), and the answer comes back unchanged. Needs the `serve` extra
(starlette, uvicorn, httpx); nothing in the core imports this package.
"""

from __future__ import annotations

from .config import ServeConfig

__all__ = ["ServeConfig", "create_app", "run"]


def create_app(config: ServeConfig):
    """The ASGI app for `config` (a Starlette app; imported here, as the extra may be missing)."""
    from .app import create_app as create

    return create(config)


def run(config: ServeConfig) -> None:
    """Serve `config` with uvicorn until interrupted."""
    from .app import run as serve

    serve(config)
