"""olmOCR-Bench-compatible unit tests: typed test records, their checks, and JSONL I/O.

A unit test states one verifiable fact about the transcription of one PDF page: a text is present
or absent, one text precedes another, a table cell has given neighbours, a formula appears, the page
is not degenerate (baseline), a text is bold/italic/a heading, a footnote marker is placed. The
field names, thresholds and normalisation are those of olmOCR-Bench (``olmocr/bench/tests.py``), so
its JSONL files load unchanged and score the same; the same dicts are stored, one JSON string per
test, in ``PageRecord.unit_tests``.

Every test is a ``@dataclass(kw_only=True)`` validated on construction (``ValueError`` naming the
field) with ``check(markdown) -> (passed, explanation)``. Public fields keep the values as given
(so dump -> load round-trips exactly); the normalised reference strings live in private fields.

Differences from the reference, all deliberate:

* ``math`` tests do not render the reference when loaded (loading needs no browser); a reference that
  does not render makes ``check`` fail with the renderer's reason instead.
* ``present``/``absent`` apply a length guard: a page (or its ``first_n``/``last_n`` window) shorter
  than the text minus ``max_diffs`` cannot contain it. olmOCR's ``partial_ratio`` would score a page
  ``R`` as a full match of ``Results``, a reward hole. The guard is olmOCR's own fix (commit aabb122,
  "guard TextPresenceTest against partial_ratio degenerate case"), which its main branch did not have
  at f7cfe4c2. ``format`` and ``footnote`` (synthetic-only types) apply the same guard to a formatted
  span or a footnote's context.
* ``order`` finds matches with the ``fuzzysearch`` package, as olmOCR does, but where two matches
  overlap and are equally good (same distance, same length) it keeps the leftmost; fuzzysearch keeps
  one by ``PYTHONHASHSEED``-dependent set order, so olmOCR's own verdict on such pages changes from
  run to run (``schemas.text.find_near_matches``).
* ``table`` reads tables as olmOCR does (``convention="olmocr"`` of ``schemas/tables.py``: any run
  of two or more lines with ``|`` is a Markdown table, separator row or not); it rejects an empty
  ``cell`` and caps spans at 1000 (docs/judging.md lists every known divergence).
* Loading is stricter: olmOCR's dataclasses check almost no field types, and we reject what they
  would take and misread (``"page": "1"``, ``"case_sensitive": "false"``, which is true there,
  ``"max_diffs": true``, ``"checked": "Verified"``, ``first_n``/``last_n`` of 0 and ``page`` < 1,
  ...; docs/judging.md lists them). A null table relation (``"up": null``) is unset, as there.

The test types live in ``schemas.unit_test_base`` (``UnitTest``), ``schemas.text_unit_tests``,
``schemas.table_unit_tests`` and ``schemas.math_unit_tests``; this module is the registry, the JSONL
I/O and the public facade (it re-exports every test type).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from schemas.math_unit_tests import MathTest, extract_equations
from schemas.table_unit_tests import TableTest
from schemas.text_unit_tests import (
    FORMATS,
    BaselineTest,
    FootnoteTest,
    FormatTest,
    OrderTest,
    PresenceTest,
    formatted_spans,
)
from schemas.unit_test_base import CHECKED_VALUES, TEST_TYPES, UnitTest

__all__ = [
    "CHECKED_VALUES", "FORMATS", "TEST_CLASSES", "TEST_TYPES", "BaselineTest", "FootnoteTest", "FormatTest",
    "LoadProblem", "MathTest", "OrderTest", "PresenceTest", "TableTest", "UnitTest", "check_all", "dump_tests",
    "extract_equations", "formatted_spans", "load_tests", "passing_tests", "read_tests", "unit_test_from_dict",
    "unit_test_from_json", "unit_test_to_dict", "unit_test_to_json",
]

TEST_CLASSES: dict[str, type[UnitTest]] = {
    "present": PresenceTest,
    "absent": PresenceTest,
    "order": OrderTest,
    "table": TableTest,
    "math": MathTest,
    "baseline": BaselineTest,
    "format": FormatTest,
    "footnote": FootnoteTest,
}


def _init_fields(cls: type[UnitTest]) -> list[Any]:
    return [f for f in fields(cls) if f.init]


def unit_test_from_dict(data: Mapping[str, Any], where: str = "<test>") -> UnitTest:
    """Build the test a JSON object describes; ``ValueError`` prefixed with ``where`` otherwise."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")  # noqa: TRY004
    kind = data.get("type")
    cls = TEST_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"{where}: unknown test type {kind!r} (expected one of {', '.join(TEST_TYPES)})")
    known = _init_fields(cls)
    names = {f.name for f in known}
    for key in data:
        if key not in names:
            raise ValueError(f"{where}: unknown field {key!r} for type {kind}")
    for f in known:
        if f.default is MISSING and f.default_factory is MISSING and f.name not in data:
            raise ValueError(f"{where}: missing field {f.name!r} for type {kind}")
    try:
        return cls(**data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc} (type {kind})") from None


def unit_test_to_dict(test: UnitTest) -> dict[str, Any]:
    """The test's fields as given (olmOCR-Bench names and order), ready for ``json.dumps``."""
    return {f.name: getattr(test, f.name) for f in _init_fields(type(test))}


def unit_test_to_json(test: UnitTest) -> str:
    """One JSONL line / one ``PageRecord.unit_tests`` entry."""
    return json.dumps(unit_test_to_dict(test), ensure_ascii=False)


def unit_test_from_json(line: str, where: str = "<test>") -> UnitTest:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None
    return unit_test_from_dict(data, where)


@dataclass
class LoadProblem:
    """A JSONL line that did not yield a test; ``data`` is the parsed object when it parsed."""

    where: str
    message: str  # starts with ``where``
    data: Any = None


def read_tests(path: str | Path) -> tuple[list[UnitTest], list[LoadProblem]]:
    """Every valid test of a JSONL file, and every problem (bad JSON, invalid test, duplicate id)."""
    tests: list[UnitTest] = []
    problems: list[LoadProblem] = []
    first_line: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            data = None
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(LoadProblem(where, f"{where}: malformed JSON: {exc.msg} (column {exc.colno})"))
                continue
            try:
                test = unit_test_from_dict(data, where)
            except ValueError as exc:
                problems.append(LoadProblem(where, str(exc), data))
                continue
            if test.id in first_line:
                problems.append(LoadProblem(
                    where, f"{where}: duplicate id {test.id!r} (first on line {first_line[test.id]})", data))
                continue
            first_line[test.id] = number
            tests.append(test)
    return tests, problems


def load_tests(path: str | Path) -> list[UnitTest]:
    """All tests of a JSONL file; the first problem raises ``ValueError`` naming file and line."""
    tests, problems = read_tests(path)
    if problems:
        raise ValueError(problems[0].message)
    return tests


def dump_tests(tests: Iterable[UnitTest], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(unit_test_to_json(test) + "\n" for test in tests)


def passing_tests(lines: Iterable[str], text: str, katex_cache: str | None = None) -> list[str]:
    """The entries of ``lines`` (``PageRecord.unit_tests``: one JSON test each) that pass on ``text``, in
    order. A stage that rewrites a record's response keeps only these (or rejects the rewrite), so no
    record carries a test its own label fails; a check that raises is a failure, as in ``check_all``.
    ``katex_cache``: where ``math`` tests cache their renders (``schemas.math_unit_tests.run_cache_dir`` of
    the run; None: the default cache)."""
    lines = list(lines)
    tests = [unit_test_from_json(line, f"unit_tests[{number}]") for number, line in enumerate(lines)]
    if not any(isinstance(t, MathTest) for t in tests):
        results = check_all(tests, text)
    else:
        from schemas.math_render import cache_in, katex_version  # lazy: the browser-based renderer

        katex_version()  # KaTeX missing is RuntimeError, not every math test failing (and silently dropped)
        with cache_in(katex_cache):
            results = check_all(tests, text)
    return [line for line, (_, passed, _) in zip(lines, results) if passed]


def check_all(tests: Iterable[UnitTest], markdown: str,
              on_error: Callable[[UnitTest, Exception], None] | None = None) -> list[tuple[UnitTest, bool, str]]:
    """Run tests on one page; an exception becomes a failure whose explanation names it."""
    out = []
    for test in tests:
        try:
            passed, why = test.check(markdown)
        except Exception as exc:  # noqa: BLE001 - reported as a failure with its cause
            if on_error is not None:
                on_error(test, exc)
            passed, why = False, f"error: {type(exc).__name__}: {exc}"
        out.append((test, passed, why))
    return out
