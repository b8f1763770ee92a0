"""The legibility gate: pages are never sent at a tier their reader cannot read."""

import pytest
from conftest import needs_tesseract

from optictx import AgeLadder, Budget, LegibilityGate, Memory, Tier
from optictx.eval.fidelity import corpora


def _memory(gate=None):
    ladder = AgeLadder(steps=((1, Tier.SMALL),), rest=Tier.TINY)  # few pages suffice to reach TINY
    mem = Memory(keep_recent=0, budget=Budget(tokens=20_000), ladder=ladder, gate=gate, verbatim=False)
    texts = corpora()
    for turn in [*texts["prose"][:2], *texts["tool"][:10]]:
        mem.add(turn)
    return mem


@needs_tesseract
def test_gate_keeps_every_sent_page_legible_and_reads_each_page_once():
    from optictx.readers import TesseractReader

    plain = _memory().context()
    assert Tier.TINY in {p.tier for p in plain.pages}  # without a gate, old pages go TINY

    gate = LegibilityGate(TesseractReader(), max_cer=0.03)
    mem = _memory(gate)
    ctx = mem.context()
    assert ctx.tokens <= mem.budget.limit
    sealed = [p for p in mem.pages if p.sealed]
    floors = {p.digest: f for p, f in zip(sealed, gate.floors(sealed, mem.images))}
    assert Tier.TINY in floors.values() and any(f.rank > Tier.TINY.rank for f in floors.values())
    held = [(seg, floors[seg.page.digest]) for seg in ctx.pages if seg.page.digest in floors and seg.tier.is_image]
    assert held, "the context sends sealed pages the gate judged"
    for seg, floor in held:
        assert seg.tier.rank >= floor.rank
        assert gate.cer[seg.page.digest, floor] <= 0.03  # measured, not assumed
    reads = gate.reads
    mem.context(budget=Budget(tokens=6000))
    assert gate.reads == reads  # floors are cached by page digest


def test_gate_rejects_thresholds_it_cannot_apply():
    with pytest.raises(ValueError, match="max_cer"):
        LegibilityGate(reader=None, max_cer={Tier.GUNDAM: 0.1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_cer"):
        LegibilityGate(reader=None, max_cer=1.5)  # type: ignore[arg-type]
