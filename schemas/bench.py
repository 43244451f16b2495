"""Score OCR transcriptions against olmOCR-Bench-style unit tests (``python -m schemas.bench``).

Inputs: JSONL test files (``schemas/unit_tests.py`` format, the same as olmOCR-Bench) and a folder
of candidate transcriptions named ``<pdf without extension>_pg<N>_repeat<K>.md`` (sub-folders
mirror sub-folders in ``pdf``). Scoring follows olmOCR-Bench's ``benchmark.py``:

* each test runs on every repeat of its page and passes when more than half of the repeats pass;
* a page with no candidate file fails all its tests ("no candidate"); an unreadable file is a
  failed repeat;
* a default ``baseline`` test on page 1 (id ``<pdf>_baseline``) is added for every PDF that has tests
  but no baseline test on any page (olmOCR adds it for every PDF of its ``pdfs/`` folder, tested or
  not; we have no PDF folder and know the PDFs the tests name); they form their own group,
  ``baseline (default)``;
* the score is the mean over groups (JSONL files, plus the default baselines) of each group's pass
  rate, with a bootstrap confidence interval that resamples tests within each group.

One bad test line or candidate file never stops the run: it becomes a failed test whose explanation
carries the error. ``--per-test`` writes one JSON line per test with the outcome and explanation.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from schemas.unit_tests import BaselineTest, UnitTest, read_tests

DEFAULT_BASELINE_GROUP = "baseline (default)"
_CANDIDATE_NAME = re.compile(r"^(?P<base>.+)_pg(?P<page>\d+)_repeat(?P<repeat>\d+)\.md$")


@dataclass
class UnitTestResult:
    group: str  # the JSONL file the test came from, or the default-baseline group
    id: str
    type: str
    pdf: str
    page: int | None
    passed: bool
    repeats_passed: int
    repeats: int
    explanation: str


@dataclass
class GroupScore:
    group: str
    passed: int
    total: int

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass
class BenchResult:
    results: list[UnitTestResult]
    groups: list[GroupScore]
    score: float
    ci: tuple[float, float] | None
    problems: list[str] = field(default_factory=list)  # bad test lines, unreadable candidates

    def by_type(self) -> dict[str, tuple[int, int, float]]:
        """type -> (passed, total, mean fraction of repeats passed)."""
        acc: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
        for r in self.results:
            a = acc[r.type]
            a[0] += r.passed
            a[1] += 1
            a[2] += r.repeats_passed / r.repeats if r.repeats else 0.0
        return {t: (int(p), int(n), s / n) for t, (p, n, s) in sorted(acc.items())}


def index_candidates(folder: str | Path) -> dict[tuple[str, int], list[Path]]:
    """(pdf base path, page) -> candidate files, ordered by repeat number."""
    root = Path(folder)
    found: dict[tuple[str, int], list[tuple[int, Path]]] = defaultdict(list)
    for path in root.rglob("*.md"):
        m = _CANDIDATE_NAME.match(path.relative_to(root).as_posix())
        if m:
            found[(m["base"], int(m["page"]))].append((int(m["repeat"]), path))
    return {key: [p for _, p in sorted(items)] for key, items in found.items()}


def pdf_base(pdf: str) -> str:
    return os.path.splitext(pdf)[0]


def expand_test_paths(patterns: Sequence[str]) -> list[Path]:
    """Glob patterns (or plain paths) -> sorted JSONL paths, each file once however it is spelt (the
    first spelling in sorted order names it: ``a.jsonl`` and ``$PWD/a.jsonl`` are one group)."""
    paths: list[str] = []
    for pattern in patterns:
        matched = glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]
        paths.extend(p for p in matched if os.path.isfile(p))
    seen: set[str] = set()
    unique = []
    for p in sorted(set(paths)):
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            unique.append(Path(p))
    return unique


def _run_page(tests: list[tuple[str, UnitTest]], files: list[Path], problems: list[str]) -> list[UnitTestResult]:
    passes = [0] * len(tests)
    explanations: list[list[str]] = [[] for _ in tests]  # failing explanations first used
    first_pass: list[str | None] = [None] * len(tests)
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            for i in range(len(tests)):
                explanations[i].append(f"{path.name}: unreadable candidate: {exc}")
            continue
        for i, (_, test) in enumerate(tests):
            try:
                ok, why = test.check(text)
            except Exception as exc:  # noqa: BLE001 - a broken test or renderer is one failed repeat, not a crash
                ok, why = False, f"error: {type(exc).__name__}: {exc}"
            if ok:
                passes[i] += 1
                if first_pass[i] is None:
                    first_pass[i] = why
            else:
                explanations[i].append(f"{path.name}: {why}")
    results = []
    n = len(files)
    for i, (group, test) in enumerate(tests):
        passed = passes[i] / n > 0.5
        why = (explanations[i][0] if explanations[i] else "") if not passed or not first_pass[i] else first_pass[i]
        if n > 1:
            why = f"{passes[i]}/{n} repeats passed; " + why
        results.append(UnitTestResult(group, test.id, test.type, test.pdf, test.page, passed, passes[i], n, why))
    return results


def run_bench(test_files: Sequence[str | Path], candidates: str | Path, *, bootstrap: int = 1000,
              seed: int = 0, default_baseline: bool = True, skip_baseline: bool = False) -> BenchResult:
    """Load the tests, run them on the candidates, and score (see the module docstring)."""
    problems: list[str] = []
    results: list[UnitTestResult] = []
    loaded: list[tuple[str, UnitTest]] = []
    groups: list[str] = []
    for path in test_files:
        group = str(path)
        groups.append(group)
        try:
            tests, bad = read_tests(path)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            continue
        for p in bad:
            data = p.data if isinstance(p.data, dict) else {}
            if skip_baseline and data.get("type") == "baseline":
                problems.append(f"{p.message} (left out: --skip-baseline)")  # listed, not scored
                continue
            problems.append(p.message)
            page = data.get("page")
            results.append(UnitTestResult(
                group, str(data.get("id") or p.where), str(data.get("type") or "invalid"), str(data.get("pdf") or ""),
                page if isinstance(page, int) else None, False, 0, 0, f"invalid test: {p.message}"))
        loaded.extend((group, t) for t in tests)

    if skip_baseline:
        loaded = [(g, t) for g, t in loaded if t.type != "baseline"]
    elif default_baseline:
        # olmOCR's benchmark.py: one per PDF with no baseline test on any page, always on page 1
        covered = {t.pdf for _, t in loaded if t.type == "baseline"}
        for pdf in sorted({t.pdf for _, t in loaded} - covered):
            loaded.append((DEFAULT_BASELINE_GROUP, BaselineTest(pdf=pdf, page=1, id=f"{pdf}_baseline")))
        if any(g == DEFAULT_BASELINE_GROUP for g, _ in loaded):
            groups.append(DEFAULT_BASELINE_GROUP)

    index = index_candidates(candidates)
    by_page: dict[tuple[str, int], list[tuple[str, UnitTest]]] = defaultdict(list)
    for group, test in loaded:
        by_page[(pdf_base(test.pdf), test.page)].append((group, test))
    for key in sorted(by_page):
        page_tests = by_page[key]
        files = index.get(key, [])
        if not files:
            why = f"no candidate: expected {key[0]}_pg{key[1]}_repeat<K>.md in {candidates}"
            results.extend(UnitTestResult(g, t.id, t.type, t.pdf, t.page, False, 0, 0, why) for g, t in page_tests)
            continue
        results.extend(_run_page(page_tests, files, problems))

    totals: dict[str, list[int]] = {g: [0, 0] for g in groups}
    for r in results:
        totals.setdefault(r.group, [0, 0])
        totals[r.group][0] += r.passed
        totals[r.group][1] += 1
    scores = [GroupScore(g, p, n) for g, (p, n) in totals.items() if n > 0]
    score = float(np.mean([s.rate for s in scores])) if scores else 0.0
    ci = bootstrap_ci(scores, bootstrap, seed) if bootstrap > 0 and scores else None
    return BenchResult(results, scores, score, ci, problems)


def bootstrap_ci(groups: Sequence[GroupScore], samples: int, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean-of-group-rates under resampling tests within each group.

    Outcomes are 0/1, so resampling a group of n tests with rate p is a Binomial(n, p) draw.
    """
    rng = np.random.default_rng(seed)
    draws = np.stack([rng.binomial(g.total, g.rate, size=samples) / g.total for g in groups])
    means = draws.mean(axis=0)
    alpha = (1.0 - level) / 2
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def write_per_test(results: Sequence[UnitTestResult], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in results)


def format_report(result: BenchResult) -> str:
    lines = []
    width = max([len(g.group) for g in result.groups] + [10])
    lines.append(f"{'file':<{width}}  {'passed':>7}  {'tests':>6}  {'rate':>6}")
    for g in result.groups:
        lines.append(f"{g.group:<{width}}  {g.passed:>7}  {g.total:>6}  {100 * g.rate:>5.1f}%")
    lines.append("")
    lines.append(f"{'type':<10}  {'passed':>7}  {'tests':>6}  {'rate':>6}  {'repeat avg':>10}")
    for kind, (passed, total, repeat_avg) in result.by_type().items():
        lines.append(f"{kind:<10}  {passed:>7}  {total:>6}  {100 * passed / total:>5.1f}%  {100 * repeat_avg:>9.1f}%")
    lines.append("")
    ci = f" (95% CI {100 * result.ci[0]:.1f}% - {100 * result.ci[1]:.1f}%)" if result.ci else ""
    lines.append(f"overall: {100 * result.score:.1f}%{ci}, mean of {len(result.groups)} per-file pass rates "
                 f"over {len(result.results)} tests")
    if result.problems:
        lines.append(f"{len(result.problems)} problem(s) (counted as failures unless noted):")
        lines.extend(f"  {p}" for p in result.problems[:20])
        if len(result.problems) > 20:
            lines.append(f"  ... {len(result.problems) - 20} more")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.bench",
        description="Score candidate transcriptions against olmOCR-Bench-style unit tests. A test passes when "
                    "more than half of its page's repeats pass; pages without a candidate fail; the score is the "
                    "mean of per-file pass rates (default baseline tests form their own group).",
    )
    parser.add_argument("--tests", nargs="+", required=True, metavar="GLOB",
                        help="JSONL test files or glob patterns (quote them), e.g. 'bench/*.jsonl'")
    parser.add_argument("--candidates", required=True, metavar="DIR",
                        help="folder of <pdf base>_pg<N>_repeat<K>.md transcriptions (searched recursively)")
    parser.add_argument("--per-test", metavar="FILE.jsonl",
                        help="write one JSON line per test: group, id, type, pdf, page, passed, repeats, explanation")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="bootstrap resamples for the 95%% interval (0 disables; default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--no-default-baseline", action="store_true",
                        help="do not add a page-1 baseline test to PDFs that lack one")
    parser.add_argument("--skip-baseline", action="store_true", help="drop every baseline test, given or default")
    args = parser.parse_args(argv)

    paths = expand_test_paths(args.tests)
    if not paths:
        parser.error(f"no test files match {args.tests}")
    if not os.path.isdir(args.candidates):
        parser.error(f"candidates folder {args.candidates!r} does not exist")
    result = run_bench(paths, args.candidates, bootstrap=args.bootstrap, seed=args.seed,
                       default_baseline=not args.no_default_baseline, skip_baseline=args.skip_baseline)
    print(format_report(result))
    if args.per_test:
        write_per_test(result.results, args.per_test)
        print(f"per-test results: {args.per_test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
