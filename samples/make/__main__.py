"""Rebuild every folder under ``samples/``: ``python -m samples.make [--root samples]``."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

BUILDERS = ("olmocr", "finepdfs", "historical", "local", "elements")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args()
    root = Path(args.root)
    for name in BUILDERS:
        importlib.import_module(f"samples.make.{name}").build(root)
        print(f"built samples for {name} under {root}")


if __name__ == "__main__":
    main()
