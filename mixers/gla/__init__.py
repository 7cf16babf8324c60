"""GLA and RetNet on fla's layers: the layers, their CPU routing, and our chunked CPU kernel."""

from mixers.gla import layer  # noqa: F401 - registers the mixer(s)
