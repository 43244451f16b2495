"""The CLI start-up trims (``pipelines.startup``): pandas kept out of Beam's import and available after
it, the GC frozen and back on. Each case runs in a fresh interpreter: they change process-wide state."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_beam_imports_without_pandas_and_pandas_imports_after():
    out = run_python("""
        import gc, sys
        from pipelines import startup
        startup.begin_imports()
        gc_during = gc.isenabled()
        try:
            import pandas
            blocked = False
        except ImportError:
            blocked = True
        import apache_beam as beam
        from pipelines.local_runner import LocalRunner  # the corpus CLI's runner (Beam's default tries Prism first)
        with beam.Pipeline(runner=LocalRunner()) as p:  # Beam works without it
            p | beam.Create([1, 2]) | beam.Map(lambda x: x)
        loaded_by_beam = sys.modules.get("pandas") is not None
        startup.end_imports()
        import pandas
        print(gc_during, blocked, loaded_by_beam, gc.isenabled(), gc.get_freeze_count() > 0,
              pandas.DataFrame({"a": [1, 2]}).shape)
    """)
    assert out == "False True False True True (2, 1)"


def test_an_already_loaded_module_is_left_alone():
    out = run_python("""
        import sys
        import pandas
        from pipelines import startup
        startup.begin_imports()
        import pandas as again
        startup.end_imports()
        print(again is pandas, sys.modules["pandas"] is pandas)
    """)
    assert out == "True True"
