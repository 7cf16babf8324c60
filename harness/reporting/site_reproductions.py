"""The site's Reproductions page: per target, the published claim, expected against measured, the verdict and a
plot of every check's interval against its threshold (docs/reproductions.md, docs/site.md).

Records come from the store (:func:`harness.reproduction.load_records`), which is untrusted input: every text
reaches the page through :func:`esc`, every link through :func:`href`, and a record that does not parse is named
on the page instead of breaking the site.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.reproduction import (
    CANNOT_FAIL, INCONCLUSIVE, KINDS, NOT_REPRODUCED, REPRODUCED, ReproductionRecord, verdict_note,
)
from harness.reporting.site_html import esc, href, kv_table, slug, table_html

PAGE = "reproductions.html"
PLOTS_DIR = "reproductions"  # the page's plots, one PNG per record
VERDICT_COLOURS = {REPRODUCED: "#2ca02c", NOT_REPRODUCED: "#d62728", INCONCLUSIVE: "#7f7f7f"}
VERDICT_CLASSES = {REPRODUCED: "good", NOT_REPRODUCED: "bad", INCONCLUSIVE: "unsure",
                   CANNOT_FAIL: "bad"}
#: the page's tables, one per kind: published claims first, this harness's own checks apart
KIND_TITLES = {"reproduction": "Reproductions of published claims",
               "check": "Checks of this harness (a property mixbench must have, not a published result)"}


def record_anchor(record: ReproductionRecord) -> str:
    return slug(f"{record.target}-{record.scale}")


def reproductions_body(records: list[ReproductionRecord], problems: list[str], run_ids: set[str],
                       plots: dict[str, str]) -> str:
    """The page's HTML (escaped): a summary table, then one section per record. ``run_ids`` are the runs the
    site has pages for; ``plots`` maps a record's anchor to its plot's path in the site."""
    parts = [
        "<h1>Reproductions</h1>",
        '<p class="note">Each target checks a published claim on runs of the ordinary suites (<code>mixbench '
        "reproduce</code>). A check is <em>reproduced</em> when its whole interval lies on the claimed side of the "
        "threshold, <em>not reproduced</em> when it lies wholly on the other side, and <em>inconclusive</em> when "
        "it straddles the threshold or has no interval. A target is reproduced when every check counted is; a "
        "precondition that fails (the budget cannot test the claim) makes it inconclusive. Checks marked "
        "&ldquo;reported only&rdquo; do not count. Each target declares <em>negatives</em>: its protocol with a "
        "subject for which the claim must fail; a target whose negative is reproduced too <em>cannot fail</em> and "
        "its verdict is void. Scale <code>tiny</code> is a smoke test: its verdicts mean nothing.</p>",
    ]
    if problems:
        parts.append('<div class="warning"><strong>Records that could not be read:</strong><ul>'
                     + "".join(f"<li>{esc(p)}</li>" for p in problems) + "</ul></div>")
    if not records:
        parts.append("<p>This results store holds no reproduction record yet; run <code>mixbench reproduce "
                     "--all</code> (or <code>--plan plans/reproduce.yaml</code>) with this store.</p>")
        return "\n".join(parts)
    for kind in KINDS:
        of_kind = [r for r in records if r.kind == kind]
        if of_kind:
            parts.append(f"<h2>{esc(KIND_TITLES[kind])}</h2>")
            parts.append(_summary(of_kind, kind))
    for r in records:
        parts.append(_section(r, run_ids, plots.get(record_anchor(r))))
    return "\n".join(parts)


def _summary(records: list[ReproductionRecord], kind: str) -> str:
    """One table of targets: the verdict, the target's own checks and its negatives' verdicts."""
    rows, raw = [], []
    for r in records:
        counted = [c for c in r.checks if c.counts]
        met = sum(c.verdict == REPRODUCED for c in counted)
        negatives = _negatives_text(r)
        rows.append([f'<a href="#{esc(record_anchor(r))}">{esc(r.target)}</a>', esc(r.scale),
                     _verdict_html(r.verdict) + _note_html(r.scale), _verdict_html(r.own_verdict),
                     esc(f"{met} of {len(counted)}"), esc(negatives), esc(_duration(r.wall_s)), esc(r.written_at),
                     esc(r.git or "unknown")])
        raw.append([r.target, r.scale, r.verdict, r.own_verdict, met, negatives, r.wall_s, r.written_at,
                    r.git or ""])
    headers = ["target", "scale", "verdict", "own checks", "checks reproduced", "negatives", "wall time", "run at",
               "commit"]
    return table_html(headers, rows, table_id=f"reproductions-{kind}", raw=raw,
                      text_keys={"target", "scale", "verdict", "own checks", "negatives", "run at", "commit"})


def _negatives_text(r: ReproductionRecord) -> str:
    if r.negatives is None:
        return "not run"
    return "; ".join(f"{n.label}: {n.verdict}" for n in r.negatives) or "none declared"


def _check_rows(checks) -> list[list[str]]:
    rows = []
    for c in checks:
        verdict = _verdict_html(c.verdict)
        if not c.counts:
            verdict += " (reported only)"
        if c.precondition:
            verdict += " [precondition]"
        measured = "missing" if c.measured is None else c.measured.render()
        rows.append([esc(c.what), esc(c.expected), esc(measured), verdict, esc(c.note)])
    return rows


def _section(r: ReproductionRecord, run_ids: set[str], plot: str | None) -> str:
    headers = ["check", "expected", "measured [interval] (kind)", "verdict", "note"]
    negatives = []
    for n in r.negatives or ():
        fate = "did not pass, as it must" if n.passed else "passed: the protocol cannot fail, the verdict is void"
        negatives += [f"<h3>Negative: {esc(n.label)}: {_verdict_html(n.verdict)} ({esc(fate)})</h3>",
                      f'<p class="note">{esc(n.why)}</p>',
                      table_html(headers, _check_rows(n.checks), sortable=False, text_keys=set(headers))]
    if r.negatives is None:
        negatives.append('<p class="note">Negatives not run with this record (<code>mixbench reproduce '
                         "--negatives</code>): nothing here shows the verdict could have failed.</p>")
    runs = ", ".join(
        f'<a href="{href("runs", f"{rid}.html")}">{esc(rid[:12])}</a>' if rid in run_ids else esc(rid[:12])
        for rid in r.run_ids) or "none recorded"
    missing = sum(rid not in run_ids for rid in r.run_ids)
    figure = (f'<figure class="plots"><img class="wide" src="{href(*plot.split("/"))}" alt="each check of '
              f'{esc(r.target)}: measured interval against the threshold"><figcaption>Each check: the measured value '
              "and its interval (bar) against the threshold (dashed line); the shaded side is the claim's. Green: "
              "reproduced, red: not reproduced, grey: inconclusive.</figcaption></figure>") if plot else ""
    return "\n".join([
        f'<h2 id="{esc(record_anchor(r))}">{esc(r.target)} <small>(scale {esc(r.scale)})</small>: '
        f"{_verdict_html(r.verdict)}{_note_html(r.scale)}</h2>",
        kv_table([("kind", r.kind), ("source", r.source), ("published claim", r.published),
                  ("checked claim", r.checked),
                  ("protocol", r.protocol), ("departures from the source", r.departures), ("device", r.device),
                  ("wall time", _duration(r.wall_s)), ("run at", r.written_at), ("commit", r.git or "unknown")]),
        table_html(headers, _check_rows(r.checks), sortable=False, text_keys=set(headers)),
        *negatives,
        figure,
        f'<p class="note">Runs behind it: {runs}'
        + (f" ({missing} not in this store: published from another store, or deleted)" if missing else "")
        + "</p>",
    ])


def _note_html(scale: str) -> str:
    """The smoke-scale note beside a verdict (:func:`harness.reproduction.verdict_note`), or nothing."""
    note = verdict_note(scale)
    return f" <small>({esc(note)})</small>" if note else ""


def _verdict_html(verdict: str) -> str:
    return f'<span class="verdict-{VERDICT_CLASSES.get(verdict, "unsure")}">{esc(verdict)}</span>'


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def draw_checks(record: ReproductionRecord, path: Path) -> bool:
    """One row per check: its measured value and interval against its threshold, on the check's own axis (an
    exponent and an accuracy share no scale). False when no check has a number to draw."""
    from harness.reporting.plotting import figure, save

    checks = [c for c in record.checks if c.measured is not None and math.isfinite(c.measured.value)]
    if not checks:
        return False
    fig, axes = figure(7.5, 0.9 * len(checks) + 0.7, rows=len(checks))
    for ax, c in zip(axes[:, 0], checks):
        m = c.measured
        low = m.low if m.low is not None else m.value
        high = m.high if m.high is not None else m.value
        lo, hi = min(low, c.threshold), max(high, c.threshold)
        pad = (hi - lo) * 0.15 or abs(c.threshold) * 0.1 or 0.1
        ax.set_xlim(lo - pad, hi + pad)
        if c.above:
            ax.axvspan(c.threshold, hi + pad, color="#2ca02c", alpha=0.08)
        else:
            ax.axvspan(lo - pad, c.threshold, color="#2ca02c", alpha=0.08)
        ax.axvline(c.threshold, color="#333", ls="--", lw=1)
        colour = VERDICT_COLOURS.get(c.verdict, "#7f7f7f")
        if m.low is not None and m.high is not None:
            ax.plot([m.low, m.high], [0, 0], color=colour, lw=3, solid_capstyle="butt")
        ax.plot([m.value], [0], "o", color=colour, ms=6, mfc=colour if m.low is not None else "white")
        ax.set_yticks([])
        ax.set_ylim(-1, 1)
        label = f"{c.what}  (expected {c.expected}{'; reported only' if not c.counts else ''})"
        ax.set_title(label, fontsize=8, loc="left", parse_math=False)
        ax.tick_params(axis="x", labelsize=7)
    note = verdict_note(record.scale)
    fig.suptitle(f"{record.target} (scale {record.scale}): {record.verdict}" + (f"\n({note})" if note else ""),
                 fontsize=10, parse_math=False)
    save(fig, path)
    return True
