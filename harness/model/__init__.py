"""The model a mixer sits in, its kernels, its memory checks, checkpoints, and the conformance gate."""
