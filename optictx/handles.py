"""Page handles: a short id for every page, drawn on the page and stated beside it in the prompt,
by which the exact turns it holds come back (`Memory.recall`).

A handle is a keyed digest of the page's place in its memory (`handle(key, index)`): the key is
a random secret kept with the memory's settings, so a handle is the same for the page's whole
life (every tier, compaction, reopen, restart and replica reads the key from the store), says
nothing of the page's text, and tells nothing about another memory's pages. Its letters leave out
those a reader confuses (0 and o, 1 and l, 5 and s, 8 and b, 2 and z, ...).

In the proxy the key is `key_for(conversation id)`, so a handle names one conversation's page
among all of a tenant's (`Ledger.page`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence

# Measured at TINY (tests/test_handles.py): Tesseract read j as ) ] }, c as e, 6 as b, and lost a
# leading y; the reflex reader, a CTC line reader, merges a letter drawn twice in a row, so no
# letter follows itself.
ALPHABET = "347adefhkmnprtwx"
LENGTH = 9  # 16 * 15^8 = 4.1e10 handles: a tenant's first collision is expected near 240,000 pages
PATTERN = re.compile(f"[{ALPHABET}]{{{LENGTH}}}")
LABEL_TOKENS = 20  # what a page's label costs at most (cl100k): planned with every image page


def new_key() -> str:
    return secrets.token_hex(16)


def key_for(name: str) -> str:
    """The key of a memory named `name` where the name is itself random (the proxy's conversation
    ids): anyone holding the name can say the memory's handles, no one else can."""
    return hashlib.sha256(f"optictx handles {name}".encode()).hexdigest()[:32]


def handle(key: str, index: int) -> str:
    """The handle of page `index` of the memory keyed `key`."""
    digest = hmac.new(bytes.fromhex(key), f"optictx page {index}".encode(), hashlib.sha256).digest()
    n = int.from_bytes(digest[:8], "big")
    n, r = divmod(n, len(ALPHABET))
    out = [ALPHABET[r]]
    for _ in range(LENGTH - 1):
        n, r = divmod(n, len(ALPHABET) - 1)
        out.append(ALPHABET.replace(out[-1], "")[r])
    return "".join(out)


def drawn(handle_: str) -> str:
    """The line a page opens with: the handle alone, in type twice the text's (`handle_size`),
    which at TINY is as large as the text is at the master size; "page " before it would not
    fit a column at that size."""
    return handle_


def label(handle_: str, turn_ids: Sequence[int]) -> str:
    """What the prompt says beside a page's image, in one fixed form: its handle and the span of
    turns it holds ("[page k7m3pdxaw: turns #40-#58]")."""
    first, last = (turn_ids[0], turn_ids[-1]) if turn_ids else (0, 0)
    span = f"#{first}" if first == last else f"#{first}-#{last}"
    return f"[page {handle_}: turns {span}]"
