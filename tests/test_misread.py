"""A check on what was read (`Context.check`, `optictx/misread.py`): strings in an answer a
character or two off one that only a page shows are flagged as probable misreadings; strings read
right, strings held as text too, and strings the answer made up are not; the answer is never changed."""

from __future__ import annotations

import random
import re
import time

import pytest
from conftest import needs_tesseract
from hypothesis import given, settings
from hypothesis import strategies as st

from optictx import Budget, Memory
from optictx.tiers import Tier

HEX = "0123456789abcdef"


def _levenshtein(a: str, b: str) -> int:
    """The whole table, the textbook way: the oracle for the check's banded one."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def _memory(planted: list[str]) -> Memory:
    """Planted ids on the first pages only: later turns push them out of the text."""
    mem = Memory(budget=Budget(tokens=1500), keep_recent=2, factsheet=None, key="5eed" * 8, verbatim=False)
    for i in range(0, len(planted), 4):
        mem.add({"role": "user", "content": "Record the build ids."})
        mem.add({"role": "assistant", "content": "\n".join(f"id{k:02d} {planted[k]}" for k in range(i, i + 4))})
    for i in range(30):
        mem.add({"role": "user", "content": f"next step {i}"})
        mem.add({"role": "assistant", "content": "ok " * 30})
    return mem


@pytest.fixture(scope="module")
def planted() -> list[str]:
    rng = random.Random(7)
    return ["".join(rng.choice(HEX) for _ in range(12)) for _ in range(40)]


@needs_tesseract
@pytest.mark.parametrize("tier", [Tier.SMALL, Tier.TINY])
def test_what_tesseract_misreads_is_flagged_and_what_it_reads_right_is_not(planted, tier):
    from optictx.readers import TesseractReader

    mem = _memory(planted)
    ctx = mem.context()
    pages = [s.page for s in ctx.pages if s.tier.is_image]
    assert pages and not any(p in s.text for p in planted for s in ctx.text_segments), "only on pages"
    answer = "\n".join(mem.images.read(TesseractReader(), pages, tier))  # a reader's answer: what it read
    read = {int(m.group(1)): m.group(2) for m in re.finditer(r"id(\d\d) \W*(\w+)", answer) if int(m.group(1)) < 40}
    flagged = {(f.said, f.likely) for f in ctx.check(answer)}
    right = [k for k, v in read.items() if v == planted[k]]
    near = [k for k, v in read.items() if v != planted[k] and len(v) >= 6 and _levenshtein(v, planted[k]) <= 2]
    assert right and near, "the reader got some right and some a character or two off, at this tier"
    assert not any(said == planted[k] for said, _ in flagged for k in right)
    assert all((read[k], planted[k]) in flagged for k in near)
    assert all(_levenshtein(said, likely) <= 2 for said, likely in flagged)
    assert all(f.page == pages[0].handle for f in ctx.check(answer) if f.likely in planted[:8])


def test_made_up_strings_and_strings_held_as_text_are_not_misreadings(planted):
    mem = _memory(planted)
    ctx = mem.context()
    made_up = "The build id is 9f3e2d1c0b4a and the function is `resolve_total_v2`."
    assert ctx.check(made_up) == []
    recent = ctx.text_segments[-1].text  # held as text: the model could read it there
    assert ctx.check(recent) == []
    off = planted[3][:5] + ("0" if planted[3][5] != "0" else "1") + planted[3][6:]
    [flag] = ctx.check(f"It was {off}.")
    assert (flag.said, flag.likely) == (off, planted[3])


def _near(s: str) -> str:
    return s[:5] + ("0" if s[5] != "0" else "1") + s[6:]


def test_a_near_miss_of_a_string_held_as_text_too_is_not_flagged(planted):
    """A string a page shows and the text holds as well: the model could read it in the text, so
    a string a character off it is no misreading of the page (the check once compared it)."""
    mem = _memory(planted)
    mem.add({"role": "user", "content": f"Check build {planted[5]} again."})
    ctx = mem.context()
    assert planted[5] in "".join(s.text for s in ctx.text_segments)
    assert any(planted[5] in p.page.text for p in ctx.pages if p.tier.is_image)
    assert ctx.check(f"It was {_near(planted[5])}.") == []
    [flag] = ctx.check(f"It was {_near(planted[3])}.")  # one on a page only still is
    assert flag.likely == planted[3]


NAME = "reconcile_refunds_by_currency"  # an identifier, not a fact: no factsheet keeps it as text


def _planted(sample: list[dict]) -> list[dict]:
    """The sample with NAME said once, early: later requests hold it on pages only."""
    messages = [dict(m) for m in sample[:90]]
    at = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and isinstance(m.get("content"), str)
              and m["content"])
    messages[at]["content"] += f"\n\nThe helper to change is `{NAME}` in ledger/reports.py."
    return messages


def _record(ledger, tenant: str, n: int) -> list[dict]:
    """The misreadings of the `n`th request, once recorded (a stream's record is written as it ends)."""
    for _ in range(100):
        conversations = ledger.conversations(tenant)
        if conversations and conversations[0]["requests"] >= n:
            return ledger.requests(tenant, conversations[0]["id"])[n - 1]["misread"]
        time.sleep(0.05)
    raise AssertionError(f"request {n} was never recorded")


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxy_records_a_misreading_and_says_it_where_the_answer_is_whole(upstream, sample, stream):
    openai = pytest.importorskip("openai")
    from optictx.serve import ServeConfig
    from optictx.serve.conversations import tenant_of

    from serve_peers import Proxy

    off = NAME.replace("currency", "curency")
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, tenancy="per-key"))
    try:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
        messages = _planted(sample)
        for reply, flagged in ((f"I changed `{off}` as asked.", True), (f"I changed `{NAME}`.", False)):
            upstream.reply = reply
            raw = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=messages,
                                                                     stream=stream)
            answer = raw.parse()
            text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices) if stream else \
                answer.choices[0].message.content
            assert text == reply  # the answer is never changed
            sent = upstream.last("/v1/chat/completions").body["messages"]
            assert not any(NAME in str(m.get("content")) for m in sent[-8:]), "by now it is on a page only"
            header = raw.headers.get("x-optictx-misread")
            tenant = tenant_of({"authorization": "Bearer key-a"})
            recorded = _record(proxy.proxy.ledger, tenant, 1 if flagged else 2)
            if flagged:
                assert [(m["said"], m["likely"]) for m in recorded] == [(off, NAME)]
                assert recorded[0]["page"] in str(sent)  # the page it came from, by the handle in its label
                assert (header is None) if stream else header.startswith(f"1 {off}={NAME}@")
            else:
                assert recorded == [] and header is None
    finally:
        proxy.stop()


@given(text=st.text(max_size=3000))
@settings(max_examples=200, deadline=None)
def test_a_header_value_is_printable_ascii_and_bounded_whatever_it_quotes(text):
    """Every HTTP stack takes it (a NUL or a control character lost a paid answer), and it says
    the text: unescaped, it gives back the text's start."""
    from optictx.serve.answer import MAX_HEADER, header_value

    value = header_value(text)
    assert all(" " <= c <= "~" for c in value) and len(value) <= MAX_HEADER
    plain = "".join(c for c in text if " " <= c <= "~")
    assert value.startswith(plain[: len(value)]) if plain == text else len(value) >= min(len(text), MAX_HEADER)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x7f", "\x1b", "\x08", "\u00e9"])
def test_a_misreading_that_holds_any_character_never_loses_the_answer(upstream, sample, char):
    """The near-miss a model writes may hold a NUL or a control character: the client still gets
    its answer, whole and unchanged, and the header that says the misreading is printable ASCII."""
    openai = pytest.importorskip("openai")
    from optictx.serve import ServeConfig

    from serve_peers import Proxy

    off = NAME.replace("currency", f"curr{char}ncy")
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, tenancy="per-key"))
    try:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
        upstream.reply = f"I changed `{off}` as asked."
        raw = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=_planted(sample))
        assert raw.parse().choices[0].message.content == upstream.reply
        header = raw.headers["x-optictx-misread"]
        assert header.startswith("1 ") and all(" " <= c <= "~" for c in header), header
    finally:
        proxy.stop()


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x7f", "\x1b", "\x08", "\r\n", "\u00e9", "\ud800"])
def test_the_misread_header_escapes_what_a_near_miss_holds(char):
    """A near miss a model wrote may hold any character (a URL with a NUL in it): the header
    says it escaped, in printable ASCII, never raw."""
    from optictx.misread import Misread
    from optictx.serve.answer import misread_header

    header = misread_header([Misread(f"https://ci.example.com/b{char}uild/42", "https://ci.example.com/build/42",
                                     "abcdefghj")] * 3)
    assert header.startswith("3 ") and all(" " <= c <= "~" for c in header), header
    assert ascii(char)[1:-1] in header


def _prefixed_memory() -> tuple[Memory, list[str]]:
    """Pages of 400 identifiers sharing a long prefix, each said once and only on a page."""
    names = [f"reconcile_refunds_by_currency_{k:04d}x" for k in range(400)]
    mem = Memory(budget=Budget(tokens=1500), keep_recent=2, factsheet=None, key="5eed" * 8, verbatim=False)
    for i in range(0, len(names), 20):
        mem.add({"role": "user", "content": "List the helpers."})
        mem.add({"role": "assistant", "content": "\n".join(f"`{n}`" for n in names[i : i + 20])})
    for i in range(20):
        mem.add({"role": "user", "content": f"next step {i}"})
        mem.add({"role": "assistant", "content": "ok " * 30})
    return mem, names


def test_the_check_is_bounded_in_work_whatever_the_answer_quotes(monkeypatch):
    """200 quoted near misses of identifiers sharing a prefix (40 s unbounded): the check stops
    at its bound on edit-distance work, and the answer goes with what it found by then."""
    import optictx.misread as misread

    mem, names = _prefixed_memory()
    ctx = mem.context()
    cells = []
    real = misread.distance
    monkeypatch.setattr(misread, "distance", lambda a, b, most: cells.append(len(a) * len(b)) or real(a, b, most))
    monkeypatch.setattr(misread, "MAX_SECONDS", 1e9)  # the work bound alone
    answer = " ".join(f"`{n[:-1]}y`" for n in names[:200])
    found = ctx.check(answer)
    assert found and sum(cells) <= misread.MAX_CELLS  # flagged some, then stopped
    assert len(found) < 200


def test_the_check_answers_without_the_rest_rather_than_late(monkeypatch, sample):
    """Past its deadline the check stops where it is: an answer is never held for it."""
    import optictx.misread as misread

    mem, names = _prefixed_memory()
    ctx = mem.context()
    answer = f"I changed `{names[3][:-1]}y`."
    assert ctx.check(answer)  # a near miss, flagged in time
    monkeypatch.setattr(misread, "MAX_SECONDS", -1.0)
    assert ctx.check(answer) == []
