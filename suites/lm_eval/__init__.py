"""The ``lm-eval`` suite and the ``mixbench`` lm-eval model (``model``, imported only when a run needs it:
lm-eval is slow to import)."""

from suites.lm_eval import suite as _suite  # noqa: F401  (registers "lm-eval")
