"""Reserved for VLM relabelling and audit of corpus labels; empty for now.

Nothing imports it yet; see docs/architecture.md for the packages that exist.
"""
