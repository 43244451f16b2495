"""The cleaning figures of issue 4 in one run: the repeat detector and dedup.

    python benchmarks/clean.py

Runs ``benchmarks/clean_repeats.py`` (labels/s per core, precision and recall per kind on
``tests/data/repeat_loops.jsonl``, datatrove's GopherRepetitionFilter side by side) and
``benchmarks/clean_dedup.py`` (MinHash near-dup recall and records/s against datasketch, exact
image dedup pages/s). Each script also runs alone and takes its own options.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    argparse.ArgumentParser(description="Runs benchmarks/clean_repeats.py and benchmarks/clean_dedup.py with their "
                                        "default options (each also runs alone, with --help).").parse_args()
    status = 0
    for name in ("clean_repeats.py", "clean_dedup.py"):
        print(f"==> benchmarks/{name}", flush=True)
        status |= subprocess.run([sys.executable, str(HERE / name)], cwd=HERE.parent).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
