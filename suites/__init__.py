"""Built-in suites. Importing this package registers them (the registry does so on first lookup)."""

from suites import perplexity  # noqa: F401
