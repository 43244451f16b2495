"""Quiet corpus runs: Beam's own log lines kept off the terminal unless ``--verbose``.

A DirectRunner run logs from three places: the launching process, each SDK worker subprocess of
the multi-processing mode (which inherit its stderr and log with Python's default format because
an import-time ``logging.warning`` — "apitools not found" — configures their root logger before
Beam sets its level) and the job service relaying the workers' records ("Worker: severity: ...").
Log levels reach only part of that: the workers log their start-up lines before they read their
pipeline options. So ``quiet_stderr`` also filters file descriptor 2, which the workers inherit:
lines in Python's default log format from ``root``, ``__main__`` (the worker's main module) or an
``apache_beam`` logger at DEBUG, INFO or WARNING are dropped; everything else (progress lines,
errors, tracebacks, other libraries' lines) passes unchanged.

Importing this module (``pipelines/__init__.py`` does) drops, in any mode, the one record Beam logs
at import time about an optional GCP client ("apitools not found ..."): it says nothing about a run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
from typing import Iterator

# What quiet runs pass to Beam unless the user set it: workers log WARNING and above.
QUIET_BEAM_ARGS = ("--default_sdk_harness_log_level=WARNING",)
BEAM_LOG_LINE = re.compile(rb"^(DEBUG|INFO|WARNING):(root|__main__|apache_beam(\.[\w.]+)?):")


class _DropApitoolsNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and str(record.msg).startswith("apitools not found"))


if not any(isinstance(f, _DropApitoolsNotice) for f in logging.getLogger().filters):
    logging.getLogger().addFilter(_DropApitoolsNotice())


def quiet_beam_args(beam_args: list[str]) -> list[str]:
    """``beam_args`` plus the quiet defaults the user did not set."""
    given = {arg.split("=", 1)[0] for arg in beam_args}
    return list(beam_args) + [arg for arg in QUIET_BEAM_ARGS if arg.split("=", 1)[0] not in given]


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Within the block, Beam's log lines written to fd 2 (by this process or any child) are dropped."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if not BEAM_LOG_LINE.match(line):
                    os.write(saved, line)

    thread = threading.Thread(target=pump, name="quiet-stderr", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes our copy of the pipe; the pump ends once no child holds it either
        thread.join(timeout=10)
        if not thread.is_alive():  # else a stray child still writes: leave the pump its descriptor
            os.close(saved)
