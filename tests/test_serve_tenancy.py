"""Whose conversations a request sees (`--tenancy`): on one person's proxy (the default on
loopback without a proxy key) every client is that person, so a subscription's rotating OAuth
token keeps one conversation and the dashboard needs no key; with a proxy key (a deployment)
each credential is its own tenant, as the serve hardening requires."""

from __future__ import annotations

import argparse

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402

from optictx.errors import ConfigError  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.flags import add_arguments, config_from  # noqa: E402

from serve_peers import Proxy  # noqa: E402

anthropic = pytest.importorskip("anthropic")
PROXY_KEY = "p" * 24


def _session(proxy, tokens, sample, extra=None):
    """One growing Claude Code-like session, each request with the next token (an OAuth token
    that rotates): Authorization: Bearer, as the anthropic client sends `auth_token`."""
    system = sample[0]["content"]
    turns = [m for m in sample[1:] if m["role"] == "user" and isinstance(m["content"], str)]
    history = []
    for step, token in enumerate(tokens):
        history += [{"role": "user", "content": turns[step]["content"]}, {"role": "assistant", "content": "ok"}]
        client = anthropic.Anthropic(base_url=proxy.url, auth_token=token, max_retries=0, default_headers=extra)
        client.messages.create(model="claude-sonnet-4-5", max_tokens=20, system=system, messages=history[:-1])


def _listed(proxy, headers=None):
    r = httpx.get(proxy.url + "/optictx/api/conversations", headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()["conversations"]


def test_one_persons_proxy_keeps_one_conversation_across_a_rotating_token(upstream, sample):
    proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=3000))
    try:
        assert proxy.proxy.config.personal  # loopback, no proxy key: one person's
        _session(proxy, ["sk-ant-oat01-first", "sk-ant-oat01-second", "sk-ant-oat01-third"], sample)
        listed = _listed(proxy)  # no key given: it is this person's machine
        assert len(listed) == 1 and listed[0]["requests"] == 3
        assert listed[0]["title"].startswith(sample[1]["content"][:40]) and listed[0]["model"] == "claude-sonnet-4-5"
        status = httpx.get(proxy.url + "/optictx/api/status").json()
        assert status["tenancy"] == "personal"
    finally:
        proxy.stop()


def test_with_a_proxy_key_each_credential_is_its_own_tenant(upstream, sample):
    proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=3000, proxy_key=PROXY_KEY))
    gate = {"x-optictx-key": PROXY_KEY}
    try:
        assert not proxy.proxy.config.personal  # auto: a deployment keeps tenants apart
        _session(proxy, ["token-a", "token-b"], sample, gate)
        mine = _listed(proxy, {**gate, "authorization": "Bearer token-a"})
        theirs = _listed(proxy, {**gate, "authorization": "Bearer token-b"})
        assert len(mine) == 1 and len(theirs) == 1 and mine[0]["id"] != theirs[0]["id"]  # a new token: a fork
        assert _listed(proxy, gate) == []  # no credential: none of theirs
        assert httpx.get(proxy.url + "/optictx/api/status", headers=gate).json()["tenancy"] == "per-key"
    finally:
        proxy.stop()


def test_the_tenancy_setting_and_its_flag():
    loopback = {"upstream": "http://127.0.0.1:9/v1"}
    assert ServeConfig(**loopback).personal
    assert not ServeConfig(**loopback, tenancy="per-key").personal
    assert ServeConfig(**loopback, tenancy="personal", proxy_key=PROXY_KEY).personal  # said outright
    assert not ServeConfig(**loopback, proxy_key=PROXY_KEY).personal
    with pytest.raises(ConfigError, match="tenancy"):
        ServeConfig.make(**loopback, tenancy="everyone")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from(parser.parse_args(["--upstream", loopback["upstream"], "--tenancy", "per-key"])).tenancy == \
        "per-key"
    with pytest.raises(SystemExit):
        parser.parse_args(["--tenancy", "everyone"])


def test_the_risk_setting_reaches_each_conversations_memory():
    """`--risk` (`Policy.risk`): 0.1 by default, `none` for no bound; set, every new
    conversation's memory plans with it."""
    from optictx.serve.proxy import Proxy as InProcess

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    loopback = ["--upstream", "http://127.0.0.1:9/v1"]
    assert config_from(parser.parse_args(loopback)).risk == 0.1
    assert config_from(parser.parse_args([*loopback, "--risk", "none"])).risk is None
    config = config_from(parser.parse_args([*loopback, "--risk", "0.05"]))
    assert config.risk == 0.05
    proxy = InProcess(config)
    try:
        assert proxy.memory(None).policy.risk == 0.05
    finally:
        proxy.close()
    with pytest.raises(ConfigError, match="risk"):
        config_from(parser.parse_args([*loopback, "--risk", "-1"]))


def test_a_title_cannot_be_spoofed_with_bidirectional_controls():
    from optictx.serve.conversations import title_of
    from optictx.turns import to_turn

    spoof = to_turn({"role": "user", "content": "Invoice for \u202egnp.exe\u202c and \u2067more\u2069 \u200f!"})
    assert title_of([spoof]) == "Invoice for gnp.exe and more !"


def test_a_title_skips_an_agents_wrappers_and_reads_only_a_bounded_head():
    from optictx.serve.conversations import title_of
    from optictx.turns import to_turn

    claude = to_turn({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer, use CLAUDE.md.\n</system-reminder>"},
        {"type": "text", "text": "Fix the   failing\ntest in <code>foo.py</code>"}]})
    assert title_of([claude]) == "Fix the failing test in <code>foo.py</code>"
    codex = [to_turn({"role": "user", "content": "<environment_context><cwd>/x</cwd></environment_context>"}),
             to_turn({"role": "user", "content": "count for me"})]
    assert title_of(codex) == "count for me"
    # Unclosed tags by the hundred thousand: a regex over the whole text went quadratic here; the
    # title reads a bounded head, a bounded number of tags.
    for text in ("<a>" * 300_000, "".join(f"\n<a{i}>" for i in range(100_000)), "<" * 1_000_000):
        assert title_of([to_turn({"role": "user", "content": text})]).startswith("<")
    assert title_of([to_turn({"role": "user", "content": "<x>\n" + "y" * 70_000 + "\n</x>"})]).startswith("<x>")
