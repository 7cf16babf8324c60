"""Pieces several mixers share: kernel routing for third-party layers, the routed-mixer shell, GPU parity."""
