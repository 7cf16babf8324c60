"""lm-eval integration: a registered ``mixbench`` lm-eval model (``model``) and ``mixbench lm-eval`` (``runner``).

Nothing is imported here: lm-eval is slow to import and only these commands need it.
"""
