import re
import secrets

from optictx import Turn
from optictx.blocks import turn_blocks
from optictx.packer import Packer
from optictx.renderers import Layout, RenderConfig
from optictx.tokens import get_tokenizer


def _packer(tpp=300):
    return Packer(Layout(RenderConfig()), get_tokenizer(), tpp)


def _turns(n, words=120):
    return [Turn(role="user" if i % 2 else "assistant", content=f"turn {i} " + "lorem ipsum " * words, id=i)
            for i in range(n)]


def test_pages_respect_density_and_keep_order():
    p = _packer(300)
    for t in _turns(12):
        p.add(t)
    pages = [*p.sealed, *p.preview()]
    assert all(pg.tokens_estimate <= 300 for pg in pages)
    assert all(sum(ln.height for ln in pg.lines) <= p.layout.config.text_height for pg in pages)
    order = [tid for pg in pages for tid in pg.turn_ids]
    assert order == sorted(order)
    assert set(order) == set(range(12))
    assert [pg.index for pg in pages] == list(range(len(pages)))


def test_sealed_pages_never_change():
    p = _packer(300)
    for t in _turns(6):
        p.add(t)
    before = [(pg.digest, pg.text) for pg in p.sealed]
    for t in _turns(20)[6:]:
        p.add(t)
    assert [(pg.digest, pg.text) for pg in p.sealed[: len(before)]] == before


def test_preview_does_not_seal_or_mutate():
    """A preview seals nothing and changes nothing: the packer packs the same pages after it as
    one that never previewed."""
    p, q = _packer(300), _packer(300)
    for t in _turns(3):
        p.add(t)
        q.add(t)
    view = p.view()
    extra = p.preview(_turns(10)[3:])
    assert len(extra) > 1 and not any(pg.sealed for pg in extra)
    assert p.view() is view and [pg.digest for pg in p.preview()] == [pg.digest for pg in q.preview()]
    for t in _turns(10)[3:]:
        p.add(t)
        q.add(t)
    assert [pg.digest for pg in p.sealed] == [pg.digest for pg in q.sealed]
    assert [pg.digest for pg in p.preview()] == [pg.digest for pg in q.preview()]


def test_long_turn_spans_pages_and_short_turns_share_one():
    p = _packer(1000)
    p.add(Turn(role="user", content="word " * 3000, id=0))
    for i in range(1, 5):
        p.add(Turn(role="user", content="short", id=i))
    pages = [*p.sealed, *p.preview()]
    assert sum(1 for pg in pages if 0 in pg.turn_ids) >= 2
    assert set(range(1, 5)) <= set(pages[-1].turn_ids)


def test_turn_blocks_style_code_and_tool_calls():
    t = Turn(role="assistant", content="look:\n```py\nx = 1\n```\ndone", id=3,
             tool_calls=[{"id": "c1", "function": {"name": "grep", "arguments": "{}"}}])
    blocks = turn_blocks(t)
    assert [b.style for b in blocks] == ["header", "text", "code", "text", "code"]
    assert blocks[0].text == "#3 ASSISTANT"
    assert "grep({})" in blocks[-1].text and "c1" in blocks[-1].text
    tool = Turn(role="tool", tool_call_id="c1", content="out", id=4)
    assert [b.style for b in turn_blocks(tool)] == ["header", "code"]


def test_a_page_says_what_it_draws_and_the_transcript_keeps_every_blank():
    from optictx import Memory
    from optictx.renderers import draw_page

    def noisy(i: int) -> str:  # rows of its own in each turn: nothing on a page repeats
        return f"{i}: ls -la   \r\n\r\n\r\n\r\ntotal 8\rdone\n\n\n" + "".join(f"row {i}.{k}   \n" for k in range(30))

    mem = Memory(keep_recent=0, verbatim=False)
    for i in range(30):
        mem.add({"role": "user", "content": noisy(i)})
    assert [t.content for t in mem.transcript()] == [noisy(i) for i in range(30)]
    page = next(p for p in mem.pages if p.sealed)
    assert "\n\n\n" not in page.text and "   \n" not in page.text
    _, boxes = draw_page(page.lines, mem.layout)
    assert page.text == "\n".join(b.text for b in boxes)  # the page's text is what it draws


def _call_and_result(call_id, k):
    call = Turn(role="assistant", content=None, id=2 * k,
                tool_calls=[{"id": call_id, "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}])
    return call, Turn(role="tool", tool_call_id=call_id, content=f"file_{k}.py", id=2 * k + 1)


def test_a_long_call_id_is_drawn_as_the_same_four_digits_on_the_call_and_on_its_result():
    ids = [f"toolu_01{secrets.token_urlsafe(18)}" for _ in range(300)]
    tags = []
    for k, call_id in enumerate(ids):
        call, result = _call_and_result(call_id, k)
        drawn = re.fullmatch(r"call \[(\d{4})\] Bash\(\{\"command\": \"ls\"\}\)", turn_blocks(call)[-1].text)
        head = re.fullmatch(rf"#{2 * k + 1} TOOL RESULT \[(\d{{4}})\]", turn_blocks(result)[0].text)
        assert drawn and head and drawn.group(1) == head.group(1), (turn_blocks(call), turn_blocks(result))
        tags.append(head.group(1))
    assert len(set(tags)) >= 285  # 300 ids in 10,000 tags: a few collide by chance, never most
    assert turn_blocks(_call_and_result("call_7", 0)[1])[0].text == "#1 TOOL RESULT [call_7]"  # short: as it is
