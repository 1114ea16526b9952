"""Calibration (sigma, steps, sampling rate), sweeps, tuning."""
