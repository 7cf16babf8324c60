"""The scaling suite's section of the published site: per ladder its plot and its three tables."""

from __future__ import annotations

from suites.scaling.report import crossover_rows, fit_rows, newest_ladders, ordering_rows, seed_spread_text


def section(runs, kit) -> str:
    parts = []
    for run in newest_ladders(runs):
        info = run.manifest.suite_info
        plot = kit.plot(run, run.plots[0], "loss against training FLOPs per mixer, fitted curves and bands") \
            if run.plots else ""
        parts.append(f"<h3>Ladder {kit.escape(info['ladder'])}</h3>")
        parts.append(f"<p class=\"note\">{kit.escape(len(info['rungs']))} rungs; intervals: "
                     f"{kit.escape(info['interval_kind'])}, {kit.escape(info['bootstrap'])} replicates at "
                     f"{kit.escape(format(info['confidence'], '.0%'))}; {kit.escape(seed_spread_text(info))}. Fits: "
                     "L_m(C) = E + A_m C^-alpha_m with one E for the mixers (each control its own) on a robust "
                     "log-scale loss; crossovers only inside the data's compute range (past it: extrapolated); "
                     "docs/scaling.md says how to read them.</p>")
        parts.append(plot)
        for (header, rows), caption in ((fit_rows(info), "Fits per mixer"),
                                        (crossover_rows(info), "Crossovers of every pair"),
                                        (ordering_rows(info), "Ordering at every rung")):
            if rows:
                parts.append(kit.table(header, rows, caption))
    if not parts:
        return ("<p class=\"note\">No ladder with three distinct computes per mixer yet: run `mixbench scaling`."
                "</p>")
    return "\n".join(parts)
