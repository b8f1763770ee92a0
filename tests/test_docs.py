"""The README and the pages under docs/ hold to the code: every link resolves, and the README's
code runs as printed (its demo line is held by test_cli.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_link_in_the_readme_and_docs_resolves():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"


def test_the_readmes_python_runs_as_printed(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks, "the README shows how to call the library"
    for code in blocks:
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]


def test_the_readme_is_a_first_screen_and_the_depth_is_linked():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120  # the deep material lives under docs/
    first = text.split("\n## ", 1)[0]  # what a reader sees before the first section
    commands = re.findall(r"^make ([\w-]+)", first, re.M)
    assert commands == ["demo", "test"], "the two commands a new user runs open the README"
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    assert set(commands) <= targets, "the README's commands are the Makefile's"
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", text))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}, "every page under docs/ is linked from the README"

