"""Reserved for failure-mode classifiers and retrieval of pages per failure mode; empty for now.

Nothing imports it yet; see docs/architecture.md for the packages that exist.
"""
