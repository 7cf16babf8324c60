"""Built-in reproduction targets: published results the harness must get right (docs/reproductions.md).

The registry imports every public module here on first lookup (:func:`harness.registry.import_package_modules`),
which registers its targets: a new target is a new module. A target names suites and mixers by their registered
names only; it imports no suite or mixer (tests/test_layering.py).
"""
