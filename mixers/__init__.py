"""Built-in mixer plugins, one folder per family (docs/ARCHITECTURE.md, "Mixers"). The registry imports every
public family here on first lookup (:func:`harness.registry.import_package_modules`), which registers its mixers
and the ``fla:<LayerClass>`` and ``hybrid:<pattern>`` name resolvers: a new family is a new folder."""
