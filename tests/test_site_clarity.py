"""The published site read by someone who has not seen it before (issue 50, items 4 and 6; docs/site.md).

A planted store with known numbers: three mixers and the context-free control ``none`` at preset tiny, two voting
suites whose orders differ (perplexity: mamba, deltanet, attention; mqar: deltanet, attention, mamba), a suite the
control wins (glue) and a speed suite (throughput). The tests check that the index opens with one sentence naming
the leader that follows the numbers, that the rank cell carries its interval and the voting columns come first,
that a suite page shows the suite's own order, that each veto and ‡ states its direction in words, that seeds
read as ids, and, in headless Chromium at 1280 px, that no figure the site drew shows text below 9 px and that
every voting column is on screen without scrolling.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.reporting.differences import CellDifference
from harness.reporting.leaderboard import board_of
from harness.reporting.plotting import FONT_KEY, MIN_FONT_PX, min_font_points
from harness.reporting.preamble import difference_words, lead_sentence
from harness.reporting.publish import publish_site
from harness.reporting.site_plots import DPI, draw_metric
from harness.store.results import ResultsStore
from tests.planted import manifest, put, score, subject

MIXERS = ("mamba", "deltanet", "attention")
#: per-document NLL shifts (lower is better): perplexity's order mamba, deltanet, attention
PPL = {"mamba": -0.30, "deltanet": -0.15, "attention": 0.0, "none": 0.6}
#: accuracy shifts (higher is better): mqar's order deltanet, attention, mamba
MQAR = {"deltanet": 0.30, "attention": 0.15, "mamba": 0.05, "none": -0.1}
SPEED = {"mamba": 0.55, "deltanet": 0.45, "attention": 0.04, "none": 1.0}


def _plant(root: Path, ppl: dict[str, float] = PPL, mqar: dict[str, float] = MQAR, glue: bool = True,
           speed: bool = True, only_glue: bool = False) -> ResultsStore:
    rng = np.random.default_rng(0)
    docs = rng.normal(3.0, 0.4, 240)
    answers = rng.uniform(0.2, 0.6, 240)
    store = ResultsStore(root)
    for name in (*MIXERS, "none"):
        control = name == "none"
        for seed in ((0, 1) if name == "deltanet" else (0,)):
            s = subject(name, seed=seed, control=control, context_free=control, parameters=1000 + 100 * len(name),
                        loss_curve=[{"step": k, "loss": 6.0 - k / 40, **({"val_loss": 6.1 - k / 40} if k % 40 == 0
                                                                              else {})} for k in range(10, 130, 10)],
                        learning_curve=[{"step": k, "flops": 1e9 * k, "loss": 6.0 - k / 50 + PPL[name]}
                                        for k in (8, 16, 32, 64, 128)])

            def run(suite, metrics, headline):
                put(store, manifest(suite, s, headline=headline), metrics)

            if not only_glue:
                nll = docs + ppl[name] + rng.normal(0, 0.01, len(docs))
                run("perplexity", [score("ppl", float(np.exp(nll.mean())), False, 0.3, unit="perplexity",
                                         items={f"d{i}": float(v) for i, v in enumerate(nll)})], ("ppl",))
                acc = answers + mqar[name] + rng.normal(0, 0.01, len(answers))
                run("mqar", [score("acc", float(acc.mean()), True, 0.02,
                                   items={f"q{i}": float(v) for i, v in enumerate(acc)})], ("acc",))
            if glue:  # the control wins: the column does not vote, and each mixer cell is ‡
                shift = 0.08 if control else {"mamba": 0.0, "deltanet": 0.075, "attention": -0.02}[name]
                acc = answers + shift + rng.normal(0, 0.01, len(answers))
                run("glue", [score("sst2/acc", float(acc.mean()), True, 0.02,
                                   items={f"g{i}": float(v) for i, v in enumerate(acc)})], ("*/acc",))
            if speed and not only_glue:
                v = SPEED[name]
                run("throughput", [score("prefill_vs_floor", v, True, v * 0.1, role="speed", unit="x floor")],
                    ("prefill_vs_floor",))
    return store


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, ResultsStore]:
    root = tmp_path_factory.mktemp("clarity")
    store = _plant(root / "store")
    return publish_site(store, root / "site"), store


def _lead(site: Path) -> str:
    found = re.search(r'<main>\s*<h1>[^<]*</h1>\s*<p class="lead[^"]*" id="lead">(.*?)</p>',
                      (site / "index.html").read_text(), re.DOTALL)
    assert found, "the index does not open with its lead sentence"
    return html.unescape(found.group(1))


def _board_table(page: Path, table_id: str) -> tuple[list[str], list[list[str]]]:
    """The header keys and each row's cell texts (tags stripped) of the table ``table_id`` of ``page``."""
    text = page.read_text()
    table = re.search(rf'<table id="{table_id}".*?</table>', text, re.DOTALL).group(0)
    keys = [html.unescape(k) for k in re.findall(r'<th data-key="([^"]*)"', table)]
    body = table.split("<tbody>", 1)[1]
    rows = [[html.unescape(re.sub(r"<[^>]+>", " ", c)).split("  ")[0].strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.DOTALL)] for tr in re.findall(r"<tr>(.*?)</tr>", body)]
    return keys, rows


# ---------------------------------------------------------------------------------------------- the first sentence


def test_the_index_opens_with_one_sentence_naming_the_leader(site, tmp_path):
    out, store = site
    lead = _lead(out)
    board = board_of(store)
    leader = next(r.label for r in board.table.rows if board.rank.get(r.key) == 1)
    assert leader == "deltanet"  # a in mqar, b in perplexity: 3 Borda points against mamba's 2
    assert lead.startswith("deltanet leads at preset tiny on mqar (acc) and perplexity (ppl), in tie group ")
    assert "b on ppl" in lead and "a on acc" in lead and re.search(r"\(rank interval 1–\d", lead)
    assert "glue and throughput do not vote (glue: no mixer beats the context-free control none; throughput: " \
           "speed, not quality)" in lead
    assert lead.count(". ") == 0 and lead.endswith(".")  # one sentence
    assert lead == lead_sentence(board)  # one function, usable by every renderer

    # other numbers, another sentence: mamba far ahead on both voting suites
    flipped = _plant(tmp_path / "store", {**PPL, "mamba": -0.6}, {**MQAR, "mamba": 0.6})
    lead = _lead(publish_site(flipped, tmp_path / "site"))
    assert lead.startswith("mamba leads at preset tiny on mqar (acc) and perplexity (ppl), alone in tie group a "
                           "of each (rank interval 1–1)"), lead

    # nothing votes: the sentence says so and why
    silent = _plant(tmp_path / "silent", only_glue=True)
    lead = _lead(publish_site(silent, tmp_path / "silent-site"))
    assert lead.startswith("Nothing on this board tells the mixers apart: no column votes (glue: no mixer beats the "
                           "context-free control none)"), lead


# ---------------------------------------------------------------------------------------------- the board


def test_rank_cells_show_their_interval_and_voting_columns_come_first(site):
    out, store = site
    board = board_of(store)
    keys, rows = _board_table(out / "index.html", "board")
    voting = [c.name for c in board.voting]
    assert sorted(voting) == ["mqar/acc", "perplexity/ppl"]
    assert keys[:3] == ["rank", "model", "params"] and sorted(keys[3:5]) == sorted(voting)
    assert keys[5:8] == ["state", "check", "seeds"]
    by_model = {r[1]: r for r in rows}
    for mixer in MIXERS:
        row = next(r for r in board.table.rows if r.label == mixer)
        lo, hi = board.rank_interval[row.key]
        assert by_model[mixer][0] == f"{'=' if board.tied[row.key] else ''}{board.rank[row.key]} ({lo}–{hi})"
    assert by_model["none"][0] == "control"
    assert by_model["deltanet"][keys.index("seeds")] == "seeds 0, 1"  # ids, not "2 (0,1)"
    assert by_model["mamba"][keys.index("seeds")] == "seed 0"  # not "1 (0)", read as "zero seeds"
    model_page = next((out / "rows").glob("deltanet-*.html")).read_text()
    assert "<th class=\"text\" scope=\"row\">training seeds</th><td class=\"text kv\">seeds 0, 1</td>" in model_page


def test_suite_pages_show_the_suite_s_own_order(site):
    out, _ = site
    _, index = _board_table(out / "index.html", "board")
    assert [r[1] for r in index][:3] == ["deltanet", "mamba", "attention"]  # the rank over both suites
    for suite, order in (("perplexity", ["mamba", "deltanet", "attention"]),
                         ("mqar", ["deltanet", "attention", "mamba"])):
        page = next((out / "suites").glob(f"{suite}-*.html"))
        keys, rows = _board_table(page, "suite-table")
        assert keys[0] == "order" and [r[1] for r in rows] == [*order, "none"], (suite, rows)
        assert [r[0] for r in rows] == ["1 (a)", "2 (b)", "3 (c)", "control"], (suite, rows)
        assert f"Rows in {suite}'s own order: by {suite}/" in page.read_text()


# ---------------------------------------------------------------------------------------------- directions


def test_differences_are_stated_with_their_direction():
    d = CellDifference(-0.04, None, 0.002, "items")
    assert difference_words(d, True, 0.05) == "control better, p = 0.002"
    assert difference_words(CellDifference(0.01, None, 0.08, "items"), True, 0.05) == \
        "mixer better but not significant (p = 0.08)"
    assert difference_words(CellDifference(0.01, None, 0.03, "items"), True, 0.05, significant=False,
                            family="over 3 mixers") == \
        "mixer better but not significant after Holm's correction over 3 mixers (p = 0.03)"
    assert difference_words(CellDifference(0.5, None, 0.0001, "items"), False, 0.05, other="null") == \
        "null better, p < 0.001"


def test_the_site_says_who_came_out_ahead_where_a_null_won(site):
    out, _ = site
    index = html.unescape(re.sub(r"<script.*?</script>", "", (out / "index.html").read_text(), flags=re.DOTALL))
    assert "or in the control's favour" not in index  # the page's text; board.json keeps the board's own words
    veto = re.search(r"glue/sst2/acc</code> does not vote</dt><dd>(.*?)</dd>", index).group(1)
    assert veto.startswith("no mixer beats the context-free control none; the best mixer, deltanet, against it: "
                           "control better but not significant (p = "), veto
    marks = re.search(r"‡ in <code>glue/sst2/acc</code></dt><dd>(.*?)</dd>", index).group(1)
    assert "mamba: vs none: control better, p < 0.001" in marks, marks
    assert re.search(r'<abbr class="mark" title="vs none: control better, p &lt; 0.001">‡</abbr>',
                     (out / "index.html").read_text())


# ---------------------------------------------------------------------------------------------- plots


def test_a_metric_plot_has_readable_text_ticks_apart_and_its_legend_outside(site):
    _, store = site
    board = board_of(store)
    column = board.table.column("throughput/prefill_vs_floor")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = draw_metric(board, column, list(board.table.rows))
    FigureCanvasAgg(fig)  # a canvas with a renderer, to measure where the texts land
    fig.tight_layout()
    fig.draw_without_rendering()
    assert min_font_points(fig) * DPI / 72 >= MIN_FONT_PX
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"  # 0.04 to 1.1: more than a factor of ten
    renderer = fig.canvas.get_renderer()
    low, high = ax.get_xlim()
    boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels()
                    if t.get_visible() and t.get_text() and low <= t.get_position()[0] <= high), key=lambda b: b.x0)
    assert len(boxes) >= 2 and all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))  # no two labels overlap
    legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.y0 >= frame.y1 - 1 or legend.x0 >= frame.x1 - 1  # outside the axes, over no point
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert {"mamba", "deltanet", "attention", "none (control)"} <= set(labels)  # every mixer and the control


#: loads every image now (lazy ones too), then writes, for every image, its natural and shown width, and for the
#: board's headers their left and right edges, into the page as JSON
PROBE = """"use strict";
(function () {
  var imgs = Array.prototype.slice.call(document.images);
  imgs.forEach(function (i) { i.loading = "eager"; });
  function report() {
    var out = {width: window.innerWidth, images: [], heads: []};
    imgs.forEach(function (i) {
      out.images.push({src: i.getAttribute("src"), natural: i.naturalWidth, shown: i.getBoundingClientRect().width});
    });
    Array.prototype.forEach.call(document.querySelectorAll("table.board thead th"), function (th) {
      var r = th.getBoundingClientRect();
      out.heads.push({key: th.getAttribute("data-key"), left: r.left, right: r.right});
    });
    var pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  function wait(n) {
    if (n <= 0 || imgs.every(function (i) { return i.complete; })) { report(); }
    else { setTimeout(function () { wait(n - 1); }, 50); }
  }
  window.addEventListener("load", function () { wait(80); });
})();
"""


def _probe(site: Path, page: Path, width: int, profile: Path) -> dict:
    from tests.test_publish import _browse

    depth = len(page.relative_to(site).parts) - 1
    (site / "assets" / "clarity-probe.js").write_text(PROBE)
    text = page.read_text()
    page.write_text(text.replace("</body>", f'<script src="{"../" * depth}assets/clarity-probe.js"></script></body>'))
    dump = _browse(page.as_uri(), profile, "--dump-dom", f"--window-size={width},900", "--hide-scrollbars").stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dump, re.DOTALL)
    assert found, f"the probe did not run on {page.name}"
    return json.loads(html.unescape(found.group(1)))


def _font_px(png: Path) -> float | None:
    from PIL import Image

    with Image.open(png) as img:
        value = img.info.get(FONT_KEY)
    return None if value is None else float(value)


def test_no_figure_text_below_9_px_and_the_voting_columns_on_screen_at_1280(site, tmp_path):
    """Every PNG the site drew records its smallest font (pixels at its own resolution); shown at the width the
    page gives it at a 1280 px window, that font must stay at 9 px or more. Every voting column's header lies
    inside the window before any scrolling."""
    out, store = site
    copy = tmp_path / "site"
    shutil.copytree(out, copy)
    drawn = [p for p in copy.rglob("*.png") if "plots" not in p.relative_to(copy).parts]
    names = {p.relative_to(copy).parts[0] for p in drawn}
    assert {"pareto.png", "curves", "rows", "suites"} <= names, names  # every kind of figure the site draws
    for png in drawn:
        px = _font_px(png)
        assert px is not None and px >= MIN_FONT_PX, (png.name, px)
    pages = [copy / "index.html", next((copy / "suites").glob("throughput-*.html")),
             next((copy / "suites").glob("perplexity-*.html")), next((copy / "rows").glob("mamba-*.html"))]
    checked = set()
    voting = [c.name for c in board_of(store).voting]
    for page in pages:
        found = _probe(copy, page, 1280, tmp_path / "profile")
        assert found["width"] == 1280
        for img in found["images"]:
            path = (page.parent / img["src"]).resolve()
            if img["shown"] == 0 or path.suffix != ".png" or "plots" in path.relative_to(copy.resolve()).parts:
                continue  # hidden in a closed <details>, or a plot stored with a run (shown at its own size)
            assert img["natural"] > 0, img
            shown_px = _font_px(path) * img["shown"] / img["natural"]
            assert shown_px >= MIN_FONT_PX, (page.name, img, shown_px)
            checked.add(path.relative_to(copy.resolve()).parts[0])
        if page.name == "index.html":
            heads = {h["key"]: h for h in found["heads"]}
            for name in voting:
                assert 0 <= heads[name]["left"] and heads[name]["right"] <= 1280, (name, heads[name])
    assert {"pareto.png", "curves", "rows", "suites"} <= checked, checked
