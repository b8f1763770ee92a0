"""Conversations from a stateless API. Each request carries its whole history; the chain of its
turns' digests, rooted in the caller's credential and the conversation's name, finds the memory
that holds exactly that history. A memory only ever grows: a request that edits or regenerates
an earlier turn gets a new memory (a fork) holding its own history, so no turn of another branch
can reach its context."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import handles
from ..context import Context
from ..errors import OptictxError
from ..memory import Memory
from ..turns import Turn
from ..windows import DEFAULT_CAP
from ..words import first_said, said
from .dialect import ApiError
from .ledger import Ledger
from .meter import Meter
from .shelf import Shelf

log = logging.getLogger("optictx.serve")


# Every header the supported APIs and their common gateways take a credential in: OpenAI and
# Anthropic (Authorization, x-api-key), Azure OpenAI (api-key), Gemini (x-goog-api-key), Azure API
# Management (Ocp-Apim-Subscription-Key), Portkey, Cloudflare AI Gateway, Helicone, and a proxy
# in front (Proxy-Authorization). A client that authenticates in any of them is its own tenant.
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key", "ocp-apim-subscription-key",
                      "x-portkey-api-key", "cf-aig-authorization", "helicone-auth", "proxy-authorization")


def _secret(name: str, value: str) -> str:
    value = value.strip()
    if name.endswith("authorization") and value[:7].lower() == "bearer ":
        return value[7:].strip()
    return value


def credential(headers: Mapping[str, str]) -> str:
    """The caller's credentials ("" when none): the secret of every credential header it sends
    (a Bearer token without its scheme), in one string. One key sent the same way to both APIs
    (`x-api-key: K`, `Authorization: Bearer K`) is one credential."""
    secrets_ = sorted({s for name in CREDENTIAL_HEADERS if (s := _secret(name, headers.get(name) or ""))})
    return "\0".join(secrets_)


def tenant_of(headers: Mapping[str, str], *, personal: bool = False) -> str:
    """Whose conversations these are: a digest of the credential, never the credential itself.
    Without a credential, or on a personal proxy (`ServeConfig.tenancy`) whatever it is: the
    keyless tenant, which sees only what other such requests made."""
    secret = "" if personal else credential(headers)
    return hashlib.sha256(b"optictx tenant\0" + secret.encode("utf-8", "surrogatepass")).hexdigest()[:32]


# Bidirectional controls (U+202A-U+202E, U+2066-U+2069, and the marks): in a title they reorder
# what the dashboard shows, so a title could pass for another.
_BIDI = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C])


def title_of(turns: Sequence[Turn]) -> str:
    """A conversation's title: the start of the person's first words (`words.said`), without
    bidirectional controls."""
    first = first_said(turns)
    return "" if first is None else said(turns[first]).translate(_BIDI)[:120]


def chain(tenant: str, name: str | None, turns: Sequence[Turn]) -> list[bytes]:
    """The digest of every prefix: turn i's is over the one before it and turn i as stored."""
    head = hashlib.sha256(f"optictx chain\0{tenant}\0{name or ''}".encode("utf-8", "surrogatepass")).digest()
    out = []
    for t in turns:
        body = json.dumps(t.model_dump(mode="json", exclude={"id"}), sort_keys=True, ensure_ascii=False)
        head = hashlib.sha256(head + body.encode("utf-8", "surrogatepass")).digest()
        out.append(head)
    return out


class BusyError(ApiError):
    """A conversation another request holds past the wait: a 429, retried shortly."""

    def __init__(self, conversation: str, waited: float) -> None:
        super().__init__(f"conversation {conversation} is busy with another request (waited {waited:g} s); retry "
                         "shortly", status=429, kind="rate_limit_error", retry_after=1)


@dataclass(eq=False)
class Conversation:
    id: str
    tenant: str
    memory: Memory
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: object = None  # the latest context sent (for the dashboard's contact sheet)
    meter: Meter = field(default_factory=Meter)  # its modeled bill, request by request
    closed: bool = False
    name: str | None = None
    drawn: int = 0  # sealed pages drawn ahead so far (`drawahead.py`): pages seal in order, never change
    shown: dict[str, tuple[int, int]] = field(default_factory=dict)  # pages in the ledger: handle -> span
    sealed_shown: int = 0  # the memory's first pages, sealed, all in `shown`


class Conversations:
    """Memories by conversation, at most `max_open` open (the least recently used is closed; with
    a store it reopens from it, its pages not drawn again).

    Several processes (replicas) may share one store and ledger: a conversation grows only inside
    its memory's batch, under the store's write lock, and only if the memory still holds what
    the ledger said, so two replicas never interleave two requests' turns in one memory."""

    def __init__(self, make: Callable[[str | Path | None, str, int, str], Memory],
                 reopen: Callable[[str | Path], Memory], shelf: Shelf, ledger: Ledger, max_open: int = 64,
                 lock_wait: float = 30.0) -> None:
        self._make, self._reopen, self.shelf, self.ledger, self._max = make, reopen, shelf, ledger, max_open
        self.lock_wait = lock_wait
        self._open: OrderedDict[str, Conversation] = OrderedDict()
        self._opening: dict[str, threading.Event] = {}  # conversations being reopened: set when done
        self._lock = threading.Lock()  # guards `_open` and `_opening` only, never held across I/O
        # A new conversation's id (its pages' handles are keyed by it): random, but a replay names
        # its conversations in order, so that its bill is the same on every run (`optictx bill`).
        self.new_id: Callable[[], str] = lambda: secrets.token_hex(8)

    def _get(self, conversation: str) -> Conversation | None:
        """An open conversation, reopened from the store if it has one. The proxy-wide lock is
        held only to look it up and put it in: the ledger query and the reopen (which may replay
        thousands of turns) happen outside it, so they stall no other conversation; a request
        for the same one meanwhile waits for that reopen (`_opening`) instead of doing it twice."""
        while True:
            with self._lock:
                conv = self._open.get(conversation)
                if conv is not None:
                    self._open.move_to_end(conversation)
                    return conv
                gate = self._opening.get(conversation)
                mine = gate is None
                if mine:
                    gate = self._opening[conversation] = threading.Event()
            if mine:
                break
            if not gate.wait(self.lock_wait):  # type: ignore[union-attr]
                raise BusyError(conversation, self.lock_wait)
        try:
            tenant = self.ledger.owner(conversation)
            if tenant is None or not self.shelf.exists(conversation, tenant):
                self.ledger.forget(conversation)
                return None
            spec = self.shelf.spec(conversation, tenant)
            assert spec is not None
            conv = Conversation(conversation, tenant, self._reopen(spec))
            with self._lock:
                self._open[conversation] = conv
                idle = self._idle()
            self._close(idle)
            return conv
        finally:
            with self._lock:
                self._opening.pop(conversation, None)
            gate.set()  # type: ignore[union-attr]

    def _new(self, tenant: str, name: str | None, vision: str, budget: int) -> Conversation:
        """A new conversation, locked, open but not in the ledger until its first turns are in
        (`_grow`); its pages drawn for `vision` and `budget`, its first request's. Its memory is
        made outside the proxy-wide lock (a store file or a database connection)."""
        conversation = self.new_id()
        memory = self._make(self.shelf.spec(conversation, tenant), vision, budget, handles.key_for(conversation))
        conv = Conversation(conversation, tenant, memory, name=name)
        conv.lock.acquire()
        with self._lock:
            self._open[conversation] = conv
            idle = self._idle()
        self._close(idle)
        return conv

    def _idle(self) -> list[Conversation]:
        """The least recently used conversations past `max_open`, taken out and locked, to close
        once the proxy-wide lock is released (`_close`); one in use stays open. The caller holds
        self._lock."""
        out = []
        for key in list(self._open)[: max(0, len(self._open) - self._max)]:
            conv = self._open[key]
            if conv.lock.acquire(blocking=False):
                conv.closed = True  # a request that found it before retries (`holding`)
                del self._open[key]
                out.append(conv)
        return out

    def _close(self, convs: list[Conversation]) -> None:
        for conv in convs:
            try:
                conv.memory.close()
                if not self.shelf.persistent:
                    self.ledger.forget(conv.id)  # nothing left to reopen
            finally:
                conv.lock.release()

    def holding(self, tenant: str, name: str | None, turns: Sequence[Turn], vision: str = "deepseek-ocr",
                budget: int = DEFAULT_CAP) -> Conversation:
        """The conversation holding exactly `turns`, locked (release `.lock` when done): the one
        they continue, with the new turns added, or a new one (a fork where they branch off)
        whose pages are drawn for `vision` and `budget` (`VisionProfile.render`)."""
        digests = chain(tenant, name, turns)
        while True:
            hit = self.ledger.longest(digests)
            conv = self._get(hit[0]) if hit else None
            if conv is not None and hit is not None:
                self._acquire(conv)
                if conv.closed:  # closed while we waited for it
                    conv.lock.release()
                    continue
                if self._grow(conv, name, turns, digests, hit[1]):
                    return conv
                conv.lock.release()  # it went on another way (a branch): a fork holds this history
                log.info("conversation %s forks at turn %d", conv.id, hit[1])
            conv = self._new(tenant, name, vision, budget)
            self._grow(conv, name, turns, digests, 0)
            return conv

    def continued(self, tenant: str, conversation: str, new: Sequence[Turn], held: int) -> Conversation:
        """The tenant's open `conversation`, locked, with `new` added after its first `held` turns
        (`Proxy.grow`: its caller knows what the request adds). Its chain is not extended: a
        request that comes whole later finds it where the chain last reached and confirms the
        rest (`_holds`). An OptictxError when it is not open or holds other than `held` turns."""
        conv = self.find(tenant, conversation)
        if conv is None:
            raise OptictxError(f"conversation {conversation} is not open here")
        self._acquire(conv)
        try:
            with conv.memory.batch():
                if conv.closed or len(conv.memory) != held:
                    raise OptictxError(f"conversation {conversation} holds {len(conv.memory)} turns, not {held}")
                for t in new:
                    conv.memory.add(t)
        except BaseException:
            conv.lock.release()
            raise
        return conv

    def exactly(self, tenant: str, name: str | None, turns: Sequence[Turn]) -> Conversation | None:
        """The conversation holding `turns` and nothing more, locked, or None (nothing is added)."""
        digests = chain(tenant, name, turns)
        hit = self.ledger.longest(digests[-1:])
        conv = self._get(hit[0]) if hit else None
        if conv is None or hit is None:
            return None
        self._acquire(conv)
        if conv.closed or len(conv.memory) != hit[1] or hit[1] != len(turns):
            conv.lock.release()
            return None
        return conv

    def _acquire(self, conv: Conversation) -> None:
        """The conversation's lock, waited for at most `lock_wait` seconds (a 429 then: the
        worker thread is never held longer by another request of it)."""
        if not conv.lock.acquire(timeout=self.lock_wait):
            raise BusyError(conv.id, self.lock_wait)

    def _grow(self, conv: Conversation, name: str | None, turns: Sequence[Turn], digests: list[bytes],
              held: int) -> bool:
        """Add turns[held:] and return True, or False (nothing added) when the memory no longer
        holds exactly turns[:held] plus, perhaps, some more of them. A new conversation enters
        the ledger only once its turns are all in, so a request refused on the way (a turn over
        the limits) leaves nothing behind."""
        try:
            with conv.memory.batch():  # the store's write lock: another replica's adds wait
                have = len(conv.memory)  # caught up with every replica's committed turns
                if have != held and not (held < have <= len(turns) and self._holds(conv, name, digests, have)):
                    return False
                for t in turns[have:]:
                    conv.memory.add(t)
            if held == 0:
                self.ledger.new_conversation(conv.id, conv.tenant, conv.name, title_of(turns))
            # From `held`: a replica killed between its commit and this line left those digests out.
            self.ledger.extend(conv.id, digests, held)
            return True
        except BaseException:
            if held == 0:
                self._discard(conv)
            conv.lock.release()
            raise

    @staticmethod
    def _holds(conv: Conversation, name: str | None, digests: list[bytes], have: int) -> bool:
        """Whether the memory's `have` turns are the request's first `have`: another replica grew
        it with this same history (and may not have reached the ledger yet)."""
        return chain(conv.tenant, name, conv.memory.transcript()[:have])[-1] == digests[have - 1]

    def _discard(self, conv: Conversation) -> None:
        with self._lock:
            self._open.pop(conv.id, None)
        conv.memory.close()
        conv.closed = True
        self.shelf.discard(conv.id, conv.tenant)

    def find(self, tenant: str, conversation: str) -> Conversation | None:
        """The tenant's open conversation `conversation`, or None (another tenant's is None too)."""
        with self._lock:
            conv = self._open.get(conversation)
        return conv if conv is not None and conv.tenant == tenant else None

    def latest(self, tenant: str, conversation: str) -> Context | None:
        """The latest context the tenant's conversation sent (None: none, or another tenant's):
        kept while the conversation is open; after a restart, or once it was
        closed, drawn again from its memory's plan state with the newest request's budget,
        vision and time, which give the same context (nothing new appended, the cache as warm
        as it was)."""
        conv = self.find(tenant, conversation)
        if conv is not None and conv.last is not None:
            return conv.last  # type: ignore[return-value]
        row = self.ledger.latest(tenant, conversation)
        if row is None:
            return None
        conv = self._get(conversation)
        if conv is None or conv.tenant != tenant:
            return None
        self._acquire(conv)
        try:
            if conv.last is None and not conv.closed:
                conv.last = conv.memory.context(budget=row["budget"], vision=row["vision"], commit=False,
                                                at=row["at"], tools=row["tools"])
            return conv.last  # type: ignore[return-value]
        finally:
            conv.lock.release()

    def close(self) -> None:
        with self._lock:
            for conv in self._open.values():
                with conv.lock:
                    conv.memory.close()
            self._open.clear()
            self.ledger.close()
