"""One progress helper for the long commands: a bar on a terminal, silence elsewhere."""

from __future__ import annotations

import pytest

from optictx.progress import Bar, each


def test_a_bar_shows_on_a_terminal_and_nowhere_else(capsys):
    pytest.importorskip("tqdm")
    assert list(each(range(5), "counting", "n", show=True)) == [0, 1, 2, 3, 4]
    shown = capsys.readouterr().err
    assert "counting" in shown and "/5 " in shown  # its label and total (tqdm redraws at most 10 times a second)
    assert list(each(iter(range(3)), "quiet", show=False)) == [0, 1, 2]
    with Bar(2, "quiet too", show=False) as bar:
        bar.update(2)
    assert capsys.readouterr().err == ""  # a pipe, a log, a test: no bar


def test_without_a_terminal_the_commands_print_no_bar(tmp_path, capsys):
    from optictx.cli import main

    main(["demo", "--out", str(tmp_path)])
    assert capsys.readouterr().err == ""  # pytest's stderr is not a terminal
