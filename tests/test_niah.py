"""The needle-in-a-haystack harness: haystacks, needles, both backends, baselines and outputs."""

import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import needs, needs_tesseract
from PIL import Image

from optictx.eval.niah import NiahConfig, haystack, insert, make_needles, run
from optictx.tokens import get_tokenizer
from optictx.turnindex import text_tokens


def test_builtin_haystack_is_reproducible_and_long_enough():
    a, b = haystack("builtin", 12_000, seed=3), haystack("builtin", 12_000, seed=3)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    total = sum(text_tokens(t, get_tokenizer()) for t in a)
    assert 12_000 <= total < 14_000
    assert {"user", "assistant", "tool"} <= {t.role for t in a} and any(t.tool_calls for t in a)


def test_text_and_jsonl_haystacks(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("First paragraph here.\n\nSecond one. It has two sentences.\n\n" * 30)
    turns = haystack(str(tmp_path / "docs"), 2000, seed=0)
    assert turns and {t.role for t in turns} == {"user", "assistant"}
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("\n".join(json.dumps({"role": r, "content": f"message {i}"})
                               for i, r in enumerate(["user", "assistant"] * 5)))
    assert len(haystack(str(jsonl), 50, seed=0)) >= 10  # short sources repeat
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .txt files"):
        haystack(str(tmp_path / "empty"), 10, seed=0)


def test_needles_go_in_at_sentence_boundaries_at_their_depth():
    turns = haystack("builtin", 10_000, seed=1)
    sentence = "One of the special magic numbers for amber-onyx-12 is: 4417001."
    first, last = insert(list(turns), sentence, 0), insert(list(turns), sentence, 100)
    assert first < 3 and last > len(turns) - 5
    mid_turns = list(turns)
    i = insert(mid_turns, sentence, 50)
    text = mid_turns[i].text
    before = text[: text.index(sentence)].rstrip()
    assert before == "" or before[-1] in ".!?", before[-40:]  # after a sentence or a line, never mid-word
    assert len(turns) * 0.3 < i < len(turns) * 0.7


def test_needle_kinds():
    rng = random.Random(0)
    base = NiahConfig()
    one = make_needles(base, 50, rng)
    assert len(one.values) == 1 and re.fullmatch(r"\d{7}", one.values[0]) and one.values[0] in one.sentences[0]
    uid = make_needles(base.model_copy(update={"needle": "uuid"}), 50, rng)
    assert re.fullmatch(r"[0-9a-f-]{36}", uid.values[0])
    mk = make_needles(base.model_copy(update={"needle": "multikey"}), 50, rng)
    assert len(mk.sentences) == 4 and len(mk.values) == 1 and mk.depths[0] == 50
    mv = make_needles(base.model_copy(update={"needle": "multivalue"}), 50, rng)
    assert len(mv.values) == 4 and len({s.split(" is:")[0] for s in mv.sentences}) == 1  # one key
    mq = make_needles(base.model_copy(update={"needle": "multiquery"}), 50, rng)
    assert len(mq.values) == 4 and all(k in mq.question for k in (s.split("for ")[1].split(" is")[0]
                                                                   for s in mq.sentences))
    with pytest.raises(ValueError, match="free needle"):
        make_needles(base.model_copy(update={"needle": "free"}), 50, rng)
    assert NiahConfig(depths=5).depth_percents() == [0, 25, 50, 75, 100]
    sig = NiahConfig(depths=7, depth_spacing="sigmoid").depth_percents()
    assert sig[0] == 0 and sig[-1] == 100 and sig[1] - sig[0] < sig[3] - sig[2]  # denser at the ends


@needs_tesseract
def test_small_grid_reader_backend_writes_everything_and_resumes(tmp_path):
    cfg = NiahConfig(lengths=[20_000], depths=[5, 95], budgets=[0.25], out=str(tmp_path), workers=2)
    res = run(cfg)
    assert len(res.cells) == 2
    old, new = sorted(res.cells, key=lambda r: r.cell.depth)
    assert new.found == ["recent"] or new.found == ["page"]  # the newest needle is kept
    assert new.truncation == [True] and old.truncation == [False]  # truncation keeps only the end
    assert all(r.context_tokens <= r.budget_tokens for r in res.cells)
    for key in ("csv", "md", "tiers", "heatmap_0.25"):
        assert res.paths[key].is_file()
    assert Image.open(res.paths["heatmap_0.25"]).size[0] > 200
    assert "optictx / truncation" in res.paths["md"].read_text()
    cells = sorted((tmp_path / "cells").glob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in cells]
    again = run(cfg)  # resumable: existing cells are read back, not rerun
    assert [p.stat().st_mtime_ns for p in cells] == stamps
    assert [r.found for r in again.cells] == [r.found for r in res.cells]
    # Other settings into the same folder: the cells carry the same names but are not reused.
    uuids = run(cfg.model_copy(update={"needle": "uuid", "api_key": "sk-secret"}))
    assert all(len(r.values[0]) == 36 for r in uuids.cells)  # UUIDs, not the 7-digit numbers
    assert "sk-secret" not in (tmp_path / "cells" / "settings.json").read_text()


@needs_tesseract
def test_with_a_gate_no_page_goes_below_its_floor(tmp_path):
    cfg = NiahConfig(lengths=[16_000], depths=[30], budgets=[0.1], out=str(tmp_path), workers=1, gate=0.01)
    (cell,) = run(cfg).cells
    plain = run(cfg.model_copy(update={"gate": None, "out": str(tmp_path / "plain")})).cells[0]
    assert cell.below_floor == 0 and cell.context_tokens <= cell.budget_tokens
    assert "legibility gate at 1% CER (reflex reader): 0 pages sent below their floor" in (
        tmp_path / "summary.md").read_text()
    # The same cell without the gate sends old pages at tiers the reflex reader cannot read there.
    assert plain.tiers != cell.tiers or plain.context_tokens != cell.context_tokens


class _TextOnlyModel(BaseHTTPRequestHandler):
    """A stand-in for a remote VLM at the network boundary: it 'reads' only the text parts of the
    request and answers with every 7-digit number it finds there."""

    requests: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _TextOnlyModel.requests.append(body)
        texts = []
        for m in body["messages"]:
            parts = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"] or ""}]
            texts += [p["text"] for p in parts if p.get("type") == "text"]
        answer = " ".join(re.findall(r"\b\d{7}\b", " ".join(texts))) or "I do not know."
        data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": answer}}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@needs("matplotlib", "eval")  # the heatmap
@needs("rapidfuzz", "eval")  # the reads
def test_vlm_backend_against_a_local_server(tmp_path):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _TextOnlyModel)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = NiahConfig(lengths=[20_000], depths=[50, 100], budgets=[0.25], out=str(tmp_path), workers=1,
                         backend="vlm", base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", model="ocr-test")
        mid, end = run(cfg).cells
    finally:
        srv.shutdown()
    assert len(_TextOnlyModel.requests) == 4  # per cell: with and without the factsheet
    sent = _TextOnlyModel.requests[0]["messages"]
    assert sent[-1]["content"].startswith("What are all the special magic numbers")
    assert any(p.get("type") == "image_url" for m in sent if isinstance(m["content"], list) for p in m["content"])
    # The stand-in cannot see images: an imaged needle comes back only through the factsheet's
    # text, never optically; the newest needle is in the recent turns.
    assert mid.tiers == ["tiny"] and mid.found[0] in (None, "factsheet") and mid.optical == [False]
    assert end.found == ["recent"] and end.values[0] in end.answer
