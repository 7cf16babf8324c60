"""transformers interop: checkpoints exported as transformers folders, transformers causal LMs scored by the suites."""
