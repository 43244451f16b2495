"""Score a candidate transcription against a reference with every metric of ``schemas.similarity``.

    python -m schemas.score --reference ref.md --candidate cand.md [--json]
        [--teds-convention {omnidocbench,pubtabnet}]

Prints one line per metric (name, score, details); ``--json`` prints one JSON object
``{metric: {"score": float | null, "details": {...}}}``. Metrics whose structure the reference
lacks (no table, no formula) are "n/a" (``null``). ``--teds-convention`` picks how TEDS and TEDS-S
normalise tables (``schemas.table_metrics``; default ``omnidocbench``, see docs/judging.md).
Exit status 0, or 2 when a file is unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schemas.similarity import DEFAULT_TEDS_CONVENTION, TEDS_CONVENTIONS, MetricResult, score_all


def _summary(details: dict[str, Any], width: int = 100) -> str:
    parts = []
    for key, value in details.items():
        if isinstance(value, list):
            shown = "; ".join(json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v for v in value[:3])
            value = f"[{shown}{'; ...' if len(value) > 3 else ''}]"
        parts.append(f"{key}={value}")
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 3] + "..."


def format_table(results: dict[str, MetricResult]) -> str:
    """A fixed-width table: metric, score (n/a when None), details summary."""
    name_width = max(len("metric"), *(len(n) for n in results))
    lines = [f"{'metric':<{name_width}}  {'score':>7}  details", f"{'-' * name_width}  {'-' * 7}  {'-' * 7}"]
    for name, (score, details) in results.items():
        shown = "n/a" if score is None else f"{score:.4f}"
        lines.append(f"{name:<{name_width}}  {shown:>7}  {_summary(details)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.score", description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, type=Path, help="reference transcription (Markdown/HTML/LaTeX)")
    parser.add_argument("--candidate", required=True, type=Path, help="candidate transcription to score")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    parser.add_argument("--teds-convention", choices=TEDS_CONVENTIONS, default=DEFAULT_TEDS_CONVENTION,
                        help="TEDS/TEDS-S table normalisation: omnidocbench (OmniDocBench's: thead/tbody unwrapped, th "
                             "as td, NFKC, whitespace collapsed) or pubtabnet (PubTabNet's metric.py as written); "
                             f"default {DEFAULT_TEDS_CONVENTION}")
    args = parser.parse_args(argv)
    texts = []
    for flag, path in (("--reference", args.reference), ("--candidate", args.candidate)):
        try:  # utf-8-sig: a byte-order mark is not text to score
            texts.append(path.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError) as exc:
            print(f"error: cannot read {flag} {path}: {exc}", file=sys.stderr)
            return 2
    reference, candidate = texts
    results = score_all(reference, candidate, teds_convention=args.teds_convention)
    if args.json:
        print(json.dumps({name: {"score": score, "details": details} for name, (score, details) in results.items()},
                         ensure_ascii=False, indent=2))
    else:
        print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
