"""Bottom layer: numerics, x64 scoping, validation, caches, root finders."""
