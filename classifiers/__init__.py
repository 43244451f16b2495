"""Placeholder package: built by a later issue (see ../shared/ARCHITECTURE.md)."""
