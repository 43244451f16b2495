"""Contracts shared by every stage: the page record, dead letters and the run manifest."""
