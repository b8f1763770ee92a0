# Two commands for a new user: `make demo` and `make test`. Both create .venv and install what
# they need; `make test` also installs Tesseract (Debian tesseract-ocr), Chromium (Debian chromium,
# for the dashboard's browser test) and PostgreSQL (Debian postgresql, for the store and replica
# tests, which start a throwaway cluster of their own) when running as root.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-long lint bench tesseract chromium postgresql clean

# torch: a torch the base Python already has is reused (the venv then sees system packages);
# otherwise TORCH is installed first, so the `models` extra's range asks for nothing more. On
# machines with a local CPU wheel of that version pip takes it; elsewhere it is PyPI's torch.
TORCH  ?= torch==2.13.0

$(STAMP): pyproject.toml
	if $(PYTHON) -c "import torch" 2>/dev/null; then $(PYTHON) -m venv --system-site-packages $(VENV); \
	else $(PYTHON) -m venv $(VENV); fi
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,eval,models,serve,postgres,langchain,llamaindex]"
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/optictx demo --out out/demo

test: $(STAMP) tesseract chromium postgresql
	$(PY) -m pytest -q -m "not slow"

# The long variants, on SQLite and PostgreSQL: 100 SIGKILLs, 8 threads and 4 processes x 1,000
# adds, 10 MB turns.
test-long: $(STAMP) postgresql
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) benchmarks/render.py
	$(PY) benchmarks/memory.py
	$(PY) benchmarks/store.py
	$(PY) benchmarks/replicas.py

tesseract:
	@command -v tesseract >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr >/dev/null; \
	  else echo "tesseract not found: legibility tests will skip (sudo apt-get install tesseract-ocr)"; fi; }

# The dashboard's browser test drives Debian's chromium (Playwright downloads no browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not found: the dashboard browser test will skip (sudo apt-get install chromium)"; fi; }

# Only the server binaries are used (initdb, postgres under /usr/lib/postgresql/*/bin): the tests
# make and remove their own cluster; Debian's default one is not needed.
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "postgresql not found: the PostgreSQL store tests will skip (sudo apt-get install postgresql)"; fi; }

clean:
	rm -rf $(VENV) out build *.egg-info
