"""Beam DAGs and the plain stage logic they wrap."""
