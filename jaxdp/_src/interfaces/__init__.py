"""Top-level epsilon/delta, optax transform, command line."""
