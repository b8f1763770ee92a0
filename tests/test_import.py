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


def test_public_api_names():
    import optictx

    for name in ("Memory", "Budget", "Turn", "Tier", "BudgetError", "KVGeometry", "COST_MODELS"):
        assert hasattr(optictx, name), name
    assert [t.name for t in optictx.Tier] == ["TEXT", "GUNDAM", "LARGE", "BASE", "SMALL", "TINY", "GONE"]
