"""A pipeline CLI's start-up: its imports, and two trims to what they cost.

``python -m pipelines.corpus`` pays its imports on every run (~0.9 s here, Beam's ~0.8 of them), and
every SDK worker forked from it inherits what they made. The CLI calls ``begin_imports()`` before its
imports and ``end_imports()`` after them:

- The garbage collector is off meanwhile, and what the imports made is frozen after
  (``gc.freeze``): ~180,000 long-lived tracked objects, Beam's above all, that every full collection
  would walk again, freeing nothing (~0.15 s of the imports, and again later in the launcher and its
  workers).
- pandas is kept out of Beam's import. Beam imports it, when installed, only for its DataFrame API:
  type hints (``apache_beam.typehints``) and the pandas-backed ``ReadFromCsv`` / ``ReadFromJson`` /
  ``WriteToCsv`` / ``WriteToJson`` of ``apache_beam.io.textio``, each behind a guarded
  ``import pandas``, so in such a process those are not defined. No pagemill DAG uses them: ~0.2 s
  saved. ``end_imports`` lifts the block, so a later ``import pandas`` (``datasets``, a release)
  works as usual.

For a process's own start-up only: a module that is imported, not run, must not call these.
"""

from __future__ import annotations

import gc
import sys

# Modules Beam imports only for features no pagemill DAG uses.
SKIPPED = ("pandas",)
_blocked: list[str] = []


def begin_imports() -> None:
    """Before the CLI's imports: GC off, and ``SKIPPED`` modules not yet loaded made unimportable."""
    gc.disable()
    for name in SKIPPED:
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable"
            _blocked.append(name)


def end_imports() -> None:
    """After them: the block lifted, what the imports made frozen, GC on."""
    while _blocked:
        name = _blocked.pop()
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]
    gc.freeze()
    gc.enable()
