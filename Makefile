# Two commands for a new user: `make demo` and `make test`. Both create .venv and install what
# they need; `make test` also installs Tesseract (Debian tesseract-ocr) when running as root.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench tesseract clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev,eval]"
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/optictx demo --out out/demo

test: $(STAMP) tesseract
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/render.py
	$(PY) benchmarks/memory.py

tesseract:
	@command -v tesseract >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr >/dev/null; \
	  else echo "tesseract not found: legibility tests will skip (sudo apt-get install tesseract-ocr)"; fi; }

clean:
	rm -rf $(VENV) out build *.egg-info
