"""The embedded default run (`mixbench quickstart` / `make quickstart`): the paper's four mixers, every suite.

Budget: `make quickstart` must finish within 20 minutes on a fresh 2-core CPU machine, setup included. Training
the four mixers at preset ``quick`` takes most of it, so each suite runs a reduced configuration here; the full
protocols stay the suites' defaults (`mixbench eval --suite S` / `mixbench run`). Each reduction is chosen so the
number it produces is still meaningful, and says so below.
"""

from __future__ import annotations

from typing import Any

QUICKSTART_MIXERS: tuple[str, ...] = ("protot", "attention", "mamba", "deltanet")

QUICKSTART_SUITES: tuple[str, ...] = ("perplexity", "throughput", "robustness", "glue", "judge", "interpretability")


def quickstart_suite_configs() -> dict[str, dict[str, Any]]:
    """Per-suite overrides of the quickstart. Imported lazily: the interpretability defaults live with that suite."""
    from suites.interpretability import QUICKSTART as INTERPRETABILITY

    return {
        # Three lengths spanning 16x: the exponent is fitted over the upper half (1024-4096), the attention
        # reference is measured in the same run; 8192 (the full CPU grid) alone costs minutes per mixer.
        "throughput": {"lengths": (256, 1024, 4096), "repeats": 3, "max_point_seconds": 10.0},
        # One stand-in (sentiment, where a quick-preset model clearly beats the majority class), one learning
        # rate and one seed: the CI is a bootstrap over the 1000 evaluation examples, ~20 s per mixer.
        "glue": {
            "tasks": ("standin-sentiment",), "max_train_examples": 2000, "epochs": 1, "lrs": (3e-3,), "seeds": (0,),
            "pooling": "mean", "max_eval_examples": 1000,
        },
        # 200 pairs per slice instead of 500: the per-slice JSD CIs stay narrow (they are over pairs) and the
        # suite takes ~10-15 s per mixer instead of 20-40 s.
        "robustness": {"pairs_per_slice": 200},
        # 4 prompts: 6 mixer pairs x 2 orders x 4 = 48 verdicts plus 12 canaries from the local SmolLM2 server
        # (~1.5 s each on 2 cores; a weak judge, see README). Enough to show the pipeline, not to rank mixers.
        "judge": {"n_prompts": 4},
        "interpretability": dict(INTERPRETABILITY),
    }
