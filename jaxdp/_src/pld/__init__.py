"""Privacy-loss distributions: one-step grids, FFT composition, read-out, general engine."""
