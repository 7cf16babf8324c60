"""Which training recipe makes mixing matter at the quickstart's budget? (docs/controls.md, "The recipe")

For each recipe (overrides of preset quick's backbone, training and data configs) this trains every mixer given
and the ``none`` control on the embedded corpus, scores **validation** perplexity with the perplexity suite's
quickstart configuration (256 evenly spaced windows, bootstrap over documents), and prints one markdown row per
(recipe, mixer): validation loss, perplexity with its interval, and the paired difference in mean NLL per token from
``none`` on the same documents (negative: the mixer predicts better than the context-free control) with its 95%
paired-bootstrap interval. Checkpoints are kept under ``--work`` so a rerun only scores.

It selects a recipe, so it runs inside :func:`harness.corpus.protocol.selection`: a test split cannot be read
(docs/protocol.md, "Splits"; the first search, which read test perplexity, is recorded in docs/controls.md). The
recipes are trained without recipe files (one learning rate, the preset's) and without matched sizes, as the
search first ran; the learning rate and the backbone rule are chosen afterwards by ``mixbench tune``.

    python benchmarks/control_recipes.py --recipes default,gate,small-vocab --mixers attention,mamba,protot,deltanet
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import harness  # noqa: F401  (the threading policy before torch loads)
import numpy as np

from harness import stats
from harness.corpus.protocol import selection
from harness.model.checkpoint import load_model
from harness.config import content_hash
from harness.registry import SUITES
from harness.running.runner import corpus_for
from harness.model.specs import bind_vocab, make_run_spec
from harness.suite import SuiteContext
from harness.running.training import train

#: name -> (backbone, train, data) overrides of preset quick
def _gate(start: float | None) -> dict:
    """The backbone's mixer-branch gate starting at ``start`` (None: no gate)."""
    return {"residual_gates": "none"} if start is None else {"residual_gates": "mixer", "residual_gate_init": start}


RECIPES: dict[str, tuple[dict, dict, dict]] = {
    "default": (_gate(None), {}, {"vocab_size": 4096}),
    "gate": (_gate(0.0), {}, {"vocab_size": 4096}),
    "vocab512": (_gate(None), {"batch_size": 8}, {"vocab_size": 512}),
    "vocab512-gate": (_gate(0.0), {"batch_size": 8}, {"vocab_size": 512}),
    "vocab1024-gate": (_gate(0.0), {"batch_size": 8}, {"vocab_size": 1024}),
    "vocab512-b4": (_gate(None), {"batch_size": 4}, {"vocab_size": 512}),
    "vocab512-gate0-b4": (_gate(0.0), {"batch_size": 4}, {"vocab_size": 512}),
    "vocab512-gate0.3-b4": (_gate(0.3), {"batch_size": 4}, {"vocab_size": 512}),
    "vocab512-gate1-b4": (_gate(1.0), {"batch_size": 4}, {"vocab_size": 512}),
    "vocab512-gate-b4": (_gate(0.1), {"batch_size": 4}, {"vocab_size": 512}),
    "vocab512-gate0-655k": (_gate(0.0), {"batch_size": 8, "token_budget": 655_360}, {"vocab_size": 512}),
}
CONTROL = "none"


def score(mixer: str, recipe: str, seed: int, work: Path) -> dict:
    backbone, training, data = RECIPES[recipe]
    spec = make_run_spec(mixer, "quick", backbone_overrides=backbone, train_overrides={**training, "seed": seed},
                         data_overrides=data, match="none", recipes=False)
    corpus = corpus_for(spec.data, progress=False)
    spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
    out = work / content_hash(spec.to_json())
    t0 = time.perf_counter()
    result = train(spec, out, corpus, progress=False)
    seconds = result.seconds if result.skipped else time.perf_counter() - t0
    model, _ = load_model(out, "cpu")
    entry = SUITES.get("perplexity")
    cfg = entry.make_config({**entry.cls.quickstart, "splits": "validation"})
    with tempfile.TemporaryDirectory() as scratch, selection("benchmarks/control_recipes.py (choosing a recipe)"):
        metrics = entry.cls(cfg).run(model, SuiteContext(corpus, Path(scratch), seed, "cpu", False)).metrics
    ppl = next(m for m in metrics if m.name == "val_ppl")
    return {"val": result.val_loss, "ppl": ppl, "seconds": seconds}


def paired_nll(a: dict, b: dict) -> stats.PairedComparison:
    """Mean NLL per token of ``a`` minus ``b`` on the documents both scored (token-weighted, paired bootstrap)."""
    ia, ib = a["ppl"].items, b["ppl"].items
    da = dict(zip(ia.ids, zip(ia.values, ia.weights)))
    db = dict(zip(ib.ids, zip(ib.values, ib.weights)))
    shared = sorted(set(da) & set(db))
    va, wa = (np.array([da[i][k] for i in shared]) for k in (0, 1))
    vb, wb = (np.array([db[i][k] for i in shared]) for k in (0, 1))
    return stats.paired_difference(va, vb, wa, wb, n_resamples=2000, seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--mixers", default="attention,mamba,protot,deltanet,mean")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "mixbench-control-recipes"))
    parser.add_argument("--json", default="", help="also write the rows to this JSON file")
    args = parser.parse_args()
    work = Path(args.work)
    rows = []
    print("| recipe | seed | mixer | val loss | validation ppl [95% CI] | Δ NLL/token vs none [95% paired CI] | "
          "train s |")
    print("|---|---|---|---|---|---|---|")
    for recipe in args.recipes.split(","):
        if recipe not in RECIPES:
            sys.exit(f"unknown recipe {recipe}; known: {', '.join(RECIPES)}")
        for seed in (int(s) for s in args.seeds.split(",")):
            control = score(CONTROL, recipe, seed, work)
            for mixer in [CONTROL, *args.mixers.split(",")]:
                r = control if mixer == CONTROL else score(mixer, recipe, seed, work)
                iv = r["ppl"].interval
                diff = "—"
                row = {"recipe": recipe, "seed": seed, "mixer": mixer, "val": r["val"], "ppl": r["ppl"].value,
                       "ppl_ci": [iv.low, iv.high], "seconds": r["seconds"]}
                if mixer != CONTROL:
                    d = paired_nll(r, control)
                    diff = f"{d.difference:+.3f} [{d.interval.low:+.3f}, {d.interval.high:+.3f}]"
                    row["dnll"] = [d.difference, d.interval.low, d.interval.high]
                rows.append(row)
                print(f"| {recipe} | {seed} | {mixer} | {r['val']:.3f} | {r['ppl'].value:.1f} [{iv.low:.1f}, "
                      f"{iv.high:.1f}] | {diff} | {r['seconds']:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
