"""The judge suite: rating maths against independent solvers, probability verdicts and their position-bias
cancellation, the fallback to text verdicts, the canary gate, the client's retries against a real loopback HTTP
judge with injected faults and scripted log-probabilities, the cache (a rerun asks nothing; the verdict mode is
part of the key), the site section, the CLI command, and the real offline judge server."""

from __future__ import annotations

import hashlib
import html
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from fake_judge import FakeJudge, Scripted, probabilities
from harness import stats
from harness.cli import main
from harness.config import content_hash
from harness.errors import ConfigError, MixbenchError
from harness.running.evaluate import store_runs
from harness.config import to_dict
from harness.store.manifest import GateRecord, RunManifest, Subject
from harness.reporting.table import build_table
from harness.llm_judge import EndpointConfig, JudgeCallFailed, JudgeClient, Reply, ReplyCache, TokenChoice
from harness.store.results import ResultsStore
from harness.suite import SuiteResult
from suites.judge import (
    CANARIES, ArenaConfig, Games, Judge, JudgeConfig, Template, fit_bradley_terry, judge_runs, parse_verdict, rate,
)  # fmt: skip
from suites.judge.canaries import KINDS
from suites.judge.protocol import Outcome, count, make_comparisons, order_coin
from suites.judge.ratings import ELO_SCALE, fit_bradley_terry as fit_bt, length_covariate, win_matrix
from suites.judge.verdicts import presentation_score, verdict_probabilities


def rate_and_store(store: ResultsStore, cfg, **kwargs):
    """judge_runs, then what the core does with the rating runs it returns (the suite only reads the store)."""
    result = judge_runs(store, cfg, **kwargs)
    store_runs(store, result.runs)
    return result


# ------------------------------------------------------------------------------------ independent references

def mm_bradley_terry(n: int, table: list[tuple[int, int, float]], prior_ties: float) -> np.ndarray:
    """Hunter's (2004) MM iteration for Bradley–Terry strengths with fractional wins (a soft outcome s is s of a
    win to one side and 1 - s to the other): a solver that shares nothing with the Newton fit. Returns Elo."""
    wins, games = np.zeros(n), np.zeros((n, n))
    met = {(min(i, j), max(i, j)) for i, j, _ in table}
    for i, j, s, w in [(*t, 1.0) for t in table] + [(i, j, 0.5, prior_ties) for i, j in met]:
        wins[i] += w * s
        wins[j] += w * (1 - s)
        games[i, j] += w
        games[j, i] += w
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
    # soft outcomes: ten games at s = 0.7 are seven wins in ten, the same closed form
    soft = fit_bradley_terry(games_from("ab", [(0, 1, 0.7)] * 10), prior_ties=0)
    assert soft.elo[0] - soft.elo[1] == pytest.approx(400 * math.log10(7 / 3), abs=1e-9)


@pytest.mark.parametrize("soft", [False, True])
def test_four_players_match_an_independent_mm_solver(soft):
    rng = np.random.default_rng(7)
    strength = np.array([1.0, 0.3, -0.2, -1.1])
    table = []
    for i, j in itertools.combinations(range(4), 2):
        for _ in range(9):
            u = rng.random()
            p = 1 / (1 + math.exp(-(strength[i] - strength[j])))
            s = rng.beta(4 * p + 0.5, 4 * (1 - p) + 0.5) if soft else (
                1.0 if u < p * 0.8 else 0.0 if u > 1 - (1 - p) * 0.8 else 0.5)
            table.append((i, j, float(s)))
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


def test_bootstrap_refits_prompt_resamples_drawn_by_harness_stats():
    # every prompt holds the same three games: resampling prompts cannot move anything, so intervals collapse
    per_prompt = [(0, 1, 1.0), (1, 2, 0.5), (0, 2, 0.0)]
    same = rate(games_from("abc", per_prompt * 5, prompts=np.repeat(np.arange(5), 3)), bootstrap=200)
    for value, iv in zip(same.elo.value, same.elo.intervals):
        assert iv.kind == "bootstrap" and iv.low == pytest.approx(value) and iv.high == pytest.approx(value)
    # prompts that disagree: the interval is the percentile interval of refits on the same draws, by hand
    mixed = [(0, 1, float(k % 2)) for k in range(10)]
    games = games_from("ab", mixed, prompts=np.arange(10))
    r = rate(games, bootstrap=300, seed=1)
    by_hand = []
    for row in stats.resample_indices(10, 300, 1):
        counts = np.bincount(row, minlength=10).astype(float)
        by_hand.append(fit_bt(games, counts).elo[0])
    assert r.elo.intervals[0] == stats.percentile_interval(np.array(by_hand), 0.95)
    assert r.elo.intervals[0].low < r.elo.value[0] < r.elo.intervals[0].high
    assert r.win_rate.value[0] == pytest.approx(0.5)
    assert all(iv is None for iv in rate(games, bootstrap=0).elo.intervals)  # no bootstrap, no interval


def test_win_matrix_counts_ties_as_half():
    table = [(0, 1, 1.0), (0, 1, 0.5), (1, 2, 0.0), (0, 1, 0.0)]
    m = win_matrix(games_from("abc", table))
    assert m[0, 1] == pytest.approx(1.5 / 3) and m[1, 0] == pytest.approx(1.5 / 3)
    assert m[2, 1] == 1.0 and math.isnan(m[0, 2])


# ---------------------------------------------------------------------------------- verdicts and protocol


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


def _reply(*positions: tuple[str, list[tuple[str, float]]]) -> Reply:
    return Reply("".join(t for t, _ in positions),
                 tuple(TokenChoice(t, math.log(dict(top)[t]) if t in dict(top) else -9.0,
                                   tuple((a, math.log(p)) for a, p in top)) for t, top in positions))


def test_verdict_probabilities_are_read_at_the_verdict_token_and_renormalised():
    # "A" and " A" are one verdict; "a" is an article, not a verdict; unrelated tokens do not count
    r = _reply(("A", [("A", 0.4), (" A", 0.1), ("a", 0.2), (" B", 0.2), ("The", 0.1)]))
    p = verdict_probabilities(r)
    assert (p.a, p.b, p.tie) == pytest.approx((0.5 / 0.7, 0.2 / 0.7, 0.0))
    assert presentation_score(r, "probabilities") == pytest.approx(0.3 / 0.7)
    assert presentation_score(r, "text") == 1.0  # the same reply read as text: "A"
    # the verdict is the first generated token that reads as one, here after "Verdict:"
    later = _reply(("Verdict", [("Verdict", 0.9), ("A", 0.05)]), (":", [(":", 1.0)]),
                   (" B", [(" B", 0.6), (" A", 0.2), (" tie", 0.2)]))
    assert presentation_score(later, "probabilities") == pytest.approx(0.2 - 0.6)
    # no A or B among the alternatives: no probability verdict; no tokens at all: none either
    assert presentation_score(_reply(("The", [("The", 0.7), ("It", 0.2)])), "probabilities") is None
    assert presentation_score(Reply("A"), "probabilities") is None and presentation_score(None, "text") is None


def test_preference_averages_both_orders_and_cancels_a_constant_position_offset():
    c = make_comparisons({"p": {"1": "x"}, "q": {"1": "y"}}, {"1": "prompt"}, seed=0)[0]
    cases = {  # (score with left as A, score with left as B) -> left's preference, consistent, same slot
        (1.0, -1.0): (1.0, True, False), (-1.0, 1.0): (-1.0, True, False), (1.0, 1.0): (0.0, False, True),
        (0.0, 0.0): (0.0, True, False), (1.0, 0.0): (0.5, False, False), (1.0, None): (None, False, False),
        (0.8, 0.2): (0.3, False, True),  # leans A in both orders, but less with left shown as B
        (0.1, -0.5): (0.3, True, False),
    }
    for (sa, sb), (pref, consistent, same_slot) in cases.items():
        o = Outcome(c, sa, sb)
        assert o.preference == (None if pref is None else pytest.approx(pref))
        assert (o.consistent, o.same_slot) == (consistent, same_slot)
        assert o.score == (None if pref is None else pytest.approx((1 + pref) / 2))
    # a constant offset added to every P(A) - P(B) changes nothing
    for offset in (0.3, -0.45):
        assert Outcome(c, 0.2 + offset, -0.4 + offset).preference == pytest.approx(Outcome(c, 0.2, -0.4).preference)
    counts = count([Outcome(c, *v) for v in cases])
    assert (counts.complete, counts.same_slot, counts.consistent) == (7, 2, 4)
    assert counts.position_bias == pytest.approx(2 / 7) and counts.swap_consistency == pytest.approx(4 / 7)


def test_order_is_seeded_per_example_and_balanced():
    coins = [order_coin(0, f"p{k}", "a", "b") for k in range(400)]
    assert coins == [order_coin(0, f"p{k}", "a", "b") for k in range(400)]
    assert 0.4 < sum(coins) / len(coins) < 0.6
    assert coins != [order_coin(1, f"p{k}", "a", "b") for k in range(400)]


def test_canaries_are_forty_deterministic_pairs_in_four_kinds():
    assert len(CANARIES) >= 40 and len({c.id for c in CANARIES}) == len(CANARIES)
    assert {k: sum(c.kind == k for c in CANARIES) for k in KINDS} == {k: 10 for k in KINDS}
    for c in CANARIES:
        assert c.good != c.bad and c.prefix and c.good.strip() and c.bad.strip()
        if c.kind == "shuffled":
            assert sorted(c.bad.split()) == sorted(c.good.split())
        if c.kind == "repetitive":
            assert len(set(c.bad.split())) <= 3 and len(c.bad.split()) == len(c.good.split())
    from suites.judge import canaries

    assert canaries._build() == CANARIES  # rebuilt from scratch: the same pairs


def test_prompts_file_is_read_and_checked(tmp_path):
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
    from harness.llm_judge.openai_client import _retry_after

    assert _retry_after({"retry-after": "3"}, 30) == 3.0
    assert _retry_after({"retry-after": "300"}, 30) == 30.0  # capped
    assert _retry_after({"retry-after-ms": "250"}, 30) == 0.25
    assert _retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 30) == 0.0  # a date in the past
    assert _retry_after({}, 30) is None


def test_client_reads_log_probabilities_and_sends_url_query_parameters():
    messages = Template().messages("p", "a", "b")
    with FakeJudge(lambda p, a, b: probabilities(0.6, 0.3)) as judge:
        client = JudgeClient(EndpointConfig(judge.url + "?api-version=7", "fake"))
        reply = client.complete(messages, 0.0, 4, top_logprobs=5)
        assert reply.text == "A" and reply.tokens[0].token == "A"
        assert dict(reply.tokens[0].top) == pytest.approx({"A": math.log(0.6), " B": math.log(0.3),
                                                           "The": math.log(0.1)})
        assert judge.bodies[-1]["logprobs"] is True and judge.bodies[-1]["top_logprobs"] == 5
        assert judge.paths[-1] == "/v1/chat/completions?api-version=7"  # the query reaches the server, not the path
        assert client.complete(messages, 0.0, 4).tokens is None and "logprobs" not in judge.bodies[-1]
    with FakeJudge(lambda p, a, b: probabilities(0.6, 0.3), logprobs="ignored") as judge:
        assert JudgeClient(EndpointConfig(judge.url, "fake")).complete(messages, 0.0, 4, 5).tokens is None
    with FakeJudge(lambda p, a, b: "A", logprobs="refused") as judge:
        with pytest.raises(JudgeCallFailed) as failure:
            JudgeClient(EndpointConfig(judge.url, "fake")).complete(messages, 0.0, 4, 5)
        assert failure.value.kind == "http_400" and judge.chat_requests == 1  # not retried


def test_cache_is_wal_keyed_by_mode_and_readable_while_another_connection_writes(tmp_path):
    from harness.llm_judge import JudgeMode, reply_key

    path = tmp_path / "c.sqlite"
    reply = Reply("A", (TokenChoice("A", -0.1, (("A", -0.1), ("B", -2.5))),))
    with ReplyCache(path) as writer, ReplyCache(path) as reader:
        assert writer._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        k_prob, k_text = (reply_key("judge", "t", mode, "p", "a", "b") for mode in ("probabilities", "text"))
        assert k_prob != k_text  # the verdict mode is part of the key
        writer.put(k_prob, "judge", "t", "probabilities", reply)
        assert reader.get(k_prob) == reply and reader.get(k_text) is None
        writer.put(k_prob, "judge", "t", "probabilities", Reply("B"))  # the first reply for a key wins
        assert reader.get(k_prob) == reply and len(reader) == 1
        writer.set_judge_mode("judge", JudgeMode("text", "no logprobs"))
        assert reader.judge_mode("judge") == JudgeMode("text", "no logprobs") and reader.judge_mode("x") is None


# -------------------------------------------------------------------------------------- arena end to end

PROMPTS = {f"p{k}": f"Prompt number {k} starts here" for k in range(6)}
MIXERS = ("alpha", "beta", "gamma", "delta")
QUALITY = {"alpha": 1.0, "beta": 0.4, "gamma": -0.3, "delta": -1.1, "epsilon": 0.0}


def output(mixer: str, prompt_id: str) -> str:
    return f"continuation by {mixer} for {prompt_id}"


def owner(text: str) -> str:
    return text.split()[2]


def canary_of(prefix: str):
    return next((c for c in CANARIES if c.prefix == prefix), None)


def verdict_table(prompt_id: str, x: str, y: str) -> str:
    """Who wins on a prompt: alpha > beta > gamma > delta on most prompts, reversed on every third, some ties."""
    rank = {"alpha": 0, "beta": 1, "gamma": 2, "delta": 3, "epsilon": 4}
    k = int(prompt_id[1:])
    if (k + rank[x] + rank[y]) % 5 == 0:
        return "tie"
    better = x if rank[x] < rank[y] else y
    return better if k % 3 else (y if better == x else x)  # every third prompt goes the other way


def table_judge(prefix: str, a: str, b: str) -> str:
    """Follows the verdict table in text, and knows the canaries' gold answers."""
    canary = canary_of(prefix) if prefix not in PROMPTS.values() else None
    if canary is not None:
        return "A" if a == canary.good else "B"
    pid = next(p for p, text in PROMPTS.items() if text == prefix)
    winner = verdict_table(pid, owner(a), owner(b))
    return "tie" if winner == "tie" else ("A" if winner == owner(a) else "B")


def margin(a: str, b: str) -> float:
    """The known margin by which the judge prefers ``a``'s output: antisymmetric, |margin| < 0.7."""
    return 0.7 * math.tanh(QUALITY[owner(a)] - QUALITY[owner(b)])


def margin_judge(offset: float):
    """P(A) - P(B) = margin(a, b) + offset: a judge that prefers the better text by a known margin and adds a
    constant position offset; on the canaries it prefers the good side by 0.5 (plus the offset)."""

    def decide(prefix: str, a: str, b: str) -> Scripted:
        canary = canary_of(prefix)
        d = (0.5 if a == canary.good else -0.5) if canary is not None else margin(a, b)
        d += offset
        return probabilities((1 + d) / 2, (1 - d) / 2, other=0.0)

    return decide


def coin(*texts: str) -> float:
    return int(hashlib.sha256("|".join(texts).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def chance_judge(prefix: str, a: str, b: str) -> Scripted:
    """Confident, position-blind and uninformed: P(A) - P(B) in [-0.8, 0.8] from a hash of the presentation."""
    d = 1.6 * coin(prefix, a, b) - 0.8
    return probabilities((1 + d) / 2, (1 - d) / 2, other=0.0)


def write_generations(store: ResultsStore, mixers=MIXERS, key: str = "gk1", prompts=PROMPTS, out=output) -> None:
    """Generation runs as ``mixbench eval --suite judge`` writes them, for models of made-up mixers."""
    for mixer in mixers:
        samples = [{"prompt_id": p, "prompt": t, "output": out(mixer, p)} for p, t in prompts.items()]
        subject = Subject(kind="model", id=f"model-{mixer}", row_id=f"row-{mixer}", mixer_id=f"mixer-{mixer}",
                          mixer=mixer, mixer_source="tests", mixer_config={}, config_diff={}, preset="quick", seed=0,
                          parameters=1000, state_floats=10)
        manifest = RunManifest(
            suite="judge", suite_version=Judge.version, suite_config=to_dict(JudgeConfig(n_prompts=len(prompts))),
            config_source="default", config_diff={}, subject=subject, gate=GateRecord("skipped", 1),
            identity={"subject_parts": {"mixer": {"mixer": mixer}}}, suite_info={"generation_key": key},
        )
        store.write_run(content_hash([mixer, key]), manifest, SuiteResult(metrics=[], samples=samples))


def arena_cfg(judge: FakeJudge, tmp_path: Path, **kw) -> ArenaConfig:
    base = dict(judge_url=judge.url, judge_model="fake-judge", cache=str(tmp_path / "cache.sqlite"), bootstrap=50,
                backoff_s=0.01, timeout_s=2.0, concurrency=3)
    return ArenaConfig(**{**base, **kw})


def by_hand_elo(outcome) -> dict[str, float]:
    """Elo from an independent MM fit of ``outcome(prompt, x, y)`` (x's soft outcome) over all pairs."""
    index = {m: i for i, m in enumerate(sorted(MIXERS))}
    table = [(index[x], index[y], outcome(p, x, y)) for p in PROMPTS for x, y in itertools.combinations(sorted(MIXERS), 2)]
    elo = mm_bradley_terry(4, table, prior_ties=1)
    return {m: elo[i] for m, i in index.items()}


def rating_runs(store: ResultsStore) -> dict[str, object]:
    return {r.manifest.subject.label: r for r in store.iter_runs(samples=True) if r.manifest.kind == "aggregate"}


def ratings(store: ResultsStore) -> dict[str, dict[str, float]]:
    return {m: {x.name: x.value for x in r.metrics} for m, r in rating_runs(store).items()}


def metric(store: ResultsStore, mixer: str, name: str):
    return next(m for m in rating_runs(store)[mixer].metrics if m.name == name)


def test_arena_reproduces_the_verdict_table_ratings_exactly(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store)
    with FakeJudge(table_judge) as judge:
        result = rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
        comparisons = 6 * len(PROMPTS)
        assert judge.chat_requests == 1 + 2 * comparisons + 2 * len(CANARIES)  # one request finds the verdict mode
        assert {b["temperature"] for b in judge.bodies} == {0.0} and all(b["logprobs"] for b in judge.bodies)
    assert result.session.mode.mode == "probabilities"  # one-hot probabilities: the same as the text verdicts
    got = ratings(store)
    want = by_hand_elo(lambda p, x, y: {"tie": 0.5, x: 1.0}.get(verdict_table(p, x, y), 0.0))
    for mixer in MIXERS:
        assert got[mixer]["elo"] == pytest.approx(want[mixer], abs=1e-5)
        assert got[mixer]["position_bias"] == 0.0 and got[mixer]["swap_consistency"] == 1.0
        assert got[mixer]["unparsable_rate"] == 0.0 and got[mixer]["canary_agreement"] == 1.0
        assert metric(store, mixer, "elo").votes and metric(store, mixer, "elo").role == "score"
    wins = {m: [verdict_table(p, m, o) for p in PROMPTS for o in MIXERS if o != m] for m in MIXERS}
    for m, ws in wins.items():
        assert got[m]["win_rate"] == pytest.approx(sum(1.0 if w == m else 0.5 if w == "tie" else 0 for w in ws) / 18)
    canary = metric(store, "alpha", "canary_agreement")
    assert canary.interval == stats.wilson_interval(len(CANARIES), len(CANARIES)) and canary.n == len(CANARIES)
    report = result.pools[0]
    assert report.counts.complete == comparisons and report.counts.same_slot == 0
    # per-prompt items: the mixer's mean soft outcome on each prompt, whose mean is the win rate
    items = metric(store, "alpha", "win_rate").items
    assert sorted(items.ids) == sorted(PROMPTS) and np.average(items.values, weights=items.weights) == pytest.approx(
        got["alpha"]["win_rate"])
    # the board places the rating cells in each model's row, beside the generation run's
    table = build_table(store)
    assert {"judge/elo", "judge/win_rate", "judge/position_bias"} <= {c.name for c in table.columns}
    cell = table.cell("row-alpha", "judge/elo")
    assert cell.value == pytest.approx(want["alpha"], abs=1e-5) and cell.unreliable is None


def test_a_judge_that_prefers_the_better_text_by_a_known_margin_recovers_the_known_ratings(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store)
    with FakeJudge(margin_judge(offset=0.25)) as judge:
        result = rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
    assert result.session.mode.mode == "probabilities"
    # the offset cancels: the ratings are the by-hand fit of soft outcomes (1 + margin) / 2, no offset anywhere
    want = by_hand_elo(lambda p, x, y: (1 + margin(output(x, p), output(y, p))) / 2)
    got = ratings(store)
    for mixer in MIXERS:
        assert got[mixer]["elo"] == pytest.approx(want[mixer], abs=1e-4)
    assert [m for m in sorted(MIXERS, key=lambda m: -got[m]["elo"])] == ["alpha", "beta", "gamma", "delta"]
    samples = rating_runs(store)["alpha"].samples
    s = next(x for x in samples if x["opponent"] == "delta")
    assert s["preference"] == pytest.approx(margin(output("alpha", "p0"), output("delta", "p0")))
    assert s["advantage_as_a"] == pytest.approx(s["preference"] + 0.25)  # the offset is in each presentation
    assert s["advantage_as_b"] == pytest.approx(s["preference"] - 0.25) and s["outcome"] == "win"
    # every verdict survives the swap (the margin outweighs the offset wherever |margin| > 0.25)
    strong = sum(abs(margin(output(x, p), output(y, p))) > 0.25 for p in PROMPTS
                 for x, y in itertools.combinations(MIXERS, 2))
    assert got["alpha"]["swap_consistency"] == pytest.approx(strong / (6 * len(PROMPTS)))
    elo = metric(store, "alpha", "elo")
    assert elo.unreliable is None and elo.votes and elo.interval.kind == "bootstrap"


def test_a_judge_with_a_pure_position_bias_yields_zero_preference_and_tied_ratings(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta", "gamma"))
    with FakeJudge(lambda p, a, b: probabilities(0.7, 0.3)) as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
    for mixer, values in ratings(store).items():
        assert values["elo"] == pytest.approx(1000, abs=1e-9) and values["win_rate"] == pytest.approx(0.5)
        assert values["position_bias"] == 1.0 and values["swap_consistency"] == 0.0
        assert all(s["preference"] == pytest.approx(0.0) for s in rating_runs(store)[mixer].samples)
        # every canary pair is a tie too: nothing decided, so the ratings are marked unreliable
        assert "no canary pair was decided" in metric(store, mixer, "elo").unreliable


def test_text_verdicts_of_a_judge_that_always_says_a_are_ties(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta", "gamma"))
    with FakeJudge(lambda p, a, b: "Verdict: A") as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path, bootstrap=0, verdict_mode="text"), progress=False)
        assert not any(b.get("logprobs") for b in judge.bodies)  # text mode never asks for probabilities
    for mixer, values in ratings(store).items():
        assert values["position_bias"] == 1.0 and values["swap_consistency"] == 0.0
        assert values["elo"] == pytest.approx(1000) and values["win_rate"] == 0.5
        assert math.isnan(values["canary_agreement"]) and not metric(store, mixer, "elo").votes


@pytest.mark.parametrize("behaviour, reason", [("ignored", "returned no log-probabilities"),
                                               ("refused", "refused log-probabilities")])
def test_a_server_without_log_probabilities_falls_back_to_text_and_records_it(tmp_path, behaviour, reason):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta"))
    with FakeJudge(table_judge, logprobs=behaviour) as judge:
        result = rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
        probe = 2 if behaviour == "refused" else 1  # a refusal is confirmed by the same request without them
        assert judge.chat_requests == probe + 2 * len(PROMPTS) + 2 * len(CANARIES)
        assert all(not b.get("logprobs") for b in judge.bodies[probe:])
        assert result.session.mode.mode == "text" and reason in result.session.mode.reason
        run = rating_runs(store)["alpha"]
        judge_record = run.manifest.extra["judge"]
        assert judge_record["verdict_mode"] == "text" and reason in judge_record["verdict_mode_reason"]
        assert run.samples[0]["verdict_mode"] == "text"
        assert ratings(store)["alpha"]["canary_agreement"] == 1.0
        # the mode is remembered: a rerun computes its keys without asking anything
        before = judge.chat_requests
        assert rate_and_store(store, arena_cfg(judge, tmp_path), progress=False).pools[0].status == "up to date"
        assert judge.chat_requests == before
        with pytest.raises(MixbenchError, match="no probability verdicts"):
            rate_and_store(store, arena_cfg(judge, tmp_path, verdict_mode="probabilities"), progress=False)


def test_the_canary_gate_marks_a_chance_level_judge_unreliable_and_passes_a_good_one(tmp_path):
    for name, decide in (("chance", chance_judge), ("good", margin_judge(offset=0.1))):
        store = ResultsStore(tmp_path / name)
        write_generations(store, mixers=("alpha", "beta"))
        with FakeJudge(decide) as judge:
            result = rate_and_store(store, arena_cfg(judge, tmp_path, cache=str(tmp_path / f"{name}.sqlite")),
                                progress=False)
        c = result.session.canaries
        # by hand: the share of canaries whose order-averaged preference favours the good side, and its Wilson
        agreed = sum((decide(k.prefix, k.good, k.bad).top[0][1] - decide(k.prefix, k.bad, k.good).top[0][1]) > 0
                     for k in CANARIES)
        assert (c.agreed, c.decided) == (agreed, len(CANARIES))
        assert c.interval == stats.wilson_interval(agreed, len(CANARIES))
        elo = metric(store, "alpha", "elo")
        if name == "chance":
            assert c.interval.low <= 0.5 <= c.interval.high
            assert "includes chance (0.5)" in elo.unreliable and not elo.votes
            assert all(m.unreliable for m in rating_runs(store)["alpha"].metrics
                       if m.name.startswith(("elo", "win_rate")))
            assert "ratings marked unreliable" in result.render()
        else:
            assert agreed == len(CANARIES) and c.interval.low > 0.5
            assert elo.unreliable is None and elo.votes


def test_rerun_makes_zero_judge_calls_and_the_verdict_mode_is_part_of_the_key(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store)
    with FakeJudge(table_judge) as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
        first = judge.chat_requests
        again = rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
        assert judge.chat_requests == first and again.pools[0].status == "up to date"
        forced = rate_and_store(store, arena_cfg(judge, tmp_path), force=True, progress=False)
        assert judge.chat_requests == first and forced.judge_calls == 0  # every verdict from the cache
        assert forced.session.canaries is not None and not forced.session.canaries.fresh
        # a new mixer joins: only its comparisons are asked (4 opponents x prompts x 2 orders) plus the canaries
        write_generations(store, mixers=("epsilon",))
        rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
        second = first + 2 * 4 * len(PROMPTS) + 2 * len(CANARIES)
        assert judge.chat_requests == second
        # text verdicts are other cache entries: asked once, then cached as well
        text = rate_and_store(store, arena_cfg(judge, tmp_path, verdict_mode="text"), progress=False)
        assert judge.chat_requests == second + 2 * 10 * len(PROMPTS) + 2 * len(CANARIES)
        assert {p.status for p in text.pools} == {"rated"}
        rate_and_store(store, arena_cfg(judge, tmp_path, verdict_mode="text"), progress=False)
        assert judge.chat_requests == second + 2 * 10 * len(PROMPTS) + 2 * len(CANARIES)


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
        cfg = arena_cfg(judge, tmp_path, max_retries=2, timeout_s=0.5, concurrency=1, verdict_mode="text")
        result = rate_and_store(store, cfg, progress=False)
        report, stats_ = result.pools[0], result.session.stats
        # 12 presentations; both on p2 failed after 3 tries (timeout, 500, malformed / 500 x 3)
        assert report.presentations == 12 and report.failed == 2
        assert stats_ == {"requests": 12 + 8 + 2 * len(CANARIES), "retries": 8, "failed_calls": 2,
                          "errors": {"malformed": 2, "rate_limited": 1, "server_error": 6, "timeout": 1}}
        assert report.unparsable == 1  # the "text" reply (p0, second order): cached, counted, not retried
        assert report.counts.complete == 6 - 2  # p2 has no verdict, p0 no readable second one
        got = ratings(store)
        assert got["alpha"]["failed_rate"] == pytest.approx(2 / 12)
        assert got["alpha"]["unparsable_rate"] == pytest.approx(1 / 10)
        assert metric(store, "alpha", "failed_rate").interval == stats.wilson_interval(2, 12)
        assert got["alpha"]["canary_agreement"] == 1.0
        run = rating_runs(store)["alpha"]
        assert run.manifest.suite_info["client"]["failed_calls"] == 2
        assert sum(s["outcome"] == "incomplete" for s in run.samples) == 2

        # the judge recovers: the next run asks only what is missing (the two failed presentations), plus canaries
        judge.always = lambda p, a, b: None
        before = judge.chat_requests
        second = rate_and_store(store, cfg, progress=False)
        assert judge.chat_requests - before == 2 + 2 * len(CANARIES)
        assert second.pools[0].failed == 0 and second.pools[0].counts.complete == 5


def test_baseline_mode_compares_each_mixer_with_the_baseline_only(tmp_path):
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta", "gamma"))
    with FakeJudge(table_judge) as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path, baseline="beta", canaries=False, verdict_mode="text"),
                   progress=False)
        assert judge.chat_requests == 2 * 2 * len(PROMPTS)
    got = ratings(store)
    assert "win_rate_vs_gamma" not in got["alpha"] and "win_rate_vs_beta" in got["alpha"]
    assert "canaries off" in metric(store, "alpha", "elo").unreliable  # unchecked judges do not vote


def test_config_errors_are_one_clear_sentence():
    with pytest.raises(ConfigError, match="both --judge-url and --judge-model"):
        ArenaConfig(judge_url="http://x/v1")
    with pytest.raises(ConfigError, match="http"):
        ArenaConfig(judge_url="ftp://x", judge_model="m")
    with pytest.raises(ConfigError, match="verdict mode"):
        ArenaConfig(verdict_mode="logits")
    with pytest.raises(ConfigError, match="n_prompts"):
        JudgeConfig(n_prompts=0)


# ---------------------------------------------------------------------------------------------- site


class EscapingKit:
    """A minimal site kit: every helper escapes, like the publisher's."""

    def escape(self, value) -> str:
        return html.escape(str(value), quote=True)

    def table(self, header, rows, caption="") -> str:
        head = "".join(f"<th>{self.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{self.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><caption>{self.escape(caption)}</caption><tr>{head}</tr>{body}</table>"

    def plot(self, run, rel, caption="") -> str:
        return ""

    def model_label(self, run) -> str:
        return self.escape(run.manifest.get("mixer"))

    def run_link(self, run, text) -> str:
        return f'<a href="../runs/{self.escape(run.run_id)}.html">{self.escape(text)}</a>'


def test_site_section_shows_reliability_canaries_and_both_verdicts_escaped(tmp_path):
    hostile = '<script>alert("x")</script>'
    store = ResultsStore(tmp_path / "results")
    write_generations(store, mixers=("alpha", "beta"), out=lambda m, p: f"{hostile} by {m} for {p}")
    with FakeJudge(lambda p, a, b: probabilities(0.55, 0.35)) as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path), progress=False)
    runs = [r for r in store.iter_runs(samples=True) if r.manifest.suite == "judge"]
    page = Judge.site_section(runs, EscapingKit())
    assert "<script>" not in page and html.escape(hostile, quote=True) in page
    assert "judge reliability" in page and "canary agreement" in page and "swap consistency" in page
    assert "unreliable, do not vote" in page  # the position-only judge decides no canary
    assert "verdict, mixer as A" in page and "P(A) 0.61, P(B) 0.39" in page  # renormalised over A and B
    assert page.count("<tr><td>shuffled-") == 10 and "../runs/" in page
    assert page.count("<tr><td>alpha</td>") == 1  # the ratings table: one row per player
    # text verdicts of the same pool are a section of their own, with the newest run of each player
    with FakeJudge(lambda p, a, b: probabilities(0.55, 0.35)) as judge:
        rate_and_store(store, arena_cfg(judge, tmp_path, verdict_mode="text"), progress=False)
        rate_and_store(store, arena_cfg(judge, tmp_path, verdict_mode="text"), force=True, progress=False)
    runs = [r for r in store.iter_runs(samples=True) if r.manifest.suite == "judge"]
    page = Judge.site_section(runs, EscapingKit())
    assert page.count("probabilities verdicts</h3>") == 1 and page.count("text verdicts</h3>") == 1
    assert page.count("<tr><td>alpha</td>") == 2
    assert Judge.site_section([], EscapingKit()) == ""


# ------------------------------------------------------------------------------------------------- CLI


def test_eval_generates_then_rates_through_the_cli(tmp_path, monkeypatch, protot_checkpoint, attention_checkpoint):
    results = tmp_path / "results"
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path / "cache"))
    with FakeJudge(lambda p, a, b: "A" if len(a) >= len(b) else "B") as judge:
        monkeypatch.setenv("MIXBENCH_JUDGE_URL", judge.url)
        monkeypatch.setenv("MIXBENCH_JUDGE_MODEL", "fake-judge")
        opts = ["--results", str(results), "--no-progress", "--suite-config", "n_prompts=3", "max_new_tokens=12"]
        assert main(["eval", "--suite", "judge", "--checkpoint", str(protot_checkpoint), *opts]) == 0
        assert judge.chat_requests == 0  # one mixer: nothing to compare yet
        assert main(["eval", "--suite", "judge", "--checkpoint", str(attention_checkpoint), *opts]) == 0
        asked = judge.chat_requests
        # `mixbench judge` is the suite's own command; up to date: no call
        assert main(["judge", "--results", str(results), "--preset", "tiny", "--no-progress"]) == 0
        assert judge.chat_requests == asked
        assert main(["judge", "--results", str(results), "--verdict-mode", "text", "--no-progress"]) == 0
        asked_text = judge.chat_requests - asked
    store = ResultsStore(results)
    gens = [r for r in store.iter_runs(samples=True) if r.manifest.kind == "suite"]
    assert len(gens) == 2 and all(len(r.samples) == 3 for r in gens)
    assert gens[0].samples[0]["prompt"] == gens[1].samples[0]["prompt"]  # one shared prompt set
    # one request per distinct presentation: both orders of each prompt, one where the two continuations are the
    # same text (both orders are then one request), plus the probe and the canaries in both orders
    outputs = [{s["prompt_id"]: s["output"] for s in r.samples} for r in gens]
    presentations = sum(1 if outputs[0][p] == outputs[1][p] else 2 for p in outputs[0])
    assert asked == 1 + presentations + 2 * len(CANARIES)
    assert asked_text == presentations + 2 * len(CANARIES)  # text mode: no probe
    assert gens[0].manifest.suite_info["decoding"] == {"max_new_tokens": 12, "temperature": 0.8, "top_k": 50,
                                                           "top_p": 0.92, "seed": 0}
    assert sorted(r.manifest.subject.mixer for r in rating_runs(store).values()) == ["attention", "protot"]
    # ratings are headline columns, generation stats are not (an ad-hoc --suite-config: its own columns)
    columns = {c.metric for c in build_table(store, all_configs=True).columns if c.suite == "judge"}
    assert "elo" in columns and "gen_tokens" not in columns
    # generation is deterministic: a forced rerun of the same checkpoint gives the same continuations
    first = {s["prompt_id"]: s["output"] for s in gens[0].samples}
    mixer = gens[0].manifest.subject.mixer
    ckpt = protot_checkpoint if mixer == "protot" else attention_checkpoint
    monkeypatch.setenv("MIXBENCH_JUDGE_URL", "http://127.0.0.1:9/v1")  # must not be needed: verdicts are cached
    assert main(["eval", "--suite", "judge", "--checkpoint", str(ckpt), *opts, "--force"]) == 0
    again = next(r for r in ResultsStore(results).iter_runs(samples=True) if r.run_id == gens[0].run_id)
    assert {s["prompt_id"]: s["output"] for s in again.samples} == first


# ------------------------------------------------------------------------------------- the real local judge


@pytest.mark.slow
def test_local_judge_server_returns_probabilities_and_stops_on_interrupt(tmp_path, monkeypatch):
    from harness.llm_judge import LocalJudge

    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path))
    server = LocalJudge(progress=False)
    canary, template = CANARIES[0], Template()
    with pytest.raises(KeyboardInterrupt), server as endpoint:
        proc = server._proc
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        client = JudgeClient(endpoint)
        replies = [client.complete(template.messages(canary.prefix, a, b), 0.0, template.max_tokens,
                                   template.top_logprobs)
                   for a, b in ((canary.good, canary.bad), (canary.bad, canary.good))]
        raise KeyboardInterrupt  # Ctrl-C in the middle of a run
    for reply in replies:
        assert reply.tokens and len(reply.tokens[0].top) == template.top_logprobs
        probs = verdict_probabilities(reply)
        assert probs is not None and probs.a + probs.b + probs.tie == pytest.approx(1.0)
        assert math.exp(reply.tokens[0].logprob) <= 1.0
    assert proc.poll() is not None and server.start_seconds is not None  # stopped, not orphaned


def test_a_server_binary_that_dies_of_an_illegal_instruction_is_named_as_such(tmp_path, monkeypatch):
    """A llama-server compiled for instructions this CPU lacks dies of SIGILL before /health answers (the wheel
    built for Sapphire Rapids on an AMD Zen 4 host did); the error says so instead of a bare status -4."""
    from harness.llm_judge import LocalJudge

    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nkill -ILL $$\n")
    binary.chmod(0o755)
    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("MIXBENCH_LLAMA_SERVER", str(binary))
    with pytest.raises(MixbenchError, match=r"status -4 .*SIGILL.*CPU instructions this machine lacks"):
        with LocalJudge(progress=False, start_timeout_s=30):
            pass
