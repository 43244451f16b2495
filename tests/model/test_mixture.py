"""model/data.py's mixture levels (domain -> task -> convention -> source) and the mixture report
(``python -m model.data --report``), on a tiny corpus written here."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from model.data import DataConfig, Mixture, level_shares, main, mixture_report, record_convention
from model.sampler import DomainSampler
from tests.helpers import corpus_record, write_records

# (domain, source, task, convention, language, rows)
LAYOUT = [("docs", "a", "parse_page", "markdown", "en", 12), ("docs", "a", "parse_page", "plain", "zh", 4),
          ("docs", "b", "vqa", None, "en", 8), ("synth", "s", "parse_page", "json_layout", "en", 6),
          ("synth", "s", "transcribe_table", None, "zh", 2)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    records = []
    for domain, source, task, convention, language, n in LAYOUT:
        for i in range(n):
            r = corpus_record(source, domain, 1000 * len(records) + i)
            records.append(replace(r, task=task, language=language,
                                   metadata={"instruct": {"convention": convention}} if convention else {}))
    return write_records(tmp_path_factory.mktemp("mix"), records)


def test_levels_follow_rows_unless_rates_are_configured() -> None:
    rows = {("d", "parse_page", "markdown", "a"): 30, ("d", "parse_page", "plain", "a"): 10,
            ("d", "vqa", "-", "b"): 10, ("e", "kie", "-", "c"): 5}
    p = Mixture(rows).probabilities()
    assert p[("d", "parse_page", "markdown", "a")] == pytest.approx(0.5 * 0.8 * 0.75)
    assert p[("e", "kie", "-", "c")] == pytest.approx(0.5) and sum(p.values()) == pytest.approx(1)
    q = Mixture(rows, task_rates={"vqa": 1, "*": 3},
                convention_rates={"plain": 1, "markdown": 1, "*": 2}).probabilities()
    assert q[("d", "vqa", "-", "b")] == pytest.approx(0.5 * 0.25)
    r = Mixture(rows, convention_rates={"plain": 1}).probabilities()  # only plain: the rest is not drawn
    assert r == {("d", "parse_page", "plain", "a"): pytest.approx(1.0)}
    assert q[("d", "parse_page", "plain", "a")] == pytest.approx(0.5 * 0.75 * 0.5)
    assert level_shares({"x": 1, "y": 3}, {"x": 0}) == {} and record_convention('{"instruct": {}}') == "-"


def test_sampler_draws_tasks_and_conventions_at_their_rates(corpus) -> None:
    sampler = DomainSampler(corpus, "train", eval_fraction=0.0, columns=["id", "task", "metadata"],
                            task_rates={"vqa": 1, "parse_page": 1, "transcribe_table": 2})
    n, tasks = 1500, {}
    for _ in range(n):
        r = sampler.next_record()
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
    targets = {}
    for (d, t, c, s), p in sampler.mixture.probabilities().items():
        targets[t] = targets.get(t, 0) + p
    assert targets == pytest.approx({"parse_page": 0.5 * 0.5 + 0.5 / 3, "vqa": 0.25, "transcribe_table": 1 / 3})
    for t, want in targets.items():
        assert abs(tasks[t] / n - want) < 0.04, (t, tasks)


def test_report_prints_and_writes_target_and_realised_shares(corpus, tmp_path, capsys) -> None:
    report = mixture_report(DataConfig(path=corpus, eval_fraction=0.0), draws=4000)
    levels = report["levels"]
    assert set(levels) == {"domain", "task", "convention", "language"} and report["rows"] == 32
    assert levels["convention"]["json_layout"]["rows"] == 6 and levels["task"]["vqa"]["rows"] == 8
    for level in levels.values():
        assert sum(v["target"] for v in level.values()) == pytest.approx(1, abs=1e-5)
        assert sum(v["realised"] for v in level.values()) == pytest.approx(1, abs=1e-5)
        for v in level.values():
            assert abs(v["target"] - v["realised"]) < 0.03
    # docs: 1/2; within it parse_page 16/24, and zh is 4/16 of that; synth: transcribe_table's 2/8 all zh
    assert levels["language"]["zh"]["target"] == pytest.approx(0.5 * 16 / 24 * 4 / 16 + 0.5 * 2 / 8, abs=1e-5)
    out = tmp_path / "mix.json"
    assert main(["--report", "--path", corpus, "--draws", "500", "--set", "eval_fraction=0",
                 "--set", "convention_rates={plain: 1, '*': 1}", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "convention  plain" in printed and "target  realised" in printed
    written = json.loads(out.read_text())
    assert written["draws"] == 500 and written["levels"]["convention"]["plain"]["target"] > 0.1


def test_report_names_a_bad_set_key_in_one_line(corpus, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--report", "--path", corpus, "--set", "task_rate={vqa: 1}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "data.task_rate: unknown key" in err and "Traceback" not in err
