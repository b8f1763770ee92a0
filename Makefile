# Two commands for a new user: `make demo` and `make test`. Both create .venv and install what
# they need; `make test` also installs Tesseract (Debian tesseract-ocr), Chromium (Debian chromium,
# for the dashboard's browser test) and PostgreSQL (Debian postgresql, for the store and replica
# tests, which start a throwaway cluster of their own) when running as root, and the Codex CLI
# and the Claude Code CLI (npm, for the Responses and Messages API tests with the real clients).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-long test-explore lint bench tesseract chromium postgresql codex claude clean

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

# The demo needs the core alone (Pillow, numpy, tiktoken, pydantic, fontTools: ~170 MB, under a
# minute to install); `make test` adds every extra to the same venv.
$(VENV)/.core: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e .
	@touch $@

demo: $(VENV)/.core
	$(VENV)/bin/optictx demo --out out/demo
	@echo "optictx is in $(VENV)/bin: run $(VENV)/bin/optictx, or 'source $(VENV)/bin/activate' first"

test: $(STAMP) tesseract chromium postgresql codex claude
	$(PY) -m pytest -q -m "not slow"

# The long variants, on SQLite and PostgreSQL: 100 SIGKILLs, 8 threads and 4 processes x 1,000
# adds, 10 MB turns.
test-long: $(STAMP) postgresql
	$(PY) -m pytest -q -m slow

# Property tests with fresh draws (tests/conftest.py's `explore` profile); `make test` replays
# the same derandomized examples every run, so CI never fails on a new draw.
test-explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q -m "not slow" -p no:cacheprovider $$(grep -l "@given" tests/test_*.py)

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

# The Codex CLI test drives the real Codex (npm's @openai/codex, a test peer: optictx never needs
# Node). Installed under build/codex; without npm or the registry its test skips.
CODEX_VERSION ?= 0.171.0
codex:
	@test -x build/codex/node_modules/.bin/codex || { \
	  if ! command -v npm >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; fi; \
	  if command -v npm >/dev/null 2>&1; then \
	    timeout 600 npm install --silent --no-audit --no-fund --prefix build/codex @openai/codex@$(CODEX_VERSION) >/dev/null \
	      || echo "could not install the Codex CLI: its test will skip"; \
	  else echo "npm not found: the Codex CLI test will skip (sudo apt-get install npm)"; fi; }

# The Claude Code CLI test drives the real Claude Code (npm's @anthropic-ai/claude-code, a test
# peer like Codex) on its default model. Installed under build/claude; without npm its test skips.
CLAUDE_VERSION ?= 2.1.332
claude:
	@test -x build/claude/node_modules/.bin/claude || { \
	  if command -v npm >/dev/null 2>&1; then \
	    timeout 600 npm install --silent --no-audit --no-fund --prefix build/claude @anthropic-ai/claude-code@$(CLAUDE_VERSION) >/dev/null \
	      || echo "could not install the Claude Code CLI: its test will skip"; \
	  else echo "npm not found: the Claude Code CLI test will skip (sudo apt-get install npm)"; fi; }

clean:
	rm -rf $(VENV) out build *.egg-info
