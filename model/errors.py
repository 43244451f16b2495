"""Error analysis after a merge (Jina-OCR-v1 5.5): where does the selected model still fail?

Input: evaluation rows as `model.eval` writes them, ``{id, source, domain, task, prediction, reference,
edit_distance, tests: [{type, passed, explanation}]}``. Output: a JSON report with unit-test failure
rates by test type, domain, source, task and (domain, test type), a ranked list of named failure modes
("table@synthetic-table: 60% of 10 table tests fail", with example record ids and explanations), and the
pages with the worst edit distance. The failure modes are what the next round's classifier-driven
retrieval and synthesis configs target: a mode names a test type and a domain, and lists the sources it
came from.

Failure modes are ranked by the number of failed tests (what fixing the mode would recover), then by
failure rate, then by name, so the order is deterministic.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

EXPLANATION_CHARS = 200


@dataclass(frozen=True)
class Outcome:
    type: str
    passed: bool
    explanation: str = ""


@dataclass(frozen=True)
class EvalRecord:
    """One evaluated page, validated from an eval row dict."""

    id: str
    source: str
    domain: str
    task: str
    edit_distance: float
    tests: tuple[Outcome, ...]

    @classmethod
    def from_dict(cls, d: dict, where: str = "row") -> "EvalRecord":
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
        for key in ("id", "source", "domain", "edit_distance", "tests"):
            if key not in d:
                raise ValueError(f"{where}: missing field {key!r}")
        ed = d["edit_distance"]
        if not isinstance(ed, (int, float)) or isinstance(ed, bool) or not 0.0 <= ed <= 1.0:
            raise ValueError(f"{where}: edit_distance must be a number in [0, 1], got {ed!r}")
        tests = []
        for i, t in enumerate(d["tests"]):
            if not isinstance(t, dict) or not isinstance(t.get("type"), str) or not isinstance(t.get("passed"), bool):
                raise ValueError(f"{where}: test {i} needs a string 'type' and a boolean 'passed', got {t!r}")
            tests.append(Outcome(t["type"], t["passed"], str(t.get("explanation") or "")))
        return cls(str(d["id"]), str(d["source"]), str(d["domain"]), str(d.get("task") or ""), float(ed),
                   tuple(tests))

    @property
    def failed(self) -> list[Outcome]:
        return [t for t in self.tests if not t.passed]


def _rate(failed: int, n: int) -> float | None:
    return failed / n if n else None


def _page_group(records: list[EvalRecord]) -> dict:
    tests = sum(len(r.tests) for r in records)
    failed = sum(len(r.failed) for r in records)
    return {"pages": len(records),
            "pages_with_failure": sum(1 for r in records if r.failed),
            "tests": tests, "failed": failed, "fail_rate": _rate(failed, tests),
            "mean_edit_distance": sum(r.edit_distance for r in records) / len(records) if records else None}


def _by(records: list[EvalRecord], field: str) -> dict[str, dict]:
    groups: dict[str, list[EvalRecord]] = defaultdict(list)
    for r in records:
        groups[getattr(r, field)].append(r)
    return {k: _page_group(v) for k, v in sorted(groups.items())}


def analyze(rows: Iterable[dict], top: int = 10, examples: int = 3, min_tests: int = 1) -> dict:
    """The error report for ``rows``; ``top`` failure modes and worst pages, ``examples`` ids per mode.

    A failure mode is a (test type, domain) cell with at least ``min_tests`` tests and one failure.
    """
    records = [EvalRecord.from_dict(r, f"row {i}") for i, r in enumerate(rows)]
    by_type: dict[str, list[Outcome]] = defaultdict(list)
    cells: dict[tuple[str, str], list[tuple[EvalRecord, Outcome]]] = defaultdict(list)
    for r in records:
        for t in r.tests:
            by_type[t.type].append(t)
            cells[(t.type, r.domain)].append((r, t))

    by_domain_type = {}
    modes = []
    for (kind, domain), items in sorted(cells.items()):
        n = len(items)
        failed = [(r, t) for r, t in items if not t.passed]
        name = f"{kind}@{domain}"
        by_domain_type[name] = {"test_type": kind, "domain": domain, "tests": n, "failed": len(failed),
                                "fail_rate": _rate(len(failed), n)}
        if failed and n >= min_tests:
            modes.append(_mode(name, kind, domain, n, failed, examples))
    modes.sort(key=lambda m: (-m["failed"], -m["fail_rate"], m["name"]))

    worst = sorted(records, key=lambda r: (-r.edit_distance, r.id))[:top]
    return {
        "summary": _page_group(records),
        "by_test_type": {k: {"tests": len(v), "failed": sum(not t.passed for t in v),
                             "fail_rate": _rate(sum(not t.passed for t in v), len(v))}
                         for k, v in sorted(by_type.items())},
        "by_domain": _by(records, "domain"),
        "by_source": _by(records, "source"),
        "by_task": _by(records, "task"),
        "by_domain_type": by_domain_type,
        "failure_modes": modes[:top],
        "worst_pages": [{"id": r.id, "source": r.source, "domain": r.domain, "task": r.task,
                         "edit_distance": r.edit_distance, "tests": len(r.tests), "failed": len(r.failed)}
                        for r in worst],
    }


def _mode(name: str, kind: str, domain: str, n: int, failed: list[tuple[EvalRecord, "Outcome"]],
          examples: int) -> dict:
    per_record: dict[str, list[Outcome]] = defaultdict(list)
    sources: dict[str, int] = defaultdict(int)
    for r, t in failed:
        per_record[r.id].append(t)
        sources[r.source] += 1
    ranked = sorted(per_record, key=lambda i: (-len(per_record[i]), i))
    ids = ranked[:examples]
    rate = len(failed) / n
    return {"name": name, "test_type": kind, "domain": domain, "tests": n, "failed": len(failed),
            "fail_rate": rate, "description": f"{name}: {rate:.0%} of {n} {kind} tests fail",
            "sources": dict(sorted(sources.items(), key=lambda kv: (-kv[1], kv[0]))),
            "example_ids": ids,
            # every failing page (most failed tests first, then by id), bounded at 2,000 ids (~70 KB a mode):
            # classifiers.train's positives and retrieval seeds
            "failing_ids": ranked[:2000],
            "example_explanations": [per_record[i][0].explanation[:EXPLANATION_CHARS] for i in ids]}


def write_report(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return path


def read_rows(path: str | Path) -> list[dict]:
    """Rows from an eval report JSON (``model.eval --out``, key ``rows``) or a JSONL file of rows."""
    text = Path(path).read_text()
    if Path(path).suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    doc = json.loads(text)
    return doc["rows"] if isinstance(doc, dict) else doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Failure modes of an evaluated model, as JSON.")
    ap.add_argument("eval", help="eval report JSON (model.eval --out) or JSONL of eval rows")
    ap.add_argument("--out", required=True, help="report JSON to write")
    ap.add_argument("--top", type=int, default=10, help="failure modes and worst pages to keep")
    ap.add_argument("--min-tests", type=int, default=1, help="smallest (type, domain) cell that names a mode")
    args = ap.parse_args(argv)
    report = analyze(read_rows(args.eval), top=args.top, min_tests=args.min_tests)
    write_report(report, args.out)
    for m in report["failure_modes"]:
        print(m["description"], "e.g.", ", ".join(m["example_ids"]))


if __name__ == "__main__":
    main()
