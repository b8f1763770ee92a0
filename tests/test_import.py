import subprocess
import sys


def test_import_does_not_pull_torch_or_transformers():
    code = ("import optictx, optictx.renderers, sys; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_subpackages_install_under_optictx():
    import optictx.models
    import optictx.renderers

    assert optictx.renderers.__name__ == "optictx.renderers"
    assert optictx.models.__name__ == "optictx.models"


def test_every_name_the_docs_import_is_exported():
    """The oracle is what a user is told to write: every `from optictx import ...` in the README,
    docs/ and examples/ names something `optictx` exports (in `__all__`), and every name in
    `__all__` is there. A rename or a dropped export breaks the docs' code, and this."""
    import re
    from pathlib import Path

    import optictx

    root = Path(__file__).resolve().parent.parent
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "examples").glob("*.py")]
    told = {name.strip() for f in files for line in re.findall(r"from optictx import ([A-Za-z_, ]+)", f.read_text())
            for name in line.split(",") if name.strip()}
    assert {"Memory", "Budget", "Tier", "KVGeometry", "LegibilityGate"} <= told  # the scan found the docs' imports
    assert told <= set(optictx.__all__), sorted(told - set(optictx.__all__))
    assert all(hasattr(optictx, name) for name in optictx.__all__)
    assert [t.name for t in optictx.Tier] == ["TEXT", "GUNDAM", "LARGE", "BASE", "SMALL", "TINY", "GONE"]
