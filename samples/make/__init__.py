"""Builders for the bundled ``samples/``: small inputs in each source's exact published layout.

Run ``python -m samples.make`` to rebuild every sample folder. Each builder is seeded, so the
output is the same on every machine.
"""
