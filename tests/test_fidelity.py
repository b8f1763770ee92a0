import csv

from conftest import needs_tesseract
from PIL import Image

from optictx.cli import main
from optictx.eval.fidelity import corpora, font_for_density


def test_corpora_are_offline_and_cover_three_kinds():
    c = corpora()
    assert set(c) == {"prose", "code", "tool"} and all(len(v) >= 4 for v in c.values())
    assert font_for_density(1000) == 21  # the shipped default font is the fitted one


@needs_tesseract
def test_fidelity_cli_writes_csv_table_and_plot(tmp_path, capsys):
    out = tmp_path / "fid"
    assert main(["fidelity", "--out", str(out), "--pages", "1", "--densities", "1000", "--tiers", "small"]) == 0
    rows = list(csv.DictReader((out / "fidelity.csv").open()))
    assert {r["corpus"] for r in rows} == {"prose", "code", "tool"}
    prose = next(r for r in rows if r["corpus"] == "prose")
    assert float(prose["char_acc"]) >= 0.98 and float(prose["compression_paper"]) > 8
    assert int(prose["positions"]) == 111 and int(prose["paper_tokens"]) == 100
    assert "| 1000 |" in (out / "fidelity.md").read_text()
    assert Image.open(out / "fidelity.png").size[0] > 500
    assert "wrote" in capsys.readouterr().out
