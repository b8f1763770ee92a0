import re

import pytest

from optictx import Budget, Memory, Tier
from optictx.facts import Factsheet, find_facts


@pytest.mark.parametrize(("text", "facts"), [
    ("see https://example.com/a?b=1, then", ["https://example.com/a?b=1"]),
    ("mail ops@ledger.example.org now", ["ops@ledger.example.org"]),
    ("id a38fd547-923a-7369-94e3-bf911a61dbe2 ok", ["a38fd547-923a-7369-94e3-bf911a61dbe2"]),
    ("on 2026-03-01 at noon", ["2026-03-01"]),
    ("edit ledger/tax.py and /etc/app.conf", ["ledger/tax.py", "/etc/app.conf"]),
    ("customer cus_5f301850c5 bought SKU-1976", ["cus_5f301850c5", "SKU-1976"]),
    ("commit ee7653c9bc8d landed", ["ee7653c9bc8d"]),
    ("total 1093.50 for 7 items, code 4417", ["1093.50", "4417"]),
    ("the quick brown fox jumped over 3 dogs", []),
])
def test_find_facts(text, facts):
    assert find_facts(text) == facts


def test_imaged_turns_oldest_first_and_deduplicated():
    sheet, count = Factsheet(), Memory().tokenizer.count
    lines = sheet.lines({1: ("4417", "ee7653c9bc8d"), 5: ("4417",), 3: ()}, count)
    assert lines == [(1, "#1: 4417 ee7653c9bc8d")]  # the oldest page is the blurriest
    many = Factsheet(max_tokens=50).lines({i: (str(10**6 + i),) for i in range(1000)}, count)
    assert 3 < len(many) < 30 and many[0] == (0, "#0: 1000000")  # stops past max_tokens


def test_select_keeps_the_longest_run_of_most_needed_lines_that_fits():
    sheet, count = Factsheet(max_tokens=10_000), Memory().tokenizer.count
    lines = [(i, f"#{i}: {'x' * (i % 7)} {1000000 + i}") for i in range(300, 0, -1)]

    def cost(run):
        return count("\n".join(line for _, line in run))

    for room in (40, 97, 333, 1000):
        kept = sheet.select(lines, room, cost)
        assert kept == lines[: len(kept)] and cost(kept) <= room < cost(lines[: len(kept) + 1])
    assert sheet.select(lines, 5, cost) == []
    assert cost(Factsheet(max_tokens=50).select(lines, 1000, cost)) <= 50


def _needles(mem, n=40):
    numbers = [str(1_000_000 + 7919 * i) for i in range(n)]
    for i, num in enumerate(numbers):
        mem.add({"role": "user", "content": f"Remember: the code for vault {i} is {num}. " + "filler text " * 60})
        mem.add({"role": "assistant", "content": "Noted."})
    return numbers


def test_factsheet_keeps_numbers_of_imaged_turns_within_budget():
    mem = Memory(budget=Budget(tokens=6000), keep_recent=2, verbatim=False)
    numbers = _needles(mem)
    ctx = mem.context()
    assert ctx.tokens <= 6000
    imaged = {tid for p in ctx.pages if p.tier.is_image for tid in p.turn_ids}
    for i, num in enumerate(numbers):
        if 2 * i in imaged:
            assert num in ctx.factsheet
    assert ctx.report()["factsheet_tokens"] > 0
    # each imaged turn's line comes right after the last sealed page showing it, in the exports too
    segs = ctx.segments
    for i, seg in enumerate(segs):
        if getattr(seg, "kind", None) == "factsheet":
            page = segs[i - 1]
            assert page.page.sealed and page.tier.is_image
            assert {int(line.split(":")[0][1:]) for line in seg.text.splitlines()} <= set(page.turn_ids)
    assert all(p.tier is Tier.TEXT for p in ctx.pages if not p.page.sealed)  # the open page is text
    parts = [p.get("text") for p in ctx.to_openai()[0]["content"]]
    blocks = [b.get("text") for b in ctx.to_anthropic()[1][0]["content"]]
    sheets = [s for s in segs if getattr(s, "kind", None) == "factsheet"]
    assert sheets
    for seg in sheets:
        assert seg.text in parts and seg.text in blocks


def test_factsheet_makes_room_by_demoting_pages_when_tight():
    mem = Memory(budget=Budget(tokens=1500), keep_recent=2)
    _needles(mem)
    ctx = mem.context()
    assert ctx.tokens <= 1500
    assert ctx.factsheet and ctx.report()["factsheet_tokens"] <= mem.factsheet.max_tokens


def test_factsheet_takes_at_most_its_share_of_a_small_budget():
    budgets = {}
    for share in (0.1, 1.0):
        mem = Memory(budget=Budget(tokens=3000), keep_recent=2, factsheet=Factsheet(budget_share=share))
        _needles(mem, 100)
        ctx = mem.context()
        budgets[share] = ctx.report()["factsheet_tokens"]
        assert ctx.tokens <= 3000 and budgets[share] <= mem.factsheet.room(3000) == min(1024, share * 3000)
    assert budgets[1.0] > budgets[0.1] > 0  # the share is what limited it


def test_factsheet_can_be_turned_off():
    mem = Memory(budget=Budget(tokens=6000), keep_recent=2, factsheet=None, verbatim=False)
    _needles(mem)
    assert mem.context().factsheet == ""
    # On a live memory too (the NIAH harness's optical-only context), and back on again.
    mem.factsheet = Factsheet()
    assert mem.context().factsheet
    mem.factsheet = None
    assert mem.context().factsheet == ""
    # Another finder on the same memory: its own strings, not the ones the last one found.
    mem.factsheet = Factsheet(finder=lambda text: ["MARK"] if "7" in text else [])
    assert "MARK" in mem.context().factsheet and not re.search(r"\d{7}", mem.context().factsheet)


def test_dropped_turns_are_listed_first_and_marked_gone():
    sheet, count = Factsheet(), Memory().tokenizer.count
    lines = sheet.lines({1: ("1000001",), 2: ("1000002",), 7: ("1000007",), 8: ("1000008",)}, count, gone={1, 2})
    assert [line for _, line in lines] == ["#2 gone: 1000002", "#1 gone: 1000001", "#7: 1000007", "#8: 1000008"]


def test_tool_results_come_after_what_was_said_and_shown_strings_are_not_repeated():
    sheet, count = Factsheet(), Memory().tokenizer.count
    facts = {1: ("1000001",), 2: ("1000002", "ledger/tax.py"), 3: ("1000003",), 9: ("1000009",)}
    lines = sheet.lines(facts, count, gone={1, 2, 3}, refetchable={3}, shown={"ledger/tax.py", "1000009"})
    # said (newest first), then the dropped tool result, then imaged turns; a gone turn's string
    # that the context still shows is not repeated, an imaged turn keeps its own
    assert [line for _, line in lines] == ["#2 gone: 1000002", "#1 gone: 1000001", "#3 gone: 1000003", "#9: 1000009"]


def test_pages_the_factsheet_pushes_out_are_listed_in_it():
    def context(factsheet):
        mem = Memory(budget=Budget(tokens=1500), keep_recent=2, factsheet=factsheet, cache=False)
        numbers = _needles(mem, 150)
        return mem.context(), numbers

    bare, _ = context(None)
    ctx, numbers = context(Factsheet())
    assert ctx.factsheet and ctx.tokens <= 1500
    assert ctx.report()["factsheet_tokens"] <= Factsheet().room(1500)
    shown = {tid for p in ctx.pages for tid in p.turn_ids}
    pushed = {tid for p in ctx.gone for tid in p.turn_ids} - {tid for p in bare.gone for tid in p.turn_ids} - shown
    assert pushed  # the sheet took its room from pages
    listed = sorted((int(line.split()[0][1:]) for line in ctx.factsheet.splitlines()[1:]), reverse=True)
    said = sorted({tid for p in ctx.gone for tid in p.turn_ids if tid % 2 == 0 and tid not in shown}, reverse=True)
    assert listed and listed == said[: len(listed)] and set(listed) <= pushed  # newest first: what it pushed out
    assert all(f"#{tid} gone: {numbers[tid // 2]}" in ctx.factsheet for tid in listed)


@pytest.mark.parametrize("unit", ["a-", "1,", "a@", "-a/", "f-_", "漢字", "x", "ab1-"])
def test_long_runs_are_scanned_in_linear_time(unit):
    # Each of these shapes once made a pattern rescan the rest of the run at every character:
    # 200k characters took minutes, a 2.4M-character tool output hours.
    text = unit * (200_000 // len(unit))
    found = find_facts(text + " commit ee7653c9bc8d")
    assert found[-1] == "ee7653c9bc8d"


class _UnhashableFinder:
    __hash__ = None  # type: ignore[assignment]

    def __call__(self, text):
        return re.findall(r"\d{7}", text)


def test_a_context_built_along_a_session_has_the_sheet_a_fresh_memory_builds(sample):
    """Lines are cached per split of dropped and imaged pages: a memory that built a context
    after every turn, with budgets taking turns, must show what a memory built from scratch shows."""
    budgets = [Budget(tokens=1500), Budget(tokens=4000)]
    live = Memory(budget=budgets[0], keep_recent=2, cache=False)  # each context afresh: comparable
    for i, m in enumerate(sample[:160]):
        live.add(m)
        live.context(budget=budgets[i % 2])
        if i % 40 == 39:
            fresh = Memory(budget=budgets[0], keep_recent=2, cache=False)
            for t in sample[: i + 1]:
                fresh.add(t)
            for b in budgets:
                assert live.context(budget=b).factsheet == fresh.context(budget=b).factsheet
    odd = Memory(budget=Budget(tokens=1500), keep_recent=2, factsheet=Factsheet(finder=_UnhashableFinder()),
                 cache=False)
    _needles(odd, 60)
    assert "1000000" in odd.context().factsheet and odd.context().factsheet == odd.context().factsheet
