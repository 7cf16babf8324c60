"""Sequence ops that more than one mixer family computes, written once (the GLA recurrence: :mod:`.gla`)."""
