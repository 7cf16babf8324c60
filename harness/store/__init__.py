"""The results store and what names its runs: identities, manifests, provenance, durable writes."""
