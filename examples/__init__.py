"""Worked examples of out-of-tree plugins (not installed with the package; import them from the repository root,
e.g. ``mixbench check example-fla-gla --preset tiny --plugin examples.fla_gla_mixer``)."""
