"""Shared test helpers: conversations built from the shipped sample and from hypothesis."""

from __future__ import annotations

import importlib
import json
import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from optictx.sample import sample_conversation


def _tesseract_missing() -> str:
    try:
        import tesserocr  # noqa: F401

        from optictx.readers import find_tessdata

        find_tessdata()
    except Exception as exc:  # ImportError or ReaderError: say which in the skip reason
        return f"Tesseract unavailable ({exc}); make test installs tesseract-ocr as root"
    return ""


needs_tesseract = pytest.mark.skipif(bool(_tesseract_missing()), reason=_tesseract_missing() or "-")


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip unless an optional dependency imports, saying which extra brings it."""
    try:
        importlib.import_module(module)
    except ImportError:
        return pytest.mark.skip(reason=f"{module} is not installed: pip install 'optictx[{extra}]'")
    return pytest.mark.skipif(False, reason="-")


@pytest.fixture(scope="session")
def sample() -> list[dict]:
    return sample_conversation()


@pytest.fixture()
def upstream():
    """The small real upstream the proxy tests send to, on 127.0.0.1 (tests/serve_peers.py): it
    records what arrives and answers, streamed or not."""
    from serve_peers import start_upstream, stop_upstream  # the serve extra: only where a test asks

    state, server = start_upstream()
    yield state
    stop_upstream(server)


# Property tests explore the same examples on every run of `make test` and CI (derandomized, no
# example database), so a red run is the code's, never the draw's; `make test-explore` (the
# `explore` profile) draws afresh to find new cases, which are then pinned as `@example`s.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_words = st.text(alphabet="abcdefghij klmnop 0123456789.,\n", min_size=0, max_size=400)


@st.composite
def conversations(draw, max_events: int = 30) -> list[dict]:
    """Random agent conversations: user/assistant text, tool groups, system and pinned turns."""
    msgs: list[dict] = []
    n = draw(st.integers(0, max_events))
    call = 0
    for _ in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "system", "pinned"]))
        if kind in ("user", "assistant"):
            msgs.append({"role": kind, "content": draw(_words)})
        elif kind == "system":
            msgs.append({"role": "system", "content": draw(st.text(max_size=60))})
        elif kind == "pinned":
            msgs.append({"role": "user", "content": draw(st.text(max_size=80)), "pinned": True})
        else:
            k = draw(st.integers(1, 3))
            ids = [f"c{call + i}" for i in range(k)]
            call += k
            calls = [{"id": i, "type": "function",
                      "function": {"name": "run", "arguments": json.dumps({"n": j})}} for j, i in enumerate(ids)]
            msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
            for i in ids:
                msgs.append({"role": "tool", "tool_call_id": i, "content": draw(_words)})
    return msgs


@pytest.fixture(scope="session")
def pg():
    """A throwaway PostgreSQL cluster for the session (tests/pgcluster.py), or a skip saying why."""
    from pgcluster import Cluster, binaries

    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'optictx[postgres]'")
    if binaries() is None:
        pytest.skip("no PostgreSQL server installed (initdb, postgres): make test installs Debian's postgresql "
                    "as root")
    with Cluster() as cluster:
        yield cluster


class Backend:
    """Where a test's memories live: SQLite files in its folder, or PostgreSQL memories under a
    tenant of its own (so tests never see each other's memories)."""

    def __init__(self, kind: str, folder, cluster=None) -> None:
        import uuid

        self.kind, self.folder, self.cluster = kind, folder, cluster
        self.tenant = uuid.uuid4().hex[:12]

    def spec(self, name: str = "mem") -> str:
        if self.kind == "sqlite":
            return str(self.folder / f"{name}.db")
        return self.cluster.url(memory=name, tenant=self.tenant)

    def __repr__(self) -> str:
        return self.kind


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path) -> Backend:
    """Each store test runs on both backends: one suite, one contract."""
    if request.param == "sqlite":
        return Backend("sqlite", tmp_path)
    return Backend("postgres", tmp_path, request.getfixturevalue("pg"))
