"""Dominating pairs, their discretisation, the mechanism registry."""
