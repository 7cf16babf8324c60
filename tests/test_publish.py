"""The published site: its files, its escaping, and the site itself in headless Chromium.

The store is written through ``ResultsStore.write_run`` with real ``SuiteResult``s shaped like each suite's
output (perplexity, glue with majority rates, throughput with plots, judge generations and judged pairs,
robustness pairs, interpretability unit cards). Model text carries script payloads: if any of them ran in the
browser, it would change ``document.title``, which the tests read back from the live DOM.

The browser tests need Debian's ``chromium`` (``make test-deps`` installs it); they fail rather than skip
without it, so a machine missing it cannot pass the acceptance silently. Screenshots are saved under
``$MIXBENCH_TEST_ARTIFACTS`` (default ``test-artifacts/``) in ``publish/`` and their paths printed.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import os
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import MixbenchError
from harness.store.provenance import provenance
from harness.reporting.publish import MARKER, publish_site
from harness.reporting.board_document import validate_board_document
from harness.store.results import ResultsStore
from harness.reporting.site_html import CSP, script_json
from harness.suite import SuiteResult
from tests.planted import manifest, put, score, subject

ALERT = "<script>alert(1)</script>"
TITLE_PAYLOAD = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
EVIL_GENERATION = f"The cat sat {ALERT} and then {TITLE_PAYLOAD} </div></pre>"
EVIL_MIXER = "x</script><script>document.title='pwned'</script>"
MIXERS = ("protot", "attention", "mamba", "deltanet")
PARAMS = {"protot": 2000, "attention": 1500, "mamba": 1800, "deltanet": 1200, "none": 1000}  # EVIL_MIXER: none
ARTIFACTS = Path(os.environ.get("MIXBENCH_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "test-artifacts"))


# ---------------------------------------------------------------------------------------------- the store


def _write(store, mixer, suite, metrics, seed=0, plots=(), samples=(), provenance_=None, suite_info=None,
           headline=(), config=None, source="default", **subject_fields):
    s = subject(mixer, seed=seed, **{"parameters": PARAMS.get(mixer),
                                     "train_tokens_per_s": SPEEDS.get(mixer, 100.0) / 10 + RAW_DECIMALS,
                                     "train_flops": 46883930112.0,
                                     "loss_curve": [{"step": 1, "loss": 7.0},
                                                    {"step": 2, "loss": 6.0, "val_loss": 6.2}],
                                     **subject_fields})
    m = manifest(suite, s, config=config, source=source, headline=headline,
                 provenance=provenance_ or provenance(), suite_info=suite_info or {}, timings={"eval_s": 1.234567891})
    return put(store, m, metrics, list(samples)) if not plots else _put_with_plots(store, m, metrics, plots, samples)


def _put_with_plots(store, m, metrics, plots, samples):
    rid = f"{abs(hash((m.suite, m.subject.id, time.monotonic_ns()))):016x}"[:16]
    store.write_run(rid, m, SuiteResult(metrics, samples=list(samples), plots=list(plots)))
    return rid


def _png(path: Path, label: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2, 3], [3, 1, 2])
    ax.set_title(label, parse_math=False)
    fig.savefig(path)
    plt.close(fig)
    return path


SPEEDS = {"protot": 9000.0, "attention": 4000.0, "mamba": 7000.0, "deltanet": 8000.0}
#: what a measured number looks like before it is formatted (908.8598290814433 tokens/s): no page may show it raw
RAW_DECIMALS = 0.8598290814433
#: more GLUE tasks than fit beside the other suites at 1280 px: the board must scroll inside its container
GLUE_TASKS = ("sst2", "cola", "mnli-mismatched", "qnli", "standin-sentiment")
#: an ad-hoc (override) suite config: its column carries the config in its name
ROBUST_CONFIG = {"pairs_per_slice": 6, "samples_per_slice": 2, "slices": "typo,case,punctuation"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ResultsStore:
    root = tmp_path_factory.mktemp("store")
    scratch = tmp_path_factory.mktemp("plots")
    store = ResultsStore(root)
    # provenance as a user's machine may record it: absolute paths of the checkout, the working folder, the store
    prov = {**provenance(), "code": str(Path.home() / "src" / "mixbench"), "cwd": str(Path.home()),
            "results": str(root.resolve())}
    ppl = {"protot": 30.0, "attention": 28.0, "mamba": 31.0, "deltanet": 29.0}
    for mixer in MIXERS:
        for seed in ((0, 1) if mixer == "protot" else (0,)):
            prov_seed = prov if seed == 0 else {**prov, "packages": {**prov["packages"], "torch": "9.9.9"}}
            _write(store, mixer, "perplexity", [score("ppl", ppl[mixer] + seed, False, 1.0, unit="perplexity")],
                   seed=seed, headline=("ppl",), provenance_=prov_seed,
                   checkpoint=str(root / "checkpoints" / f"{mixer}-{seed}"))
        svg = scratch / f"{mixer}.svg"
        svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="60" height="20"><script>parent.document.title='
                       '"pwned"</script><rect width="60" height="20" fill="#39c"/></svg>')
        _write(store, mixer, "throughput", [score("prefill_tok_s", SPEEDS[mixer] + RAW_DECIMALS, True,
                                                   SPEEDS[mixer] * 0.1 + RAW_DECIMALS, role="speed", unit="tokens/s")],
               plots=[_png(scratch / "time_vs_length.png", mixer), svg], headline=("prefill_tok_s",),
               provenance_=prov)
    _write(store, EVIL_MIXER, "perplexity", [score("ppl", 40.0, False, 1.0)], headline=("ppl",))
    # the context-free control, the null every voting column needs (docs/protocol.md, "What votes")
    _write(store, "none", "perplexity", [score("ppl", 60.0, False, 1.0, unit="perplexity")], headline=("ppl",),
           control=True, context_free=True)
    _write(store, "none", "glue", [score(f"{task}/acc", 51.0, True, 1.0, chance=50.0, perfect=100.0, unit="x100")
                                   for task in GLUE_TASKS], headline=("*/acc",), control=True, context_free=True)
    for mixer, acc in {"protot": 80.0, "attention": 85.0, "mamba": 60.0}.items():
        tasks = [score(f"{task}/acc", acc - 3 * i + RAW_DECIMALS, True, 5.0, chance=50.0, perfect=100.0, unit="x100")
                 for i, task in enumerate(GLUE_TASKS)]
        _write(store, mixer, "glue", [*tasks, score("sst2/majority_acc", 50.0, True, role="baseline", unit="x100")],
               headline=("*/acc",))
    robust = [{"slice": "typo", "kind": "robustness", "id": "p1", "original": "The quick brown fox.",
               "perturbed": f"The quikc brown fox {ALERT}", "edits": [{"start": 4, "old": "quick", "new": "quikc"}],
               "jsd_final": 0.0123, "top1": 1.0, "spearman": 0.9, "dppl": 0.01}]
    info = {"pairs": {"duplicates": {"per_slice": {"typo": {"lines": 10, "unique": 4, "duplicate_rate": 0.6}}}}}
    _write(store, "protot", "robustness", [score("jsd_final/mean", 0.0123, False, 0.001, unit="bits")],
           samples=robust, suite_info=info, headline=("jsd_final/mean",), config=ROBUST_CONFIG, source="override")
    # a unit-card page in the shape suites/interpretability/cards.py writes, plus a script it must never run
    cards = scratch / "unit_cards.html"
    cards.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Unit cards: protot</title></head><body>"
        f"<h1>Unit cards: protot</h1><div class='cards'><div class='card'><h3>L0 P3</h3>"
        f"<div class='ctx'>{html.escape(ALERT)}<mark>fox</mark></div></div></div>"
        "<script>document.title='pwned'</script></body></html>"
    )
    unit = {"kind": "unit", "unit_set": "units", "label": "L0 P3", "top_tokens": [[f"fox{ALERT}", 0.5]],
            "token_entropy": 1.5, "scores": {"coherence": 0.4}, "attrs": {"half_life": 6.6}, "dead": False}
    _write(store, "protot", "interpretability", [score("coherence", 0.5, True, 0.05)], plots=[cards],
           samples=[unit], headline=("coherence",))
    _plant_reproductions(store)
    return store


def _plant_reproductions(store: ResultsStore) -> None:
    """Three verdicts as `mixbench reproduce` keeps them (one with model-like hostile text) and one damaged file."""
    from harness.reproduction import Check, Measured, ReproductionRecord, record_path

    some_run = store.run_ids()[0]
    yes = Check("attention prefill exponent", 1.7, True, Measured(1.9 + RAW_DECIMALS / 100, 1.85, 1.95, "bootstrap 95%"))
    no = Check(f"mamba decode ratio {ALERT}", 1.3, False, Measured(1.5, 1.4, 1.6, "bootstrap 95%"), note=TITLE_PAYLOAD)
    maybe = Check("protot prefill exponent", 1.2, False, Measured(1.15, 1.0, 1.3, "bootstrap 95%"))
    shared = dict(wall_s=4321.0, written_at="2026-12-05T10:00:00+00:00", git="0123456789ab", device="cpu",
                  source="a paper, Figure 2", published="attention is quadratic", checked="exponent > 1.7",
                  protocol="throughput on attention", departures="CPU")
    for name, checks, runs in (("physics-yes", (yes,), (some_run,)), ("physics-no", (yes, no), ("gone-run",)),
                               ("physics-maybe", (yes, maybe), ())):
        record = ReproductionRecord(name, "cpu", checks, run_ids=runs, **shared)
        store.write_file(record_path("cpu", name), record.to_json())
    store.write_file("reproductions/gpu/broken.json", '{"version": 1, "target": 3}')


@pytest.fixture(scope="module")
def site(store, tmp_path_factory) -> Path:
    return publish_site(store, tmp_path_factory.mktemp("pub") / "site")


# ---------------------------------------------------------------------------------------------- files


def test_script_json_cannot_close_its_element():
    data = {"name": "</script><script>alert(1)</script><!-- \u2028 & >", "n": [1, None]}
    text = script_json(data)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == data


def test_site_layout_downloads_legend_and_provenance(site, store):
    assert site.name == "site" and (site / MARKER).is_file()
    for rel in ("index.html", "assets/site.css", "assets/site.js", "pareto.png", "board.csv", "board.json",
                "leaderboard.md", "reproductions.html"):
        assert (site / rel).is_file(), rel
    suites = {p.name.rsplit("-", 1)[0] for p in (site / "suites").glob("*.html")}
    assert suites == {"glue", "interpretability", "perplexity", "robustness", "throughput"}
    runs = list(store.iter_runs(samples=False))
    assert len(list((site / "runs").glob("*.html"))) == len(runs) == len(list((site / "runs").glob("*.json")))
    assert len(list((site / "rows").glob("*.html"))) == 6  # four mixers, the hostile name, the control
    assert len(list((site / "rows").glob("*-loss.png"))) == 6  # each model's training and validation loss

    doc = json.loads((site / "board.json").read_text())
    validate_board_document(doc)
    by_mixer = {r["mixer"]: r for r in doc["rows"]}
    assert set(by_mixer) == {*MIXERS, EVIL_MIXER, "none"}
    assert by_mixer["protot"]["cells"]["perplexity/ppl"]["value"] == pytest.approx(30.5)  # two seeds averaged
    assert by_mixer["protot"]["cells"]["perplexity/ppl"]["interval"]["kind"] == "t"
    assert "glue/sst2/acc" not in by_mixer["deltanet"]["cells"]  # missing stays missing
    board_csv = list(csv.DictReader(io.StringIO((site / "board.csv").read_text())))
    assert {r["mixer"] for r in board_csv} == {*MIXERS, EVIL_MIXER, "none"}

    index = (site / "index.html").read_text()
    for mark in ("What the marks mean", "tie groups", "Pareto", "unreliable", "check"):
        assert mark in index, mark
    assert "Quality against measured speed" in index and "Red: on the Pareto front" in index
    assert "throughput/prefill_tok_s (interleaved, higher = faster)" in index

    # provenance per row: protot's two perplexity runs differ in torch's version, and the row page says so
    protot_row = next(p for p in (site / "rows").glob("protot-*.html") if p.suffix == ".html")
    text = protot_row.read_text()
    assert "Differs between runs (highlighted): torch" in text and "9.9.9" in text
    assert "Training and validation loss" in text
    assert index.count("runs of this row differ in torch") == 1  # protot's row only
    attention_row = next(p for p in (site / "rows").glob("attention-*.html")).read_text()
    assert "All runs agree on code, packages, device, kernel and gate." in attention_row
    assert html.escape(provenance()["python"]) in attention_row


def test_reproductions_page_shows_each_verdict_its_checks_and_plot(site, store):
    """Verdicts recomputed from the stored checks (not read back), each check's expected and measured interval,
    a plot per record, links to the runs the site has, and a damaged record named instead of breaking the site."""
    index = (site / "index.html").read_text()
    assert 'href="reproductions.html"' in index and "1 inconclusive, 1 not reproduced, 1 reproduced" in index
    page = (site / "reproductions.html").read_text()
    for name, verdict in (("physics-yes", "reproduced"), ("physics-no", "not reproduced"),
                          ("physics-maybe", "inconclusive")):
        section = re.split(rf'<h2 id="{name}-cpu-[0-9a-f]{{8}}">', page)[1].split("<h2")[0]
        assert f">{verdict}</span>" in section.split("</h2>")[0], name
        assert "a paper, Figure 2" in section and "72 min" in section and "0123456789ab" in section
        assert len(list((site / "reproductions").glob(f"{name}-cpu-*.png"))) == 1
    assert "1.9086 [1.85, 1.95] (bootstrap 95%)" in page and "&gt; 1.7" in page and "&lt; 1.3" in page
    assert html.escape(f"mamba decode ratio {ALERT}") in page and ALERT not in page and TITLE_PAYLOAD not in page
    assert f'href="runs/{store.run_ids()[0]}.html"' in page and "1 not in this store" in page
    assert "reproductions/gpu/broken.json is not a reproduction record" in page


def test_a_reproduction_record_survives_the_store_and_refuses_damage():
    from harness.reproduction import Check, Measured, ReproductionRecord

    check = Check("x", 0.0, True, Measured(float("nan"), None, None), note="n", counts=False, precondition=True)
    record = ReproductionRecord("t", "gpu", (check, Check("y", 1.0, False, Measured(0.5, 0.4, 0.6, "w"))), 1.5,
                                "2026-12-05T00:00:00+00:00", None, "cuda", "s", "p", "c", "pr", "d", ("r1",))
    back = ReproductionRecord.from_json(record.to_json().encode(), "f")
    assert back.checks[1] == record.checks[1] and back.checks[0].measured.low is None
    assert back.verdict == record.verdict == "inconclusive" and back.run_ids == ("r1",)
    good = json.loads(record.to_json())
    for damage in ({"verdict": "reproduced", "checks": "all fine"}, {"wall_s": float("inf")}, {"scale": "huge"},
                   {"run_ids": [1]}, {"version": 3}, {"git": 5}):
        bad = json.dumps({**good, **damage}).encode()
        with pytest.raises(MixbenchError, match="f is not a reproduction record"):
            ReproductionRecord.from_json(bad, "f")
    tampered = json.loads(record.to_json())
    tampered["verdict"] = "reproduced"  # a stored verdict is never trusted: it is recomputed from the checks
    assert ReproductionRecord.from_json(json.dumps(tampered).encode(), "f").verdict == "inconclusive"
    with pytest.raises(MixbenchError, match="not JSON"):
        ReproductionRecord.from_json(b"\xff{", "f")
    with pytest.raises(MixbenchError, match="more than"):
        ReproductionRecord.from_json(b" " * (2 << 20), "f")


def test_a_store_of_mixer_scoped_runs_only_publishes(tmp_path):
    """Suites that train their own models (synthetic) store runs whose subject is a mixer, not a model: their
    identity parts are the mixer's own (no nested mixer dict). Publishing such a store crashed building the rows'
    provenance."""
    store = ResultsStore(tmp_path / "store")
    for mixer, acc in (("a", 0.8), ("b", 0.3)):
        s = dataclasses.replace(subject(mixer), kind="mixer", preset=None, seed=None)
        m = dataclasses.replace(manifest("synthetic", s, headline=("recall/acc",)),
                                identity={"subject_parts": {"mixer": mixer, "mixer_code": f"code-{mixer}"}})
        put(store, m, [score("recall/acc", acc, True, 0.02)])
    site = publish_site(store, tmp_path / "site")
    doc = json.loads((site / "board.json").read_text())
    validate_board_document(doc)
    by_mixer = {r["mixer"]: r for r in doc["rows"]}
    assert {k: r["provenance"]["mixer_code"] for k, r in by_mixer.items()} == {"a": "code-a", "b": "code-b"}
    assert by_mixer["a"]["gate"] == "passed"


def test_every_page_escapes_model_text_and_loads_nothing_from_outside(site):
    pages = list(site.rglob("*.html"))
    ours = [p for p in pages if "plots" not in p.parts]
    assert len(ours) > 10
    for page in ours:
        text = page.read_text()
        assert f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP)}">' in text, page
        assert ALERT not in text and TITLE_PAYLOAD not in text and EVIL_MIXER not in text, page
        scripts = re.findall(r"<script\b[^>]*>", text)
        assert all('src="' in s and s.endswith('assets/site.js">') or 'type="application/json"' in s for s in scripts)
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:[a-z]+:)?//""", text, re.IGNORECASE), page  # nothing remote
        assert not re.search(r"<[^>]*\son\w+\s*=", text), page  # no event-handler attribute in any tag
    index = (site / "index.html").read_text()
    island = re.search(r'<script type="application/json" id="board-data">(.*?)</script>', index, re.DOTALL).group(1)
    assert EVIL_MIXER in {r["mixer"] for r in json.loads(island)["rows"]}
    card = next((site / "plots").rglob("unit_cards.html")).read_text()
    assert card.startswith('<!doctype html><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
                           "content=\"default-src 'none'")  # its own script is blocked wherever it is opened
    robustness = next((site / "suites").glob("robustness-*.html")).read_text()
    assert html.escape(f"The quikc brown fox {ALERT}") in robustness  # the suite's own section, escaped
    assert "duplicate rate" in robustness and "0.6" in robustness
    interp = next((site / "suites").glob("interpretability-*.html")).read_text()
    assert "Units and interventions" in interp and html.escape(f"fox{ALERT}") in interp


def test_publish_replaces_its_own_site_and_refuses_other_folders(store, tmp_path):
    out = tmp_path / "site"
    publish_site(store, out)
    stale = out / "runs" / "stale.html"
    stale.write_text("old")
    assert publish_site(store, out) == out
    assert not stale.exists() and (out / "index.html").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind
    foreign = tmp_path / "docs"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(MixbenchError, match="was not written by mixbench"):
        publish_site(store, foreign)
    assert (foreign / "keep.txt").read_text() == "mine"


def test_a_live_site_is_never_replaced_by_a_mistyped_or_empty_store(store, tmp_path):
    out = publish_site(store, tmp_path / "site")
    files = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(MixbenchError, match="no results store at"):
        publish_site(ResultsStore(tmp_path / "typo"), out)
    empty = ResultsStore(tmp_path / "empty")
    empty.ensure_writable()
    with pytest.raises(MixbenchError, match="replace the site .* with an empty board"):
        publish_site(empty, out)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == files
    forced = publish_site(empty, out, force=True)
    assert "no results in" in (forced / "index.html").read_text()


def test_cli_publish(store, tmp_path, capsys):
    out = tmp_path / "cli-site"
    assert main(["publish", "--results", store.root, "--out", str(out)]) == 0
    assert f"site written to {out}" in capsys.readouterr().out
    assert (out / "index.html").is_file()
    (tmp_path / "file").write_text("x")
    assert main(["publish", "--results", store.root, "--out", str(tmp_path / "file")]) == 2
    assert "file is a file; writing the site would replace it" in capsys.readouterr().err
    assert main(["publish", "--results", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no results store at" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the browser


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed; `make test-deps` installs it (apt-get install -y chromium)")
    return exe


def _browse(url: str, profile: Path, *flags: str) -> subprocess.CompletedProcess:
    """Headless Chromium with no network (every host name fails to resolve) and a fresh profile."""
    cmd = [
        _chromium(), "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
        "--disable-extensions", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--mute-audio", "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}", "--virtual-time-budget=5000", *flags, url,
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root (CI runs as root)
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


class _Dom(HTMLParser):
    """What the tests read from Chromium's serialised DOM: title, scripts, and the board's mixers in row order."""

    def __init__(self, text: str):
        super().__init__()
        self.title, self.scripts, self.board_rows, self.sorted = "", [], [], None
        self._in_title = self._in_board = self._in_row = self._in_link = False
        self._cell = -1
        self._first = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in_title = True
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "table" and a.get("id") == "board":
            self._in_board, self.sorted = True, a.get("data-sorted")
        elif self._in_board and tag == "tr":
            self._in_row, self._cell, self._first = True, -1, ""
        elif self._in_row and tag == "td":
            self._cell += 1
        elif self._in_row and tag == "a":
            self._in_link = True

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        elif tag == "a":
            self._in_link = False
        elif tag == "table" and self._in_board:
            self._in_board = False
        elif tag == "tr" and self._in_row:
            self._in_row = False
            if self._cell >= 0:
                self.board_rows.append(self._first)

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._in_row and self._cell == 1 and self._in_link:  # the model (its link), not the flags
            self._first += data


def _dom(url: str, profile: Path) -> tuple[_Dom, str]:
    text = _browse(url, profile, "--dump-dom").stdout
    assert "</html>" in text, "Chromium printed no DOM"
    return _Dom(text), text


def _only_our_scripts(dom: _Dom) -> None:
    for attrs in dom.scripts:
        assert attrs.get("type") == "application/json" or str(attrs.get("src", "")).endswith("assets/site.js"), attrs


def test_site_in_headless_chromium(site, tmp_path):
    profile = tmp_path / "profile"
    index = (site / "index.html").as_uri()

    dom, _ = _dom(index, profile)
    assert dom.title == "mixbench leaderboard"  # no payload in a mixer name changed it
    _only_our_scripts(dom)
    assert sorted(dom.board_rows) == sorted([*MIXERS, EVIL_MIXER, "none"])  # every row, names as text
    # server order: rank first (protot, deltanet, attention, mamba by perplexity and the rest), unranked last

    # sorting runs in the browser (site.js): by parameters, both ways; the row without parameters stays last
    by_params = sorted([*MIXERS, "none"], key=PARAMS.get)
    dom, _ = _dom(index + "#sort=params:desc", profile)
    assert dom.sorted == "params:desc" and dom.board_rows == [*reversed(by_params), EVIL_MIXER]
    dom, _ = _dom(index + "#sort=params:asc", profile)
    assert dom.sorted == "params:asc" and dom.board_rows == [*by_params, EVIL_MIXER]
    dom, _ = _dom(index + "#sort=model:desc", profile)
    assert dom.board_rows == sorted([*MIXERS, EVIL_MIXER, "none"], key=str.lower, reverse=True)

    robustness = next((site / "suites").glob("robustness-*.html"))
    dom, text = _dom(robustness.as_uri(), profile)
    assert dom.title == "mixbench · robustness"  # neither <script> nor onerror in the pair text ran
    _only_our_scripts(dom)
    assert html.escape(ALERT, quote=False) in text  # the live DOM holds the payload as text
    assert "<script>alert(1)</script>" not in text  # no such element in the DOM, only its text
    assert not re.search(r"<img[^>]*onerror", text)

    card = next((site / "plots").rglob("unit_cards.html"))
    dom, text = _dom(card.as_uri(), profile)
    assert dom.title == "Unit cards: protot"  # the card's own script is blocked by the prepended CSP
    assert html.escape(ALERT, quote=False) in text

    ARTIFACTS.joinpath("publish").mkdir(parents=True, exist_ok=True)
    for name, url in (("index", index), ("robustness", robustness.as_uri())):
        shot = ARTIFACTS / "publish" / f"{name}.png"
        shot.unlink(missing_ok=True)
        _browse(url, profile, f"--screenshot={shot}", "--window-size=1400,1000", "--hide-scrollbars")
        from PIL import Image

        with Image.open(shot) as img:
            assert img.size == (1400, 1000)
            rgb = img.convert("RGB")
            assert rgb.getpixel((5, 5)) == (0x23, 0x39, 0x5D)  # the header's colour: the stylesheet loaded
            assert len(rgb.getcolors(1 << 20) or []) > 50  # text and a table were drawn, not a blank page
        print(f"screenshot: {shot}")


#: measures the page after it has loaded and writes what it found into the page as JSON (read back from the DOM
#: Chromium dumps): the page's own width against the window's, and for every table whether it sits in a scrolling
#: container and whether its last header can be scrolled into view there
PROBE = """"use strict";
window.addEventListener("load", function () {
  var de = document.documentElement, out = {scrollWidth: de.scrollWidth, innerWidth: window.innerWidth,
    clientWidth: de.clientWidth, tables: [], outside: []};
  Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
    var r = el.getBoundingClientRect();
    if (r.right > window.innerWidth + 1 && !el.closest(".scroll") && out.outside.length < 10) {
      out.outside.push(el.tagName + "." + el.className);
    }
  });
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (t) {
    var box = t.parentElement, heads = (t.tHead || t).rows[0].cells, last = heads[heads.length - 1];
    box.scrollLeft = box.scrollWidth;
    var b = box.getBoundingClientRect(), h = last.getBoundingClientRect();
    out.tables.push({id: t.id, cls: t.className, box: box.className, overflowX: getComputedStyle(box).overflowX,
      scrollWidth: box.scrollWidth, clientWidth: box.clientWidth, scrolled: box.scrollLeft,
      lastLeft: h.left - b.left, lastRight: h.right - b.right, last: last.getAttribute("data-key")});
    box.scrollLeft = 0;
  });
  out.text = document.body.innerText;
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
"""


def _layout(site: Path, page: Path, width: int, profile: Path) -> dict:
    """The probe's findings for ``page`` (a page of ``site``, a copy the probe may be added to) at ``width`` px."""
    depth = len(page.relative_to(site).parts) - 1
    (site / "assets" / "probe.js").write_text(PROBE)
    text = page.read_text()
    if "probe.js" not in text:  # loaded from the site's own folder, so the page's CSP (script-src 'self') allows it
        page.write_text(text.replace("</body>", f'<script src="{"../" * depth}assets/probe.js"></script></body>'))
    dump = _browse(page.as_uri(), profile, "--dump-dom", f"--window-size={width},900", "--hide-scrollbars").stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dump, re.DOTALL)
    assert found, f"the probe did not run on {page.name}"
    return json.loads(html.unescape(found.group(1)))


#: a float printed as Python repr's it (908.8598290814433): six or more significant decimals
RAW_FLOAT = re.compile(r"\d+\.0*[1-9]\d{5,}")


def test_pages_fit_the_window_and_every_column_is_reachable(site, tmp_path):
    """At 1280 and 1920 px the page itself never scrolls sideways; a board or provenance table wider than the
    window scrolls in its own container, and its last column can be scrolled into view there."""
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    pages = {
        "index": copy / "index.html",
        "suite": next((copy / "suites").glob("glue-*.html")),
        "suite with a section": next((copy / "suites").glob("robustness-*.html")),
        "model": next((copy / "rows").glob("protot-*.html")),
        "reproductions": copy / "reproductions.html",
    }
    last_column = json.loads((site / "board.json").read_text())["columns"][-1]["name"]
    wide_board = False
    for width in (1280, 1920):
        for name, page in pages.items():
            found = _layout(copy, page, width, tmp_path / "profile")
            where = f"{name} at {width} px"
            assert found["innerWidth"] == width, where
            assert found["scrollWidth"] <= found["innerWidth"], (where, found["scrollWidth"], found["outside"])
            assert not found["outside"], (where, found["outside"])  # nothing sticks out of the page but in a scroller
            tables = found["tables"]
            assert tables, where
            for t in tables:
                assert "scroll" in t["box"].split() and t["overflowX"] == "auto", (where, t)
                # scrolled to the end, the last header lies inside its container's visible part
                assert t["lastLeft"] >= -1 and t["lastRight"] <= 1, (where, t)
            if name == "index":
                board = next(t for t in tables if t["id"] == "board")
                assert board["last"] == last_column  # the full board's last column, reached by scrolling
                wide_board |= board["scrollWidth"] > board["clientWidth"] and board["scrolled"] > 0
            elif name == "model":
                assert any("prov" in t["cls"].split() for t in tables), where
                assert not RAW_FLOAT.search(found["text"]) and not re.search(r"\d+\.\d{6,}", found["text"]), where
                assert "46.88 GFLOP" in found["text"] and f"{SPEEDS['protot'] / 10 + RAW_DECIMALS:.1f}" in found["text"]
            assert not RAW_FLOAT.search(found["text"]), (where, RAW_FLOAT.search(found["text"]).group(0))
    assert wide_board  # the fixture's board is wider than 1280 px: the check above did scroll it


def test_numbers_are_formatted_on_every_page(site):
    """No page prints a float as Python stores it: run pages (metrics, intervals, timings) and model pages
    (parameters, FLOPs, tokens/s) included. Only the run's manifest, shown as stored, keeps every digit."""
    for page in site.rglob("*.html"):
        if "plots" in page.parts:
            continue
        text = re.sub(r"<details><summary>show</summary>.*?</details>", "", page.read_text(), flags=re.DOTALL)
        text = re.sub(r'<script type="application/json".*?</script>|data-sort="[^"]*"', "", text, flags=re.DOTALL)
        assert not RAW_FLOAT.search(text), (page.name, RAW_FLOAT.search(text).group(0))
    protot_row = next((site / "rows").glob("protot-*.html")).read_text()
    assert "2,000 (2k)" in protot_row and "46.88 GFLOP" in protot_row and "900.9" in protot_row
    throughput_run = next(p for p in (site / "runs").glob("*.html") if "prefill_tok_s" in p.read_text()).read_text()
    assert re.search(r"<td[^>]*>\d,\d{3}</td>", throughput_run)  # 9,001 tokens/s, not 9000.8598290814433
    assert "eval 1.23 s" in throughput_run


def test_no_local_paths_on_the_site(site, store):
    """The site is published for others: neither the store's folder nor the home directory (both in the fixture's
    provenance and checkpoint paths) appears in any page or download; the store is named by its folder's name."""
    local = [str(store.local_path), str(store.local_path.resolve()), str(Path.home())]
    checked = 0
    for path in [*site.rglob("*.html"), *site.rglob("*.json"), *site.rglob("*.csv"), *site.rglob("*.md"),
                 site / MARKER]:
        text = path.read_text()
        for folder in local:
            assert folder not in text, (path.relative_to(site), folder)
        checked += 1
    assert checked > 20
    assert f"<code>{store.local_path.name}</code>" in (site / "index.html").read_text()
    run = json.loads(next(p for p in (site / "runs").glob("*.json") if "checkpoints" in p.read_text()).read_text())
    assert run["provenance"]["cwd"] == "~" and run["provenance"]["code"] == "~/src/mixbench"
    assert run["provenance"]["results"] == store.local_path.name
    assert run["subject"]["checkpoint"].startswith(f"{store.local_path.name}/checkpoints/")


def test_headers_are_short_and_the_legend_says_each_thing_once(site):
    index = (site / "index.html").read_text()
    name = "robustness[pairs_per_slice=6, samples_per_slice=2, slices=typo,case,punctuation]/jsd_final/mean"
    th = re.search(rf'<th data-key="{re.escape(html.escape(name))}"[^>]*>(.*?)</th>', index).group(0)
    assert f'title="{html.escape(name)} (lower is better; unit: bits; config: ' in th
    shown = re.sub(r"<[^>]+>", "", th.split(">", 1)[1])
    assert "jsd_final/mean ↓" in shown and "slices=typo" not in shown and len(shown) < 50
    assert f"<code>{html.escape(name)}</code>" in index  # the column list gives the full name
    shown = re.sub(r"<[^>]+>", "", re.sub(r"<script.*?</script>", "", index, flags=re.DOTALL))  # the page's text
    for said_once in ("Borda rank within the preset", "tie groups of a voting column", "the point estimate lies",
                      "conformance gate", "deltanet / tiny is not ranked: it lacks glue"):
        assert shown.count(html.escape(said_once)) == 1, said_once
    assert "<h2>Notes</h2>" not in index
    assert "floats of decode state per sequence" in index  # the board's own notes are in the one list


def test_without_a_speed_column_there_is_no_pareto_view(tmp_path):
    store = ResultsStore(tmp_path / "store")
    for mixer, ppl in (("protot", 30.0), ("attention", 28.0)):
        _write(store, mixer, "perplexity", [score("ppl", ppl, False, 1.0)], headline=("ppl",))
    out = publish_site(store, tmp_path / "site")
    index = (out / "index.html").read_text()
    assert not (out / "pareto.png").exists() and "pareto.png" not in index and "◆ Pareto" not in index
    assert "No Pareto view: this board has no interleaved speed measurement" in index


def test_publish_from_an_fsspec_store(tmp_path):
    """A store behind fsspec (memory://) publishes the same way: everything is read through the store's API."""
    store = ResultsStore(f"memory://publish-{time.monotonic_ns()}")
    plot = _png(tmp_path / "curve.png", "curve")
    for mixer, ppl in (("protot", 30.0), ("attention", 28.0)):
        _write(store, mixer, "perplexity", [score("ppl", ppl, False, 1.0)], plots=[plot], headline=("ppl",))
    out = publish_site(store, tmp_path / "site")
    board = list(csv.DictReader(io.StringIO((out / "board.csv").read_text())))
    assert {r["mixer"]: float(r["perplexity/ppl"]) for r in board} == {"protot": 30.0, "attention": 28.0}
    assert len(list((out / "plots").rglob("curve.png"))) == 2
