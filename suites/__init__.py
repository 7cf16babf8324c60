"""Built-in suites: the registry imports every public module or package here on first lookup
(:func:`harness.registry.import_package_modules`), which registers its suite, so adding a suite means adding a
module here and nothing else."""
