"""Accountants (RDP, CDP, PLD) and trade-off curves."""
