"""The judge suite: rating maths against independent solvers, the protocol, the client's retries against a real
loopback HTTP judge with injected faults, the cache (a rerun asks nothing), key hygiene, the CLI, and the real
offline judge server."""

from __future__ import annotations

import itertools
import math
import uuid
from pathlib import Path

import numpy as np
import pytest

from fake_judge import FakeJudge
from harness.cli import main
from harness.config import content_hash
from harness.leaderboard import build_table
from harness.results import ResultsStore
from harness.suite import SuiteResult
from suites.judge import (
    CANARIES, ArenaConfig, EndpointConfig, Games, JudgeCache, JudgeCallFailed, JudgeClient, JudgeConfig, Template,
    fit_bradley_terry, judge_runs, parse_verdict, rate,
)  # fmt: skip
from suites.judge.protocol import Outcome, count, make_comparisons, order_coin
from suites.judge.ratings import ELO_SCALE, length_covariate, win_matrix

# ------------------------------------------------------------------------------------ independent references


def mm_bradley_terry(n: int, table: list[tuple[int, int, float]], prior_ties: float) -> np.ndarray:
    """Hunter's (2004) MM iteration for Bradley–Terry strengths, ties as half a win to each side: a solver that
    shares nothing with the Newton fit. Returns Elo (centred at 1000)."""
    wins, games = np.zeros(n), np.zeros((n, n))
    met = {(min(i, j), max(i, j)) for i, j, _ in table}
    for i, j, s in table + [(i, j, 0.5) for i, j in met for _ in range(int(prior_ties))]:
        wins[i] += s
        wins[j] += 1 - s
        games[i, j] += 1
        games[j, i] += 1
    p = np.ones(n)
    for _ in range(20000):
        p = wins / (games / (p[:, None] + p[None, :])).sum(1)
        p /= np.exp(np.log(p).mean())
    return 1000 + ELO_SCALE * np.log(p)


def games_from(players, table, prompts=None, covariate=None) -> Games:
    left, right, score = (np.array(col) for col in zip(*table))
    prompt = np.arange(len(table)) if prompts is None else np.array(prompts)
    return Games(tuple(players), left, right, score.astype(float), prompt, covariate)


# -------------------------------------------------------------------------------------------------- ratings


def test_two_players_match_the_closed_form():
    # 6 wins, 2 losses, 2 ties: the MLE log-odds are ln((6 + 1) / (2 + 1)) with ties as half wins
    table = [(0, 1, 1.0)] * 6 + [(0, 1, 0.0)] * 2 + [(0, 1, 0.5)] * 2
    fit = fit_bradley_terry(games_from("ab", table), prior_ties=0)
    assert fit.elo[0] - fit.elo[1] == pytest.approx(400 * math.log10(7 / 3), abs=1e-9)
    assert fit.elo.mean() == pytest.approx(1000)
    # one virtual tie: ln(7.5 / 3.5); a clean 16-0 sweep stays finite: ln(16.5 / 0.5)
    assert fit_bradley_terry(games_from("ab", table)).elo[0] - 1000 == pytest.approx(200 * math.log10(7.5 / 3.5))
    sweep = fit_bradley_terry(games_from("ab", [(0, 1, 1.0)] * 16))
    assert sweep.elo[0] - sweep.elo[1] == pytest.approx(400 * math.log10(33), abs=1e-6)


def test_four_players_match_an_independent_mm_solver():
    rng = np.random.default_rng(7)
    strength = np.array([1.0, 0.3, -0.2, -1.1])
    table = []
    for i, j in itertools.combinations(range(4), 2):
        for _ in range(9):
            u = rng.random()
            p = 1 / (1 + math.exp(-(strength[i] - strength[j])))
            table.append((i, j, 1.0 if u < p * 0.8 else 0.0 if u > 1 - (1 - p) * 0.8 else 0.5))
    for prior in (0, 1, 3):
        ours = fit_bradley_terry(games_from("wxyz", table), prior_ties=prior).elo
        np.testing.assert_allclose(ours, mm_bradley_terry(4, table, prior), atol=1e-6)
    assert sum(fit_bradley_terry(games_from("wxyz", table)).elo) == pytest.approx(4000)


def test_length_controlled_fit_is_the_minimum_of_an_independent_loss():
    # the judge favours the longer output: player 0 writes longer and wins more
    rng = np.random.default_rng(3)
    table, lens = [], []
    for _ in range(60):
        i, j = rng.choice(3, 2, replace=False)
        li, lj = rng.integers(20, 200, 2)
        p = 1 / (1 + math.exp(-(0.4 * (i == 0) - 0.4 * (j == 0) + 1.5 * math.tanh((li - lj) / 80))))
        table.append((int(i), int(j), float(rng.random() < p)))
        lens.append((li, lj))
    x = length_covariate(*np.array(lens).T)
    games = games_from("abc", table, covariate=x)
    fit = fit_bradley_terry(games, prior_ties=0, use_covariate=True)
    assert fit.gamma > 0

    def loss(beta, gamma):
        d = np.array([beta[i] - beta[j] for i, j, _ in table]) + gamma * x
        s = np.array([s for *_, s in table])
        return float(np.sum(s * np.log1p(np.exp(-d)) + (1 - s) * np.log1p(np.exp(d))))

    best = loss(fit.beta, fit.gamma)
    for k in range(4):  # no coordinate move lowers the loss: a stationary point of the convex loss
        for h in (1e-4, -1e-4):
            beta, gamma = fit.beta.copy(), fit.gamma
            if k < 3:
                beta[k] += h
            else:
                gamma += h
            assert loss(beta, gamma) >= best - 1e-9
    # equal lengths: the LC fit is the plain fit
    flat = games_from("abc", table, covariate=np.zeros(len(table)))
    np.testing.assert_allclose(fit_bradley_terry(flat, use_covariate=True).elo, fit_bradley_terry(flat).elo)


def test_bootstrap_resamples_prompts():
    # every prompt holds the same three games: resampling prompts cannot move anything, so CIs collapse
    per_prompt = [(0, 1, 1.0), (1, 2, 0.5), (0, 2, 0.0)]
    table = per_prompt * 5
    same = rate(games_from("abc", table, prompts=np.repeat(np.arange(5), 3)), bootstrap=200)
    np.testing.assert_allclose(same.elo.low, same.elo.value, atol=1e-6)
    np.testing.assert_allclose(same.elo.high, same.elo.value, atol=1e-6)
    # prompts that disagree give a real interval around the point
    mixed = [(0, 1, float(k % 2)) for k in range(10)]
    r = rate(games_from("ab", mixed, prompts=np.arange(10)), bootstrap=300, seed=1)
    assert r.elo.low[0] < r.elo.value[0] < r.elo.high[0]
    assert r.win_rate.value[0] == pytest.approx(0.5)


def test_win_matrix_counts_ties_as_half():
    table = [(0, 1, 1.0), (0, 1, 0.5), (1, 2, 0.0), (0, 1, 0.0)]
    m = win_matrix(games_from("abc", table))
    assert m[0, 1] == pytest.approx(1.5 / 3) and m[1, 0] == pytest.approx(1.5 / 3)
    assert m[2, 1] == 1.0 and math.isnan(m[0, 2])


# ---------------------------------------------------------------------------------- parser and protocol


@pytest.mark.parametrize("reply, verdict", [
    ("A", "A"), (" B.", "B"), ("**B**", "B"), ("(A)", "A"), ("A: because it is fluent", "A"),
    ('{"verdict": "B"}', "B"), ('```json\n{"winner": "tie"}\n```', "tie"), ("[[A]]", "A"),
    ("My final verdict is [[C]]", "tie"), ("Verdict: B", "B"), ("The better continuation is A.", "A"),
    ("Output (b)", "B"), ("Both are equally bad.", "tie"), ("tie", "tie"),
    ("A man walked in", None), ("[[A]] or [[B]]", None), ("The continuation is more fluent", None),
    ("The better one is a matter of taste", None), ("", None), (None, None),
])  # fmt: skip
def test_parser_reads_common_formats_and_never_guesses(reply, verdict):
    assert parse_verdict(reply) == verdict


def test_outcomes_need_both_orders_and_disagreement_is_a_tie():
    c = make_comparisons({"p": {"1": "x"}, "q": {"1": "y"}}, {"1": "prompt"}, seed=0)[0]
    cases = {  # (verdict with left as A, verdict with left as B) -> left's score, consistent, same slot
        ("A", "B"): (1.0, True, False), ("B", "A"): (0.0, True, False), ("A", "A"): (0.5, False, True),
        ("tie", "tie"): (0.5, True, False), ("A", "tie"): (0.5, False, False), ("A", None): (None, False, False),
    }
    for (va, vb), (score, consistent, same_slot) in cases.items():
        o = Outcome(c, va, vb)
        assert (o.score, o.consistent, o.same_slot) == (score, consistent, same_slot)
    counts = count([Outcome(c, *v) for v in cases])
    assert (counts.complete, counts.same_slot, counts.inconsistent) == (5, 1, 2)
    assert counts.position_bias == pytest.approx(1 / 5)


def test_order_is_seeded_per_example_and_balanced():
    coins = [order_coin(0, f"p{k}", "a", "b") for k in range(400)]
    assert coins == [order_coin(0, f"p{k}", "a", "b") for k in range(400)]
    assert 0.4 < sum(coins) / len(coins) < 0.6
    assert coins != [order_coin(1, f"p{k}", "a", "b") for k in range(400)]


def test_prompts_file_is_read_and_checked(tmp_path):
    from harness.errors import MixbenchError
    from suites.judge.generation import file_prompts

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "Once upon a time", "id": "a"}\n\n{"prompt": " The cat sat "}\n')
    assert [(p.id, p.text) for p in file_prompts(str(path), 0)] == [("a", "Once upon a time"), ("line3", "The cat sat")]
    assert len(file_prompts(str(path), 1)) == 1
    path.write_text('{"text": "no prompt field"}\n')
    with pytest.raises(MixbenchError, match="line 1"):
        file_prompts(str(path), 0)


# ----------------------------------------------------------------------------------------- client, cache


def test_client_retries_respect_retry_after_and_count_failures():
    waits: list[float] = []
    template = Template()
    with FakeJudge(lambda p, a, b: "A", timeout_delay=0.6) as judge:
        cfg = EndpointConfig(judge.url, "fake", timeout_s=0.3, max_retries=3, backoff_s=0.5, max_backoff_s=8.0)
        client = JudgeClient(cfg, sleep=waits.append, seed=0)
        judge.queue = ["429", "500", "timeout"]  # three failed attempts, the fourth (last allowed) answers
        assert client.ask(template.messages("p", "a", "b"), 0.0, 4) == "A"
        assert judge.chat_requests == 4 and client.stats()["retries"] == 3
        # the 429 carried Retry-After: 0 and was obeyed exactly; the others backed off within base * 2**attempt
        assert waits[0] == 0.0 and 0 <= waits[1] <= 0.5 * 2 and 0 <= waits[2] <= 0.5 * 4
        judge.queue = ["malformed", "no_choices"]  # a 200 without a readable message is retried too
        assert client.ask(template.messages("p", "a", "b"), 0.0, 4) == "A"
        judge.always = lambda p, a, b: "500"
        with pytest.raises(JudgeCallFailed) as failure:
            client.ask(template.messages("p", "a", "b"), 0.0, 4)
        assert failure.value.kind == "server_error" and client.stats()["failed_calls"] == 1
        assert judge.chat_requests == 4 + 3 + 4  # the last call: one try and max_retries=3 retries
    assert client.stats()["errors"] == {"malformed": 2, "rate_limited": 1, "server_error": 5, "timeout": 1}


def test_client_does_not_retry_a_bad_request_and_reads_retry_after():
    with FakeJudge(lambda p, a, b: "A") as judge:
        client = JudgeClient(EndpointConfig(judge.url, "fake", max_retries=3), sleep=lambda s: None)
        judge.queue = ["401"]
        with pytest.raises(JudgeCallFailed) as failure:
            client.ask(Template().messages("p", "a", "b"), 0.0, 4)
        assert failure.value.kind == "http_401" and judge.chat_requests == 1
    from suites.judge.client import _retry_after

    assert _retry_after({"retry-after": "3"}, 30) == 3.0
    assert _retry_after({"retry-after": "300"}, 30) == 30.0  # capped
    assert _retry_after({"retry-after-ms": "250"}, 30) == 0.25
    assert _retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 30) == 0.0  # a date in the past
    assert _retry_after({}, 30) is None


def test_cache_is_wal_and_readable_while_another_connection_writes(tmp_path):
    path = tmp_path / "c.sqlite"
    with JudgeCache(path) as writer, JudgeCache(path) as reader:
        assert writer._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        writer.put("k1", "judge", "t", "A")
        assert reader.get("k1") == "A" and reader.get("k2") is None
        writer.put("k1", "judge", "t", "B")  # the first reply for a key wins
        assert reader.get("k1") == "A" and len(reader) == 1


# -------------------------------------------------------------------------------------- arena end to end

PROMPTS = {f"p{k}": f"Prompt number {k} starts here" for k in range(6)}
MIXERS = ("alpha", "beta", "gamma", "delta")


def output(mixer: str, prompt_id: str) -> str:
    return f"continuation by {mixer} for {prompt_id}"


def owner(text: str) -> str:
    return text.split()[2]


def verdict_table(prompt_id: str, x: str, y: str) -> str:
    """Who wins on a prompt: alpha > beta > gamma > delta on most prompts, reversed on every third, some ties."""
    rank = {"alpha": 0, "beta": 1, "gamma": 2, "delta": 3, "epsilon": 4}
    k = int(prompt_id[1:])
    if (k + rank[x] + rank[y]) % 5 == 0:
        return "tie"
    better = x if rank[x] < rank[y] else y
    return better if k % 3 else (y if better == x else x)  # every third prompt goes the other way


def table_judge(prefix: str, a: str, b: str) -> str:
    """Follows the verdict table, and knows the canaries' gold answers."""
    canary = next((c for c in CANARIES if c.prefix == prefix), None)
    if canary is not None:
        return "A" if a == canary.good else "B"
    pid = next(p for p, text in PROMPTS.items() if text == prefix)
    winner = verdict_table(pid, owner(a), owner(b))
    return "tie" if winner == "tie" else ("A" if winner == owner(a) else "B")


def write_generations(store: ResultsStore, mixers=MIXERS, key: str = "gk1") -> None:
    for mixer in mixers:
        samples = [{"prompt_id": p, "prompt": t, "output": output(mixer, p)} for p, t in PROMPTS.items()]
        manifest = {
            "kind": "eval", "suite": "judge", "mixer": mixer, "preset": "quick", "seed": 0,
            "suite_config": {"n_prompts": len(PROMPTS)}, "parameters": 1000, "state_floats": 10,
            "suite_info": {"generation_key": key},
        }
        store.write_run(content_hash([mixer, key]), manifest, SuiteResult(metrics=[], samples=samples))


def arena_cfg(judge: FakeJudge, tmp_path: Path, **kw) -> ArenaConfig:
    base = dict(judge_url=judge.url, judge_model="fake-judge", cache=str(tmp_path / "cache.sqlite"), bootstrap=50,
                backoff_s=0.01, timeout_s=2.0, concurrency=3)
    return ArenaConfig(**{**base, **kw})


def expected_elo() -> dict[str, float]:
    index = {m: i for i, m in enumerate(sorted(MIXERS))}
    table = []
    for p in PROMPTS:
        for x, y in itertools.combinations(sorted(MIXERS), 2):
            w = verdict_table(p, x, y)
            table.append((index[x], index[y], 0.5 if w == "tie" else float(w == x)))
    elo = mm_bradley_terry(4, table, prior_ties=1)
    return {m: elo[i] for m, i in index.items()}


def ratings(store: ResultsStore) -> dict[str, dict[str, float]]:
    out = {}
    for run in store.iter_runs():
        if run.manifest.get("kind") == "judge-rating":
            out[run.manifest["mixer"]] = {m.name: m.value for m in run.metrics}
    return out


def test_arena_reproduces_the_verdict_table_ratings_exactly(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store)
    with FakeJudge(table_judge) as judge:
        result = judge_runs(store, arena_cfg(judge, tmp_path), progress=False)
        comparisons = 6 * len(PROMPTS)
        assert judge.chat_requests == 2 * comparisons + 2 * len(CANARIES)
        assert {b["temperature"] for b in judge.bodies} == {0.0}
    got = ratings(store)
    want = expected_elo()
    for mixer in MIXERS:
        assert got[mixer]["elo"] == pytest.approx(want[mixer], abs=1e-5)
        assert got[mixer]["position_bias"] == 0.0 and got[mixer]["unparsable_rate"] == 0.0
        assert got[mixer]["canary_agreement"] == 1.0
    wins = {m: [verdict_table(p, m, o) for p in PROMPTS for o in MIXERS if o != m] for m in MIXERS}
    for m, ws in wins.items():
        assert got[m]["win_rate"] == pytest.approx(sum(1.0 if w == m else 0.5 if w == "tie" else 0 for w in ws) / 18)
    report = result.pools[0]
    assert report.counts.complete == comparisons and report.counts.same_slot == 0
    # the leaderboard pivots the rating runs per mixer
    table = build_table(store)
    assert {"judge/elo", "judge/win_rate", "judge/position_bias"} <= set(table.attrs["metric_columns"])
    row = table.set_index("mixer").loc["alpha", "judge/elo"]
    assert row.value == pytest.approx(want["alpha"], abs=1e-5) and row.ci_low <= row.value <= row.ci_high


def test_rerun_makes_zero_judge_calls(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store)
    with FakeJudge(table_judge) as judge:
        judge_runs(store, arena_cfg(judge, tmp_path), progress=False)
        first = judge.chat_requests
        again = judge_runs(store, arena_cfg(judge, tmp_path), progress=False)
        assert judge.chat_requests == first and again.pools[0].status == "up to date"
        forced = judge_runs(store, arena_cfg(judge, tmp_path), force=True, progress=False)
        assert judge.chat_requests == first and forced.judge_calls == 0  # every verdict from the cache
        assert forced.session.canaries is not None and not forced.session.canaries.fresh
        # a new mixer joins: only its comparisons are asked (3 opponents x prompts x 2 orders) plus the canaries
        write_generations(store, mixers=("epsilon",))
        judge_runs(store, arena_cfg(judge, tmp_path), progress=False)
        assert judge.chat_requests == first + 2 * 4 * len(PROMPTS) + 2 * len(CANARIES)


def test_faults_are_retried_counted_and_nothing_judged_is_lost(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta"))
    doomed = output("beta", "p2")  # every presentation showing this output fails with a 500, every time

    with FakeJudge(table_judge, timeout_delay=1.0) as judge:
        # with one call at a time the requests are: p0..p5 in the first order, then p0..p5 in the second; each
        # fault below hits one call and its retry succeeds (None = answer), except on the doomed p2
        judge.queue = ["429", None, "500", None, "timeout", None, "malformed", None, "503", None, "no_choices", None,
                       "text"]  # fmt: skip
        judge.always = lambda p, a, b: "500" if doomed in (a, b) else None
        cfg = arena_cfg(judge, tmp_path, max_retries=2, timeout_s=0.5, concurrency=1)
        result = judge_runs(store, cfg, progress=False)
        report, stats = result.pools[0], result.session.stats
        # 12 presentations; both on p2 failed after 3 tries (timeout, 500, malformed / 500 x 3)
        assert report.presentations == 12 and report.failed == 2
        assert stats == {"requests": 12 + 8 + 2 * len(CANARIES), "retries": 8, "failed_calls": 2,
                         "errors": {"malformed": 2, "rate_limited": 1, "server_error": 6, "timeout": 1}}
        assert report.unparsable == 1  # the "text" reply (p0, second order): cached, counted, not retried
        assert report.counts.complete == 6 - 2  # p2 has no verdict, p0 no parsable second one
        got = ratings(store)
        assert got["alpha"]["failed_rate"] == pytest.approx(2 / 12)
        assert got["alpha"]["unparsable_rate"] == pytest.approx(1 / 10)
        assert got["alpha"]["canary_agreement"] == 1.0
        run = next(r for r in store.iter_runs() if r.manifest.get("kind") == "judge-rating")
        assert run.manifest["suite_info"]["client"]["failed_calls"] == 2
        assert sum(s["outcome"] == "incomplete" for s in run.samples) == 2

        # the judge recovers: the next run asks only what is missing (the two failed presentations), plus canaries
        judge.always = lambda p, a, b: None
        before = judge.chat_requests
        second = judge_runs(store, cfg, progress=False)
        assert judge.chat_requests - before == 2 + 2 * len(CANARIES)
        assert second.pools[0].failed == 0 and second.pools[0].counts.complete == 5


def test_position_bias_of_a_judge_that_always_says_a(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta", "gamma"))
    with FakeJudge(lambda p, a, b: "Verdict: A") as judge:
        judge_runs(store, arena_cfg(judge, tmp_path, bootstrap=0), progress=False)
    for values in ratings(store).values():
        assert values["position_bias"] == 1.0 and values["inconsistent_rate"] == 1.0
        assert values["elo"] == pytest.approx(1000) and values["win_rate"] == 0.5
        assert values["canary_agreement"] == 0.5


def test_baseline_mode_compares_each_mixer_with_the_baseline_only(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta", "gamma"))
    with FakeJudge(table_judge) as judge:
        judge_runs(store, arena_cfg(judge, tmp_path, baseline="beta", canaries=False), progress=False)
        assert judge.chat_requests == 2 * 2 * len(PROMPTS)
    got = ratings(store)
    assert "win_rate_vs_gamma" not in got["alpha"] and "win_rate_vs_beta" in got["alpha"]


def test_api_key_reaches_the_judge_and_nothing_else(tmp_path, capsys, monkeypatch):
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("JUDGE_CREDENTIAL_T", secret)  # a name the store's redaction would not recognise
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta"))
    with FakeJudge(table_judge) as judge:
        judge.queue = ["500"]  # an error path too
        result = judge_runs(store, arena_cfg(judge, tmp_path, api_key_env="JUDGE_CREDENTIAL_T"), progress=False)
        print(result.render())
    assert all(h.get("authorization") == f"Bearer {secret}" for h in judge.headers)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "manifest.json" for p in written) and any(p.suffix == ".sqlite" for p in written)
    for path in written:
        assert secret.encode() not in path.read_bytes(), path
    out = capsys.readouterr()
    assert secret not in out.out + out.err


def test_config_errors_are_one_clear_sentence():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="both --judge-url and --judge-model"):
        ArenaConfig(judge_url="http://x/v1")
    with pytest.raises(ConfigError, match="http"):
        ArenaConfig(judge_url="ftp://x", judge_model="m")
    with pytest.raises(ConfigError, match="n_prompts"):
        JudgeConfig(n_prompts=0)


# ------------------------------------------------------------------------------------------------- CLI


def test_eval_generates_then_rates_through_the_cli(tmp_path, monkeypatch, protot_checkpoint, attention_checkpoint):
    results = tmp_path / "results"
    with FakeJudge(lambda p, a, b: "A" if len(a) >= len(b) else "B") as judge:
        monkeypatch.setenv("MIXBENCH_JUDGE_URL", judge.url)
        monkeypatch.setenv("MIXBENCH_JUDGE_MODEL", "fake-judge")
        opts = ["--results", str(results), "--no-progress", "--suite-config", "n_prompts=3", "max_new_tokens=12"]
        assert main(["eval", "--suite", "judge", "--checkpoint", str(protot_checkpoint), *opts]) == 0
        assert judge.chat_requests == 0  # one mixer: nothing to compare yet
        assert main(["eval", "--suite", "judge", "--checkpoint", str(attention_checkpoint), *opts]) == 0
        asked = judge.chat_requests
        assert asked == 2 * 3 + 2 * len(CANARIES)
        assert main(["judge", "--results", str(results), "--preset", "tiny", "--no-progress"]) == 0
        assert judge.chat_requests == asked  # up to date: no call
    store = ResultsStore(results)
    gens = [r for r in store.iter_runs() if r.manifest["kind"] == "eval"]
    assert len(gens) == 2 and all(len(r.samples) == 3 for r in gens)
    assert gens[0].samples[0]["prompt"] == gens[1].samples[0]["prompt"]  # one shared prompt set
    assert gens[0].manifest["suite_info"]["decoding"] == {"max_new_tokens": 12, "temperature": 0.8, "top_k": 50,
                                                           "top_p": 0.92, "seed": 0}
    assert sorted(ratings(store)) == ["attention", "protot"]
    columns = build_table(store).attrs["metric_columns"]  # ratings are headline columns, generation stats are not
    assert "judge/elo" in columns and "judge/gen_tokens" not in columns
    assert "judge/gen_tokens" in build_table(store, all_metrics=True).attrs["metric_columns"]
    # generation is deterministic: a forced rerun of the same checkpoint gives the same continuations
    first = {s["prompt_id"]: s["output"] for s in gens[0].samples}
    mixer = gens[0].manifest["mixer"]
    ckpt = protot_checkpoint if mixer == "protot" else attention_checkpoint
    monkeypatch.setenv("MIXBENCH_JUDGE_URL", "http://127.0.0.1:9/v1")  # must not be needed: verdicts are cached
    assert main(["eval", "--suite", "judge", "--checkpoint", str(ckpt), *opts, "--force"]) == 0
    again = next(r for r in ResultsStore(results).iter_runs() if r.run_id == gens[0].run_id)
    assert {s["prompt_id"]: s["output"] for s in again.samples} == first


# ------------------------------------------------------------------------------------- the real local judge


@pytest.mark.slow
def test_local_judge_server_starts_answers_and_stops_on_interrupt():
    from suites.judge.server import LocalJudge

    server = LocalJudge(progress=False)
    canary, template = CANARIES[0], Template()
    with pytest.raises(KeyboardInterrupt), server as endpoint:
        proc = server._proc
        client = JudgeClient(endpoint)
        replies = [client.ask(template.messages(canary.prefix, a, b), 0.0, template.max_tokens)
                   for a, b in ((canary.good, canary.bad), (canary.bad, canary.good), (canary.good, canary.bad))]
        raise KeyboardInterrupt  # Ctrl-C in the middle of a run
    assert all(parse_verdict(r) is not None for r in replies), replies
    assert replies[0] == replies[2]  # deterministic at temperature 0
    assert proc.poll() is not None and server.start_seconds is not None  # stopped, not orphaned
