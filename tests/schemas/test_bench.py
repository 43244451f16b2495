"""The bench runner (``schemas.bench``): repeats and majority, missing and broken candidates, bad test
lines, default baselines, per-file scoring with a bootstrap interval, and the CLI end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import bench
from schemas.bench import GroupScore, bootstrap_ci, index_candidates, run_bench

REPO = Path(__file__).resolve().parents[2]

PAGE = """# Annual Report

Revenue grew strongly this year. Costs were flat.

| Year | Revenue |
|---|---|
| 2023 | 10 |
| 2024 | 12 |
"""


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def bench_dir(tmp_path: Path) -> Path:
    """Two test files over three PDFs; candidates with repeats, a missing page, an unreadable file."""
    tests = tmp_path / "tests"
    tests.mkdir()
    _jsonl(tests / "a.jsonl", [
        {"pdf": "doc1.pdf", "page": 1, "id": "a1", "type": "present", "text": "Revenue grew"},
        {"pdf": "doc1.pdf", "page": 1, "id": "a2", "type": "order", "before": "Revenue grew",
         "after": "Costs were flat"},
        {"pdf": "doc1.pdf", "page": 1, "id": "a3", "type": "table", "cell": "12", "up": "10", "top_heading": "Revenue"},
        {"pdf": "doc1.pdf", "page": 1, "id": "a4", "type": "present", "text": "only in repeat one"},
        {"pdf": "doc1.pdf", "page": 2, "id": "a5", "type": "present", "text": "page two"},  # no candidate
    ])
    _jsonl(tests / "b.jsonl", [
        {"pdf": "sub/doc2.pdf", "page": 1, "id": "b1", "type": "absent", "text": "Confidential"},
        {"pdf": "sub/doc2.pdf", "page": 1, "id": "b2", "type": "present", "text": "x", "foo": 1},  # bad line
        "{broken json",
        {"pdf": "doc3.pdf", "page": 1, "id": "b3", "type": "present", "text": "anything"},  # unreadable candidate
        {"pdf": "doc1.pdf", "page": 1, "id": "b4", "type": "math", "math": "E=mc^2"},
    ])
    cand = tmp_path / "cand"
    (cand / "sub").mkdir(parents=True)
    (cand / "doc1_pg1_repeat1.md").write_text(PAGE + "\nonly in repeat one \\(E=mc^2\\)\n", encoding="utf-8")
    (cand / "doc1_pg1_repeat2.md").write_text(PAGE + "\n$E=mc^2$\n", encoding="utf-8")
    (cand / "doc1_pg1_repeat3.md").write_text("Revenue grew. Costs were flat.\n", encoding="utf-8")
    (cand / "sub" / "doc2_pg1_repeat1.md").write_text("Public summary.\n", encoding="utf-8")
    (cand / "doc3_pg1_repeat1.md").write_bytes(b"\xff\xfe\x00bad")
    (cand / "notes.md").write_text("not a candidate", encoding="utf-8")
    return tmp_path


def _by_id(result):
    return {r.id: r for r in result.results}


def test_index_candidates(bench_dir):
    index = index_candidates(bench_dir / "cand")
    assert [p.name for p in index[("doc1", 1)]] == ["doc1_pg1_repeat1.md", "doc1_pg1_repeat2.md", "doc1_pg1_repeat3.md"]
    assert ("sub/doc2", 1) in index and ("doc3", 1) in index and len(index) == 3


def test_run_bench_outcomes(bench_dir):
    result = run_bench(sorted((bench_dir / "tests").glob("*.jsonl")), bench_dir / "cand", bootstrap=200, seed=1)
    r = _by_id(result)
    assert r["a1"].passed and (r["a1"].repeats_passed, r["a1"].repeats) == (3, 3)
    assert r["a3"].passed and r["a3"].repeats_passed == 2  # no table in repeat 3: 2/3 is a majority
    assert not r["a4"].passed and r["a4"].repeats_passed == 1 and "1/3 repeats passed" in r["a4"].explanation
    assert not r["a5"].passed and r["a5"].repeats == 0 and "no candidate" in r["a5"].explanation
    assert r["b1"].passed
    assert r["b4"].passed and r["b4"].repeats_passed == 2  # verbatim \(..\) and $..$ in repeats 1 and 2
    assert not r["b3"].passed and "unreadable" in r["b3"].explanation
    invalid = [x for x in result.results if x.explanation.startswith("invalid test")]
    assert len(invalid) == 2 and {x.id for x in invalid} >= {"b2"}
    assert any("unknown field 'foo'" in p for p in result.problems)
    assert any("malformed JSON" in p for p in result.problems)

    # one default baseline per PDF, on page 1 (as olmOCR's benchmark.py), in its own group
    baselines = [x for x in result.results if x.group == bench.DEFAULT_BASELINE_GROUP]
    pages = sorted((x.pdf, x.page, x.id) for x in baselines)
    assert pages == [("doc1.pdf", 1, "doc1.pdf_baseline"), ("doc3.pdf", 1, "doc3.pdf_baseline"),
                     ("sub/doc2.pdf", 1, "sub/doc2.pdf_baseline")]

    groups = {Path(g.group).name if g.group != bench.DEFAULT_BASELINE_GROUP else g.group: g for g in result.groups}
    assert (groups["a.jsonl"].passed, groups["a.jsonl"].total) == (3, 5)
    assert (groups["b.jsonl"].passed, groups["b.jsonl"].total) == (2, 5)
    assert (groups[bench.DEFAULT_BASELINE_GROUP].passed, groups[bench.DEFAULT_BASELINE_GROUP].total) == (2, 3)
    assert result.score == pytest.approx((3 / 5 + 2 / 5 + 2 / 3) / 3)
    low, high = result.ci
    assert 0.0 <= low <= result.score <= high <= 1.0
    again = run_bench(sorted((bench_dir / "tests").glob("*.jsonl")), bench_dir / "cand", bootstrap=200, seed=1)
    assert again.ci == result.ci


def test_baseline_options(bench_dir):
    files = sorted((bench_dir / "tests").glob("*.jsonl"))
    no_default = run_bench(files, bench_dir / "cand", bootstrap=0, default_baseline=False)
    assert not any(x.type == "baseline" for x in no_default.results) and no_default.ci is None
    assert len(no_default.groups) == 2


def test_skip_baseline_leaves_out_invalid_baseline_lines_too(tmp_path):
    tests = _jsonl(tmp_path / "t.jsonl", [
        {"pdf": "d.pdf", "page": 1, "id": "p", "type": "present", "text": "one"},
        {"pdf": "d.pdf", "page": 1, "id": "b", "type": "baseline", "max_repeats": 0},  # invalid
    ])
    (tmp_path / "cand").mkdir()
    (tmp_path / "cand" / "d_pg1_repeat1.md").write_text("one", encoding="utf-8")
    result = run_bench([tests], tmp_path / "cand", bootstrap=0, skip_baseline=True)
    assert [(x.id, x.passed) for x in result.results] == [("p", True)] and result.score == 1.0
    assert any("max_repeats" in p and p.endswith("(left out: --skip-baseline)") for p in result.problems)


def test_a_test_file_named_two_ways_is_one_group(bench_dir, monkeypatch):
    monkeypatch.chdir(bench_dir / "tests")
    paths = bench.expand_test_paths(["*.jsonl", str(bench_dir / "tests" / "a.jsonl"), "./b.jsonl"])
    assert sorted(p.name for p in paths) == ["a.jsonl", "b.jsonl"]  # each file once


def test_default_baseline_is_one_per_pdf_on_page_1(tmp_path):
    # olmOCR's benchmark.py adds BaselineTest(page=1) to each PDF with no baseline test on any page
    tests = _jsonl(tmp_path / "t.jsonl", [
        {"pdf": "multi.pdf", "page": 2, "id": "m2", "type": "present", "text": "two"},
        {"pdf": "multi.pdf", "page": 3, "id": "m3", "type": "present", "text": "three"},
        {"pdf": "has.pdf", "page": 1, "id": "h1", "type": "present", "text": "one"},
        {"pdf": "has.pdf", "page": 2, "id": "h2", "type": "baseline"},
    ])
    cand = tmp_path / "cand"
    cand.mkdir()
    for name, text in [("multi_pg2", "two"), ("multi_pg3", "!!!"), ("has_pg1", "one"), ("has_pg2", "x")]:
        (cand / f"{name}_repeat1.md").write_text(text, encoding="utf-8")
    result = run_bench([tests], cand, bootstrap=0)
    defaults = [(x.pdf, x.page, x.passed) for x in result.results if x.group == bench.DEFAULT_BASELINE_GROUP]
    assert defaults == [("multi.pdf", 1, False)]  # page 1 has no candidate; page 3 (no text) is not checked
    assert sum(x.type == "baseline" for x in result.results) == 2


def test_a_crashing_check_is_a_failure_not_a_crash(bench_dir, monkeypatch):
    from schemas.unit_tests import OrderTest

    def explode(self, markdown):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(OrderTest, "check", explode)
    result = run_bench([bench_dir / "tests" / "a.jsonl"], bench_dir / "cand", bootstrap=0)
    r = _by_id(result)
    assert not r["a2"].passed and "RuntimeError: kaboom" in r["a2"].explanation
    assert r["a1"].passed


def test_bootstrap_ci():
    assert bootstrap_ci([GroupScore("a", 10, 10), GroupScore("b", 0, 4)], 500) == (0.5, 0.5)
    small = bootstrap_ci([GroupScore("a", 5, 10)], 2000, seed=3)
    large = bootstrap_ci([GroupScore("a", 500, 1000)], 2000, seed=3)
    assert small[0] < large[0] <= 0.5 <= large[1] < small[1]


def test_cli_errors_and_help(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0 and "--per-test" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--tests", str(tmp_path / "*.jsonl"), "--candidates", str(tmp_path)])
    assert exit_info.value.code == 2


def test_cli_end_to_end(bench_dir):
    per_test = bench_dir / "per_test.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "schemas.bench", "--tests", str(bench_dir / "tests" / "*.jsonl"),
         "--candidates", str(bench_dir / "cand"), "--per-test", str(per_test), "--bootstrap", "100", "--seed", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "a.jsonl" in out and "b.jsonl" in out and bench.DEFAULT_BASELINE_GROUP in out
    assert "overall: 55.6%" in out and "95% CI" in out  # (3/5 + 2/5 + 2/3) / 3
    assert "unknown field 'foo'" in out
    rows = [json.loads(line) for line in per_test.read_text().splitlines()]
    assert len(rows) == 13
    assert {"id", "type", "passed", "explanation"} <= set(rows[0])
