"""The ladder tables as text (``mixbench scaling``) and as rows (the site): fits, crossovers, orderings per rung.

One function builds each table's rows from a ladder's analysis JSON; the terminal and the site only format them.
"""

from __future__ import annotations

from typing import Any

from harness.kit import si


def _ci(value: float, pair: list[float] | None, fmt: str = "{:.3g}") -> str:
    if pair is None or None in pair:
        return fmt.format(value)
    return f"{fmt.format(value)} [{fmt.format(pair[0])}, {fmt.format(pair[1])}]"


def fit_rows(info: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    targets = [t for s in info["series"].values() if s.get("fit") for t in s["fit"]["targets"]]
    targets = list(dict.fromkeys(targets))
    level = f"{info['confidence']:.0%}"
    header = ["mixer", "points (seeds per rung)", "FLOPs range", f"alpha ({level})", "E (nats/token)", "A at C_ref",
              f"loss at {info['extrapolate']:g}x max", *[f"loss at {t}" for t in targets]]
    rows = []
    for name, s in sorted(info["series"].items(), key=lambda kv: (kv[1]["control"], kv[0])):
        pts = s["points"]
        span = f"{si(min(p['flops'] for p in pts), '', 2)}-{si(max(p['flops'] for p in pts), '', 2)}"
        label = name + (" (control)" if s["control"] else "")
        fit = s.get("fit")
        if not fit:
            rows.append([label, str(len(pts)), span, f"not fitted: {s.get('why_not')}", "", "", "",
                         *["" for _ in targets]])
            continue
        note = f" (at bound: {', '.join(fit['at_bounds'])})" if fit["at_bounds"] else ""
        shared = " (shared)" if fit.get("shared_E") else " (own)"
        seeds = fit.get("seeds_per_rung") or []
        count = f"{len(pts)} ({'/'.join(str(k) for k in seeds)})" if seeds else str(len(pts))
        last = fit["band"][-1]
        rows.append([
            label, count, span, _ci(fit["alpha"], fit["alpha_interval"]) + note,
            _ci(fit["E"], fit["E_interval"]) + shared, _ci(fit["A_ref"], fit["A_ref_interval"]),
            _ci(last[1], last[2:], "{:.3f}"),
            *[_ci(fit["targets"][t]["loss"], fit["targets"][t]["interval"], "{:.3f}") if t in fit["targets"] else ""
              for t in targets],
        ])
    return header, rows


def crossover_rows(info: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["pair", "verdict", "crossing in the data's range (FLOPs)", "replicates crossing in range",
              "better below", "better above"]
    rows = []
    for c in info["crossovers"]:
        where = "" if c["compute"] is None else si(c["compute"], "", 3)
        if c["interval"] and c["verdict"] == "cross":
            where += f" [{si(c['interval'][0], '', 2)}, {si(c['interval'][1], '', 2)}]"
        rows.append([f"{c['a']} / {c['b']}", c["sentence"], where, f"{c['share']:.0%}", c["better_below"] or "",
                     c["better_above"] or ""])
    return header, rows


def ordering_rows(info: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["rung", "ordering, best first (tie groups in brackets)", "losses (nats/token)", "seeds",
              "tokens per parameter"]
    rows = []
    for o in info["orderings"]:
        groups = " > ".join("[" + ", ".join(g) + "]" if len(g) > 1 else g[0] for g in o["tie_groups"])
        losses = ", ".join(f"{n} {o['losses'][n]:.3f}" for n in o["order"])
        seeds = sorted(set((o.get("seeds") or {}).values()))
        tpp = {n: v for n, v in (o.get("tokens_per_parameter") or {}).items() if v}
        ratio = ", ".join(f"{n} {tpp[n]:.2g}" for n in o["order"] if n in tpp)
        rows.append([o["label"], groups, losses, "/".join(str(k) for k in seeds), ratio])
    return header, rows


def seed_spread_text(info: dict[str, Any]) -> str:
    """Which seed spread the ladder's bootstrap and tie tests used, in words."""
    noise = info.get("seed_noise")
    if not noise:
        return "no seed spread known: one-seed rungs vary by their documents alone"
    return f"seed spread {noise['sd']:.4f} nats/token from {noise['source']}"


def newest_ladders(runs) -> list[dict[str, Any]]:
    """The analysis of each ladder, from its newest aggregate run among ``runs``."""
    newest: dict[str, Any] = {}
    for run in runs:
        m = run.manifest
        if m.suite != "scaling" or m.kind != "aggregate" or "ladder" not in m.suite_info:
            continue
        key = m.suite_info["ladder"]
        if key not in newest or m.written_at > newest[key].manifest.written_at:
            newest[key] = run
    return [newest[k] for k in sorted(newest)]


def render_ladders(store) -> str:
    """Every ladder's three tables as text, or a sentence saying why there is none."""
    from tabulate import tabulate

    runs = newest_ladders(store.iter_runs(samples=False))
    if not runs:
        return ("no scaling ladder in this store has a mixer with 3 distinct computes: run `mixbench scaling` (the "
                "default ladder) or a plan with a ladder: key and the scaling suite.")
    parts = []
    for run in runs:
        info = run.manifest.suite_info
        spread = seed_spread_text(info)
        parts.append(f"ladder {info['ladder']} ({info['interval_kind']}; {info['bootstrap']} replicates; {spread})")
        for table in (fit_rows(info), crossover_rows(info), ordering_rows(info)):
            header, rows = table
            if rows:
                parts.append(tabulate(rows, headers=header, tablefmt="github"))
    return "\n\n".join(parts)
