"""Samplers with static shapes, their events and their accounting."""
