"""Secrets never persist (docs/judge.md, "Secrets"): the one redaction function against hand-made cases, and a
loopback judge that echoes its credentials into every reply, log-probability alternative and error, driven through
the real CLI (``mixbench judge``, an unreachable judge, ``mixbench publish``): the key, the URL's password and its
``?api_key=`` value appear in no file under the store, the reply cache or the published site, and in no output."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from fake_judge import FakeJudge
from harness.cli import main
from harness.store.redaction import REDACTED, redact, redact_text, redact_url, url_secrets
from harness.store.results import ResultsStore
from test_judge import CANARIES, PROMPTS, table_judge, write_generations


@pytest.mark.parametrize("url, safe", [
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("http://user:pass-word-1@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("https://key-only-123456@host/v1", "https://host/v1"),
    ("http://u:p@[::1]:9/v1", "http://[::1]:9/v1"),
    ("https://h/v1?api_key=abc&api-version=2024-01", f"https://h/v1?api_key={REDACTED}&api-version=2024-01"),
    ("https://h/v1?key=k&token=t&sig=s&x=1", f"https://h/v1?key={REDACTED}&token={REDACTED}&sig={REDACTED}&x=1"),
    ("https://h/v1?access_token=t#frag", f"https://h/v1?access_token={REDACTED}#frag"),
    ("http://[::1/v1", f"http://{REDACTED}"),  # unparsable: nothing after the scheme is kept
])  # fmt: skip
def test_redact_url_removes_userinfo_and_secret_query_values(url, safe):
    assert redact_url(url) == safe


def test_redaction_of_text_and_records(monkeypatch):
    monkeypatch.setenv("SOME_API_TOKEN", "env-secret-0123456789")
    monkeypatch.setenv("INNOCENT_NAME", "not-listed-0123456789")  # a name that does not look secret: kept
    text = ("see http://u:pw-0123456789@h:1/v1?api_key=q-0123456789 and env-secret-0123456789, "
            "Bearer given-0123456789, not-listed-0123456789")
    out = redact_text(text, ["given-0123456789"])
    for secret in ("pw-0123456789", "q-0123456789", "env-secret-0123456789", "given-0123456789"):
        assert secret not in out
    assert "not-listed-0123456789" in out and "http://h:1/v1?api_key=" in out
    record = {"judge_url": "http://u:pw-0123456789@h/v1", "api_key": "x", "nested": [{"token": None}, text],
              "max_new_tokens": 32}
    clean = redact(record)
    assert clean["judge_url"] == "http://h/v1" and clean["api_key"] == REDACTED and clean["max_new_tokens"] == 32
    assert clean["nested"][0] == {"token": None} and "pw-0123456789" not in clean["nested"][1]
    pair = "user:pw-0123456789"
    assert set(url_secrets("http://user:pw-0123456789@h/v1?token=t-0123456789")) >= {
        "pw-0123456789", pair, base64.b64encode(pair.encode()).decode(), "t-0123456789"}


def _count(secret: str, roots: list[Path]) -> int:
    return sum(p.read_bytes().count(secret.encode()) for root in roots for p in root.rglob("*") if p.is_file())


def test_an_echoing_judge_leaks_no_credential_to_any_file_or_output(tmp_path, monkeypatch, capfd):
    key, password, query_key = (f"{kind}-{uuid.uuid4().hex}" for kind in ("sk", "pw", "qk"))
    basic = base64.b64encode(f"judge-user:{password}".encode()).decode()
    monkeypatch.setenv("JUDGE_CREDENTIAL_T", key)  # a variable name the redaction would not guess
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    results, cache, site = tmp_path / "results", tmp_path / "cache", tmp_path / "site"
    write_generations(ResultsStore(results), mixers=("alpha", "beta"))
    common = ["--results", str(results), "--api-key-env", "JUDGE_CREDENTIAL_T", "--no-progress"]
    with FakeJudge(table_judge, echo=True) as judge:
        url = judge.url.replace("http://", f"http://judge-user:{password}@") + f"?api_key={query_key}&x=1"
        judge.queue = [None, "500"]  # the first verdict call fails once, its error message echoing everything
        assert main(["judge", "--judge-url", url, "--judge-model", "fake-judge", *common]) == 0
        # the credentials did reach the judge: the key or the URL's userinfo as Authorization, the query value
        assert judge.chat_requests == 1 + 1 + 2 * len(PROMPTS) + 2 * len(CANARIES)
        assert all(f"api_key={query_key}" in p for p in judge.paths)
        assert {h.get("authorization") for h in judge.headers} <= {f"Bearer {key}", f"Basic {basic}"}
    # an unreachable judge with credentials in its URL: one sentence, no credential
    dead = f"http://judge-user:{password}@127.0.0.1:9/v1?token={query_key}"
    assert main(["judge", "--judge-url", dead, "--judge-model", "other-judge", *common]) == 2
    assert main(["judge", "--judge-url", dead.replace("http", "ftp", 1), "--judge-model", "m", *common]) == 2
    assert main(["publish", "--results", str(results), "--out", str(site)]) == 0
    out = capfd.readouterr()
    assert "no judge answers at http://127.0.0.1:9/v1?token=[redacted]" in out.err

    roots = [results, cache, site]
    assert any((results / "runs").rglob("manifest.json")) and any(cache.rglob("*.sqlite")) and any(site.rglob("*.html"))
    counts = {name: _count(secret, roots) for name, secret in
              (("key", key), ("password", password), ("query key", query_key), ("basic auth", basic))}
    assert counts == {"key": 0, "password": 0, "query key": 0, "basic auth": 0}, counts
    for secret in (key, password, query_key, basic):
        assert secret not in out.out and secret not in out.err
    # the echoes were there, and were redacted before they were cached and stored
    assert _count(REDACTED, [cache]) > 0 and _count(REDACTED, [results]) > 0
    run = next(r for r in ResultsStore(results).iter_runs(samples=True) if r.manifest.kind == "aggregate")
    assert "127.0.0.1" in run.manifest.extra["judge"]["url"] and REDACTED in run.manifest.extra["judge"]["url"]
    assert REDACTED in run.samples[0]["reply_as_a"]
