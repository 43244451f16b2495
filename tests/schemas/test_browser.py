"""schemas.browser: what a Chromium launch needs of its environment (real Chromium, in child processes so
that each gets its own TMPDIR)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from schemas.browser import MAX_TEMP_PATH
from tests.helpers import REPO

LAUNCH = ("from schemas.browser import launch_chromium\n"
          "h = launch_chromium(); p = h.browser.new_page(); p.set_content('<p>x</p>'); print('rendered'); h.close()")


def test_chromium_starts_with_the_longest_temporary_folder_and_names_one_too_long():
    base = Path(tempfile.mkdtemp(prefix="tmpd", dir="/tmp"))  # short enough to pad to the limit
    try:
        for length in (MAX_TEMP_PATH, MAX_TEMP_PATH + 1):
            folder = base / ("c" * (length - len(str(base)) - 1))
            folder.mkdir()
            assert len(os.fsencode(folder)) == length
            done = subprocess.run([sys.executable, "-c", LAUNCH], cwd=REPO, capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "TMPDIR": str(folder)})
            if length == MAX_TEMP_PATH:
                assert done.returncode == 0 and "rendered" in done.stdout, done.stderr[-2000:]
            else:
                assert done.returncode != 0
                assert f"{folder} is {length} bytes long" in done.stderr
                assert f"Set TMPDIR to a folder of at most {MAX_TEMP_PATH} bytes" in done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
