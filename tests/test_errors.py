"""Every exception optictx raises on purpose is an OptictxError (and the built-in it refines);
optional extras, when missing, say which extra to install."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from optictx import OptictxError
from optictx.renderers import FontError, RenderError

ROOT = Path(__file__).resolve().parents[1]
ROOMS = {"optictx": ROOT / "optictx", "optictx.renderers": ROOT / "renderers", "optictx.models": ROOT / "models"}
# Raises that a Python protocol prescribes: abstract hooks, module __getattr__, Mapping.__getitem__.
PROTOCOL = {"NotImplementedError": None, "AttributeError": "__getattr__", "KeyError": "__getitem__"}
# Pydantic turns a validator's ValueError into a ValidationError (turns.py's validators).
VALIDATORS = {"field_validator", "model_validator"}


def _raises():
    for package, folder in ROOMS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            name = ".".join([package, *rel.parts]).removesuffix(".__init__")
            if package == "optictx" and rel.parts[0] in ("models", "renderers"):
                continue
            tree = ast.parse(path.read_text())
            for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
                decorators = {getattr(d.func if isinstance(d, ast.Call) else d, "id", "") for d in func.decorator_list}
                for node in ast.walk(func):
                    call = node.exc if isinstance(node, ast.Raise) else None
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                        yield name, func.name, call.func.id, decorators, node.lineno


def test_every_raise_in_the_library_is_an_optictx_error():
    pytest.importorskip("torch", reason="optictx.models' modules import torch: the models extra")
    bad = []
    for module, func, exc, decorators, line in _raises():
        if (exc in PROTOCOL and PROTOCOL[exc] in (None, func)) or decorators & VALIDATORS:
            continue
        cls = getattr(importlib.import_module(module), exc, None) or getattr(__builtins__, exc, None)
        if not (isinstance(cls, type) and issubclass(cls, OptictxError)):
            bad.append(f"{module}:{line} {func}() raises {exc}")
    assert not bad, "\n".join(bad)


def test_a_failed_render_or_a_missing_font_is_caught_as_optictx_error_and_as_its_builtin(tmp_path):
    """Code written before optictx had its own errors (`except ValueError`, `except RuntimeError`)
    still catches them, raised for real: lines that overflow a page, a fallback font not there."""
    from optictx.renderers import Block, Layout, RenderConfig, draw_page

    layout = Layout(RenderConfig())
    with pytest.raises(ValueError) as overflow:
        draw_page(layout.lines(Block("line\n" * 500)), layout)
    with pytest.raises(RuntimeError) as missing:
        Layout(RenderConfig(fallback_fonts=(str(tmp_path / "no-such-font.ttf"),)))
    assert isinstance(overflow.value, RenderError) and isinstance(overflow.value, OptictxError)
    assert isinstance(missing.value, FontError) and isinstance(missing.value, OptictxError)


_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Block())
"""


@pytest.mark.parametrize(("blocked", "code", "extra"), [
    ({"torch"}, "from optictx.models import OpticalModel", "models"),
    ({"transformers"}, "from optictx.models import build_inputs", "models"),
    ({"rapidfuzz"}, "from optictx.readers import char_accuracy; char_accuracy('a', 'b')", "eval"),
    ({"matplotlib"}, "from optictx.eval.fidelity import pyplot; pyplot()", "eval"),
])
def test_a_missing_extra_says_which_to_install(blocked, code, extra):
    script = _BLOCK.format(blocked=blocked) + f"""
import optictx  # the core imports without any extra
try:
    {code}
except optictx.MissingExtraError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"pip install 'optictx[{extra}]'" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize(("example", "blocked", "extra"), [("langchain_history.py", {"langchain_core"}, "langchain"),
                                                          ("llamaindex_memory.py", {"llama_index"}, "llamaindex")])
def test_an_example_without_its_framework_says_which_extra_to_install(example, blocked, extra):
    path = Path(__file__).resolve().parent.parent / "examples" / example
    script = _BLOCK.format(blocked=blocked) + f"import runpy; runpy.run_path({str(path)!r}, run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f".venv/bin/pip install -e '.[{extra}]'" in out.stderr, out.stderr
