import json
from dataclasses import asdict

import pytest

from model.errors import analyze, main, read_rows, write_report


def t(kind, passed, why=""):
    return {"type": kind, "passed": passed, "explanation": why}


def row(id_, source, domain, ed, tests, task="page"):
    return {"id": id_, "source": source, "domain": domain, "task": task, "prediction": "p", "reference": "r",
            "edit_distance": ed, "tests": tests}


ROWS = [
    row("p1", "synth", "synthetic-table", 0.5,
        [t("table", False, "cell (1,2) missing"), t("table", False, "no header"), t("table", True),
         t("present", True)]),
    row("p2", "synth", "synthetic-table", 0.2, [t("table", False, "wrong rowspan"), t("table", True)]),
    row("p3", "olmocr", "arxiv", 0.9, [t("math", False, "formula not found"), t("table", True), t("present", True)],
        task="math"),
    row("p4", "olmocr", "arxiv", 0.1, []),
    row("p5", "finepdfs", "synthetic-table", 0.3, [t("table", False, "table absent")]),
]


def test_summary_and_groupings_by_hand():
    rep = analyze(ROWS, top=2)
    s = rep["summary"]
    assert (s["pages"], s["tests"], s["failed"], s["pages_with_failure"]) == (5, 10, 5, 4)
    assert s["fail_rate"] == pytest.approx(0.5) and s["mean_edit_distance"] == pytest.approx(0.4)
    assert rep["by_test_type"] == {"math": {"tests": 1, "failed": 1, "fail_rate": 1.0},
                                   "present": {"tests": 2, "failed": 0, "fail_rate": 0.0},
                                   "table": {"tests": 7, "failed": 4, "fail_rate": pytest.approx(4 / 7)}}
    d = rep["by_domain"]["synthetic-table"]
    assert (d["pages"], d["tests"], d["failed"]) == (3, 7, 4)
    assert d["mean_edit_distance"] == pytest.approx(1 / 3)
    arxiv = rep["by_domain"]["arxiv"]
    assert (arxiv["pages"], arxiv["tests"], arxiv["failed"], arxiv["pages_with_failure"]) == (2, 3, 1, 1)
    src = rep["by_source"]
    assert (src["synth"]["tests"], src["synth"]["failed"]) == (6, 3)
    assert (src["olmocr"]["tests"], src["olmocr"]["failed"]) == (3, 1)
    assert (src["finepdfs"]["tests"], src["finepdfs"]["failed"]) == (1, 1)
    assert set(rep["by_task"]) == {"page", "math"}
    cell = rep["by_domain_type"]["table@synthetic-table"]
    assert (cell["tests"], cell["failed"]) == (6, 4)
    assert rep["by_domain_type"]["table@arxiv"]["failed"] == 0


def test_failure_modes_ranked_named_with_examples():
    modes = analyze(ROWS)["failure_modes"]
    assert [m["name"] for m in modes] == ["table@synthetic-table", "math@arxiv"]
    m = modes[0]
    assert m["description"] == "table@synthetic-table: 67% of 6 table tests fail"
    assert (m["test_type"], m["domain"], m["failed"], m["tests"]) == ("table", "synthetic-table", 4, 6)
    assert m["sources"] == {"synth": 3, "finepdfs": 1}
    assert m["example_ids"] == ["p1", "p2", "p5"]  # p1 fails twice, then by id
    assert m["example_explanations"][0] == "cell (1,2) missing"
    assert modes[1]["description"] == "math@arxiv: 100% of 1 math tests fail"
    assert [m["name"] for m in analyze(ROWS, min_tests=2)["failure_modes"]] == ["table@synthetic-table"]
    assert len(analyze(ROWS, top=1)["failure_modes"]) == 1


def test_worst_pages():
    worst = analyze(ROWS, top=2)["worst_pages"]
    assert [w["id"] for w in worst] == ["p3", "p1"]
    assert worst[0] == {"id": "p3", "source": "olmocr", "domain": "arxiv", "task": "math", "edit_distance": 0.9,
                        "tests": 3, "failed": 1}


def test_no_tests_gives_null_rates():
    rep = analyze([row("a", "s", "d", 0.0, [])])
    assert rep["summary"]["fail_rate"] is None and rep["failure_modes"] == []


@pytest.mark.parametrize("bad", [
    {"id": "x", "source": "s", "domain": "d", "tests": []},  # no edit_distance
    row("x", "s", "d", 1.5, []),
    row("x", "s", "d", 0.1, [{"type": "table", "passed": "no"}]),
])
def test_bad_rows_refused(bad):
    with pytest.raises(ValueError, match="row 0"):
        analyze([bad])


def test_reads_model_eval_rows_and_writes_report(tmp_path):
    from model.eval import EvalRow

    rows = [asdict(EvalRow(r["id"], r["source"], r["domain"], r["task"], r["prediction"], r["reference"],
                           r["edit_distance"], r["tests"])) for r in ROWS]
    (tmp_path / "eval.json").write_text(json.dumps({"summary": {}, "rows": rows}))
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert read_rows(tmp_path / "eval.json") == read_rows(tmp_path / "rows.jsonl") == rows
    path = write_report(analyze(rows), tmp_path / "out" / "errors.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(analyze(ROWS)))
    main([str(tmp_path / "eval.json"), "--out", str(tmp_path / "cli.json"), "--top", "1"])
    assert json.loads((tmp_path / "cli.json").read_text())["failure_modes"][0]["name"] == "table@synthetic-table"


def test_failure_modes_list_every_failing_page_bounded():
    # classifiers.train takes a mode's failing pages as positives: all of them, not the 3 examples
    rows = [row(f"f{i}", "s", "formula", 0.5, [t("math", False, "formula not found")] * (1 + (i == 4)),
                task="transcribe_formula") for i in range(7)]
    rows.append(row("ok", "s", "formula", 0.0, [t("math", True)], task="transcribe_formula"))
    m = analyze(rows)["failure_modes"][0]
    assert m["example_ids"] == ["f4", "f0", "f1"]
    assert m["failing_ids"] == ["f4", "f0", "f1", "f2", "f3", "f5", "f6"]  # most failures first, then by id
    many = [row(f"p{i:05d}", "s", "d", 0.5, [t("math", False)]) for i in range(2003)]
    m = analyze(many)["failure_modes"][0]
    assert m["failed"] == 2003 and len(m["failing_ids"]) == 2000  # the documented bound
    assert m["failing_ids"][:3] == m["example_ids"] and m["failing_ids"][-1] == "p01999"
