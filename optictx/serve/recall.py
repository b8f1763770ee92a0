"""`search` and `recall` over one tenant's conversations: what the MCP server (`mcp.py`) answers.

A page is found by its handle in the ledger (`Ledger.page`: the pages each request showed, by
tenant), so another tenant's handle is a page that does not exist; its turns come from the
conversation's store, the open memory's or, closed, the store on the shelf opened for the call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from ..errors import StoreError
from ..recall import (
    Found,
    Hit,
    Recalled,
    RecallError,
    Span,
    check_handle,
    found,
    hits_on,
    limit_of,
    query_terms,
    recall,
    stored,
)
from ..store import Store, open_store
from .conversations import Conversations

log = logging.getLogger("optictx.serve")
MAX_CONVERSATIONS = 100  # a search reads at most the tenant's newest this many conversations


class TenantRecall:
    """The tools' answers for `tenant` (`tools.Answers`)."""

    def __init__(self, conversations: Conversations, tenant: str) -> None:
        self.conversations, self.tenant = conversations, tenant
        self.ledger = conversations.ledger

    def recall(self, page: str, **asked: Any) -> Recalled:
        handle = check_handle(page)
        where = self.ledger.page(self.tenant, handle)
        if where is None:
            raise RecallError(f"page: no page {handle!r} in your conversations (a page's label names its handle)")
        conversation, first, last = where
        with self._store(conversation) as store:
            return recall(Span(handle, first, last), stored(store), **asked)

    def search(self, query: str, *, within: str | None = None, limit: int | None = None) -> Found:
        n, want = limit_of(limit), query_terms(query)
        if within is not None:
            where = self.ledger.page(self.tenant, check_handle(within))
            if where is None:
                raise RecallError(f"within: no page {within!r} in your conversations")
            ids, scope = [where[0]], f"in the conversation of page {check_handle(within)}"
        else:
            every = self.ledger.conversations(self.tenant)
            ids = [c["id"] for c in every[:MAX_CONVERSATIONS]]
            scope = "in your conversations" if len(every) <= MAX_CONVERSATIONS else \
                f"in your newest {MAX_CONVERSATIONS} conversations (of {len(every)}: search within= a page for another)"
        hits: list[Hit] = []
        for conversation in ids:
            with contextlib.suppress(RecallError), self._store(conversation) as store:
                turns = store.find(want, n - len(hits))
                spans = [Span(*s) for s in self.ledger.spans(self.tenant, conversation)]
                hits += hits_on(turns, spans, want, conversation if within is None else None)
            if len(hits) >= n:
                break
        return found(query, hits, n, scope)

    @contextlib.contextmanager
    def _store(self, conversation: str) -> Iterator[Store]:
        """The conversation's store: its open memory's, else its file or rows, opened for the call."""
        conv = self.conversations.find(self.tenant, conversation)
        if conv is not None:
            yield conv.memory.store
            return
        shelf = self.conversations.shelf
        if not shelf.persistent or not shelf.exists(conversation, self.tenant):
            raise RecallError(f"conversation {conversation} is no longer kept (the proxy runs without --store, "
                              "and it was closed or restarted)")
        try:
            store = open_store(shelf.spec(conversation, self.tenant), create=False)  # type: ignore[arg-type]
        except StoreError as exc:
            raise RecallError(_unreadable(conversation, exc)) from None
        try:
            yield store
        except StoreError as exc:  # damaged under the read
            raise RecallError(_unreadable(conversation, exc)) from None
        finally:
            store.close()


def _unreadable(conversation: str, exc: StoreError) -> str:
    """What the model is told of a store it cannot read: never its path (the log has that)."""
    log.warning("conversation %s: its store cannot be read: %s", conversation, exc)
    return f"conversation {conversation}: its store cannot be read (damaged or locked; the proxy's log says more)"
