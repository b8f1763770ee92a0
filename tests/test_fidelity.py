import csv

import pytest
from conftest import needs_tesseract
from PIL import Image

from optictx import Tier
from optictx.cli import main
from optictx.eval.fidelity import content, content_accuracy, corpora, font_for_density
from optictx.io import write_jsonl
from optictx.renderers import RenderConfig
from optictx.sample import sample_conversation


def test_corpora_are_offline_and_cover_three_kinds():
    c = corpora()
    assert set(c) == {"prose", "code", "tool"} and all(len(v) >= 4 for v in c.values())
    default = RenderConfig()
    assert font_for_density(default.tokens_per_page) == default.font_size  # the shipped font is the fitted one


def test_content_characters_leave_out_rules_and_only_rules():
    assert content("a ---- b ==== c ____ d ~~~~~ e - - - - f ───── g").split() == list("abcdefg")
    kept = "x -- y === z v1.2.3 a_b __init__ --flag 12...3"  # short runs are text, not decoration
    assert content(kept) == kept
    assert content_accuracy("total ---------- 42", "total ------ 42") == 1.0  # a rule's length is not content
    assert content_accuracy("total ---------- 42", "tota1 ------ 42") < 1.0


def test_a_jsonl_conversation_or_a_folder_of_them_is_a_corpus(tmp_path):
    write_jsonl(tmp_path / "one.jsonl", sample_conversation())
    write_jsonl(tmp_path / "two.jsonl", sample_conversation()[:5])
    got = corpora(["prose", str(tmp_path / "one.jsonl"), str(tmp_path)])
    assert list(got) == ["prose", "one", tmp_path.name]
    n = len(sample_conversation())
    assert len(got["one"]) == n and len(got[tmp_path.name]) == n + 5
    assert [t.id for t in got[tmp_path.name]] == list(range(n + 5))  # numbered as one stream
    assert main(["fidelity", "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 2


@needs_tesseract
def test_fidelity_cli_on_a_jsonl_corpus_reports_tokens_per_page_and_content_accuracy(tmp_path, capsys):
    path = tmp_path / "agent.jsonl"
    write_jsonl(path, sample_conversation())
    out = tmp_path / "fid"
    assert main(["fidelity", "--out", str(out), "--pages", "2", "--densities", "1000", "--tiers", "small",
                 "--no-peer", "--corpus", str(path)]) == 0
    (row,) = csv.DictReader((out / "fidelity.csv").open())
    assert row["corpus"] == "agent" and int(row["pages"]) == 2
    # Pages break on each line's share of its block's tokens; the page's text counted whole differs by a few.
    assert 300 < float(row["text_tokens"]) <= 1000 * 1.02
    assert 0.9 < float(row["char_acc"]) <= float(row["content_acc"]) + 0.02
    assert "content acc" in capsys.readouterr().out


@needs_tesseract
def test_fidelity_cli_writes_csv_table_and_plot(tmp_path, capsys):
    out = tmp_path / "fid"
    assert main(["fidelity", "--out", str(out), "--pages", "1", "--densities", "1000", "--tiers", "small",
                 "--no-peer"]) == 0
    rows = list(csv.DictReader((out / "fidelity.csv").open()))
    assert {r["corpus"] for r in rows} == {"prose", "code", "tool"}
    prose = next(r for r in rows if r["corpus"] == "prose")
    assert float(prose["char_acc"]) >= 0.98 and float(prose["compression_paper"]) > 8
    assert int(prose["positions"]) == 111 and int(prose["paper_tokens"]) == 100
    assert "(1000) |" in (out / "fidelity.md").read_text()
    assert Image.open(out / "fidelity.png").size[0] > 500
    assert "wrote" in capsys.readouterr().out


@needs_tesseract
def test_pixelprompt_side_by_side_prices_both_at_claude_rates(tmp_path):
    pytest.importorskip("pixelprompt", reason="pixelprompt is in the eval extra")
    from optictx.cost import get_cost_model
    from optictx.eval import peer
    from optictx.readers import TesseractReader

    rows = peer.compare(TesseractReader(), pages=1, font_sizes=(None,), corpus_names=("prose",))
    ours = {r.setting: r for r in rows if r.system == "optictx"}
    theirs = [r for r in rows if r.system == "pixelprompt"]
    assert set(ours) == {"large", "base", "small", "tiny"} and len(theirs) == 1
    assert ours["tiny"].image_tokens == get_cost_model("anthropic").page_tokens(Tier.TINY) == 350
    assert ours["tiny"].char_acc >= 0.97 and 0 <= theirs[0].char_acc <= 1
    assert theirs[0].text_tokens == ours["tiny"].text_tokens  # the same source text for both
    (pp, mine), = peer.equal_cost_pairs(rows)
    assert pp is theirs[0] and mine.system == "optictx"
    paths = peer.write_outputs(rows, tmp_path, "Tesseract 5")
    assert "At equal cost" in paths["md"].read_text() and paths["csv"].is_file()


@needs_tesseract
def test_tuner_writes_a_config_memory_loads_and_repeats_itself(tmp_path, capsys):
    from optictx import Memory
    from optictx.eval.tune import Scorer, tune
    from optictx.readers import TesseractReader

    args = ["tune", "--tier", "small", "--pages", "1", "--max-evals", "3", "--seed", "3", "--out", str(tmp_path)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "held-out pages" in text and "Memory(render=...)" in text
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert len(rows) == 3 and rows[0]["changed"] == ""  # the default is trial 0
    mem = Memory(render=tmp_path / "render.json")
    assert mem.render.font_size == font_for_density(mem.render.tokens_per_page, mem.render)

    again = tune(Scorer(TesseractReader(), Tier.SMALL, pages=1), max_evals=3, seed=3)
    assert [str(t.score) for t in again.trials] == [r["score"] for r in rows]  # seeded: the same trials
    assert again.best.config == mem.render
