"""Security rules over the source tree: no code execution from data, no unsafe weight formats,
no remote code, no user strings turned into paths unchecked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from optictx.readers import ReaderError, find_tessdata

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("optictx", "renderers", "models", "examples", "benchmarks")
SOURCES = sorted(p for d in FOLDERS for p in (ROOT / d).rglob("*.py"))

FORBIDDEN = {
    r"\bimport pickle\b|\bpickle\.|\bimport dill\b|\bimport joblib\b": "pickle runs code on load",
    r"(?<![\w.])eval\(|(?<![\w.])exec\(": "eval/exec of strings",
    r"torch\.load\(": "torch.load unpickles; weights come as safetensors",
    r"trust_remote_code\s*=\s*True": "remote code is never on by default",
    r"shell\s*=\s*True": "no shell strings",
    r"yaml\.load\(": "yaml.load builds objects",
    r"MAX_IMAGE_PIXELS\s*=": "Pillow's decompression-bomb guard stays on",
}


def test_the_sources_are_found():
    assert len(SOURCES) > 30 and any(p.name == "memory.py" for p in SOURCES)


@pytest.mark.parametrize("pattern", FORBIDDEN)
def test_no_source_file_uses(pattern):
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in SOURCES
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(pattern, line.split("#", 1)[0])]
    assert not hits, f"{FORBIDDEN[pattern]}: {hits}"


@pytest.mark.parametrize("lang", ["../../etc/passwd", "eng/../x", "/abs", "", "e" * 100])
def test_tesseract_language_names_cannot_name_paths(lang):
    with pytest.raises(ReaderError, match="not a Tesseract language name"):
        find_tessdata(lang)
