"""The glue suite: fine-tuned GLUE tasks and offline GLUE-shaped stand-ins (see suites/glue/suite.py)."""

from suites.glue import suite as _suite  # noqa: F401  (registers "glue")
