"""Settings of `optictx serve`, checked once when it starts (a bad one: ConfigError naming it)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..cost import COST_MODELS
from ..errors import ConfigError
from ..store import is_postgres


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServeConfig(BaseModel):
    """`upstream`: an OpenAI-compatible base URL with its `/v1` (as the openai client takes it);
    `anthropic_upstream`: an Anthropic base URL without `/v1` (as the anthropic client takes it).
    A host other than loopback needs `allow_remote` and a `proxy_key` that clients present in
    `X-Optictx-Key`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str | None = Field(None, description="OpenAI-compatible base URL, with its /v1 "
                                 "(e.g. https://api.openai.com/v1)")
    anthropic_upstream: str | None = Field(None, description="Anthropic base URL (e.g. https://api.anthropic.com)")
    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(8765, ge=0, le=65535, description="port to bind")
    vision: str = Field("auto", description="cost model; auto: by each request's model name")
    # A hard cap: below it, compactions happen only where they pay under the provider's cache
    # prices (prefix.py). None: each request's model's own (`windows.cap_for`).
    budget: int | None = Field(None, ge=1, description="hard cap on context tokens per request (default: the "
                               "model's window less its longest answer, below any long-context price tier; 128000 "
                               "for a model optictx does not know); below it, the prompt is only compacted where "
                               "that pays under the provider's cache prices")
    keep_recent: int = Field(4, ge=0, description="turns kept as text")
    risk: float | None = Field(0.1, ge=0, le=1000, description="how far above sending the conversation as it "
                               "came a compaction may take its bill so far, as a share of that (0: never above; none: "
                               "no bound, the expected saving decides)")
    pin_task: bool = Field(True, description="keep the first user message (the task) as text in every context")
    words: bool = Field(True, description="keep the person's words and the instruction files a client forwards "
                        "(CLAUDE.md, AGENTS.md) as text in place, never drawn on a page")
    image_instructions: bool = Field(False, description="draw the system prompt's prose and the tools' "
                                     "descriptions on pages that open the first user message, sharper than "
                                     "history (names and schemas stay text)")
    store: Path | str | None = Field(None, description="where memories outlive restarts: a folder of SQLite "
                                     "files, or a postgresql://user@host/db URL replicas share (`optictx serve`'s "
                                     "default: optictx/serve in the user's data directory; :memory: keeps nothing)")
    allow_remote: bool = Field(False, description="bind a non-loopback host; clients must then send "
                               "OPTICTX_PROXY_KEY as X-Optictx-Key")
    proxy_key: str | None = Field(None, repr=False, min_length=16)  # from OPTICTX_PROXY_KEY, never a flag
    max_body_bytes: int = Field(32 * 2**20, ge=1024, description="largest request body taken (413 beyond)")
    upstream_timeout: float = Field(600.0, gt=0, description="seconds to wait for upstream bytes")
    head_timeout: float = Field(10.0, gt=0, le=3600, description="seconds a client may take to send a request's "
                                "headers, from their first byte (the connection is closed beyond)")
    max_open: int = Field(64, ge=1, description="conversations kept open in memory, each with up to "
                          "--image-cache-bytes of page images (the least recent is closed)")
    image_cache_bytes: int = Field(32 * 2**20, ge=0, description="each open conversation's page image cache")
    max_inflight_bytes: int = Field(256 * 2**20, ge=1024, description="request bytes held at once, all requests "
                                    "together (503 with Retry-After beyond)")
    max_answer_bytes: int = Field(256 * 2**20, ge=1024, description="largest whole (not streamed) upstream "
                                  "answer relayed (502 beyond); streams pass through as they arrive")
    lock_wait: float = Field(30.0, gt=0, le=3600, description="seconds a request waits for its conversation "
                             "(another request of it in progress) before a 429 with Retry-After")
    tenant_threads: int = Field(8, ge=1, le=40, description="worker threads one credential may hold at once "
                                "(of 40): one stuck conversation never stalls another tenant")
    tenancy: Literal["auto", "personal", "per-key"] = Field(
        "auto", description="whose conversations a request sees. personal: every client is one person (the "
        "dashboard needs no key; a rotating OAuth token keeps its conversations); per-key: each credential is "
        "its own tenant; auto: personal without a proxy key, per-key with one")

    @property
    def kept(self) -> str:
        """Where memories are kept, in words: a folder, PostgreSQL (never its address), or nowhere."""
        if self.store is None:
            return "nowhere (--store :memory:)"
        return "PostgreSQL" if is_postgres(self.store) else str(self.store)

    @property
    def personal(self) -> bool:
        """Every request is the one local person's (`tenancy`)."""
        return self.tenancy == "personal" or (self.tenancy == "auto" and not self.proxy_key)

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, value: object) -> object:
        return value if value is None or is_postgres(value) else Path(str(value))

    @model_validator(mode="after")
    def _check(self) -> ServeConfig:
        if not (self.upstream or self.anthropic_upstream):
            raise ValueError("give --upstream URL (OpenAI-compatible) and/or --anthropic-upstream URL")
        for name in ("upstream", "anthropic_upstream"):
            url = getattr(self, name)
            if url is not None and not url.startswith(("http://", "https://")):
                raise ValueError(f"{name} must be an http:// or https:// URL, got {url!r}")
        if self.vision != "auto" and self.vision not in COST_MODELS:
            raise ValueError(f"vision {self.vision!r} is unknown; use auto or one of {', '.join(COST_MODELS)}")
        if not is_loopback(self.host) and not (self.allow_remote and self.proxy_key):
            raise ValueError(f"host {self.host!r} is not loopback: pass --allow-remote, and clients must then "
                             "present the proxy key (OPTICTX_PROXY_KEY) in X-Optictx-Key")
        return self

    @classmethod
    def make(cls, **fields: object) -> ServeConfig:
        """Validated settings, or ConfigError naming the bad one."""
        try:
            return cls(**fields)  # type: ignore[arg-type]
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(map(str, err["loc"]))
            said = err["msg"].removeprefix("Value error, ")  # pydantic's own words, not the user's business
            raise ConfigError(f"optictx serve: {where + ': ' if where else ''}{said}") from exc
