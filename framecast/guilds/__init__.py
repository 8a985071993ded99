"""Servers' own settings, the operator's ceilings, and the policy the intake enforces for a guild."""
