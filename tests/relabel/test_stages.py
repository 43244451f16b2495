"""The relabel, audit and preference stages against the real server (answers rewritten by the proxy where
a random-weight model cannot give them), their accounting, the cache and resuming."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from pipelines.local_runner import LocalRunner
from pipelines.relabel_stages import AuditStage, PreferenceStage, RelabelStage, loop_kind
from relabel.client import ClientConfig, ServerUnavailable
from relabel.prompts import parse_verdict
from relabel.stages import AuditConfig, PreferenceConfig, RelabelConfig
from schemas.deadletter import Dropped, RecordError
from schemas.page import validate
from schemas.unit_tests import MathTest, PresenceTest, unit_test_to_json
from tests.helpers import page_record
from tests.relabel.fault_proxy import prompt_text


def client(proxy, **kw) -> ClientConfig:
    return ClientConfig(base_url=proxy.base_url, backoff_s=0.05, max_backoff_s=0.2, timeout_s=30.0, **kw)


def records(n: int, **kw):
    return [page_record(id=f"id-{i}", source_id=f"doc-{i}", response=f"label {i}", instruction=f"Convert page {i}.",
                        **kw) for i in range(n)]


def test_relabel_compare_rejects_a_truncated_answer_and_keeps_the_label(proxy, tmp_path):
    stage = RelabelStage(RelabelConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8))
    [out] = stage(page_record(response="old label"))
    finding = out.quality["relabel"]
    assert out.response == "old label" and finding["rejected"] == "truncated"  # random weights never stop
    assert finding["counters"]["requests"] == 1 and finding["counters"]["prompt_tokens"] > 0


def test_relabel_replace_swaps_the_label_and_keeps_the_old_one(proxy, tmp_path):
    proxy.rewrite = lambda request: "# New label\n\nBetter text."
    cfg = RelabelConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), mode="replace", max_tokens=8)
    [out] = RelabelStage(cfg)(page_record(response="Old text."))
    finding = out.quality["relabel"]
    assert out.response == "# New label\n\nBetter text." and finding["previous"] == "Old text."
    assert 0 < finding["distance"] <= 1 and finding["rejected"] is None
    assert not validate(out)


def test_relabel_replace_rejects_a_label_that_fails_the_records_unit_tests(proxy, tmp_path):
    tests = [unit_test_to_json(PresenceTest(pdf="p.pdf", page=1, id="t1", type="present", text="Old text"))]
    proxy.rewrite = lambda request: "# New label\n\nBetter prose."
    cfg = RelabelConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), mode="replace", max_tokens=8)
    [out] = RelabelStage(cfg)(page_record(response="Old text.", unit_tests=tests))
    assert out.response == "Old text." and out.unit_tests == tests  # the label its tests were checked on
    assert out.quality["relabel"]["rejected"] == "fails_unit_tests"
    proxy.rewrite = lambda request: "# New label\n\nOld text, better."  # passes the test: replaces
    cfg = replace(cfg, cache_path=str(tmp_path / "other.sqlite"))  # (the first answer is cached)
    [out] = RelabelStage(cfg)(page_record(response="Old text.", unit_tests=tests))
    assert out.response == "# New label\n\nOld text, better." and out.quality["relabel"]["rejected"] is None


def test_relabel_replace_checks_a_math_test_by_rendering_in_the_runs_cache(proxy, tmp_path, monkeypatch):
    """The stage runs in an event loop, where Playwright's sync API (the math test's renderer) refuses to run:
    every answer needing a render failed its math test and was rejected. The renders go to <output>/_katex."""
    monkeypatch.setenv("PAGEMILL_CACHE", str(tmp_path / "home-cache"))
    math = unit_test_to_json(MathTest(pdf="p.pdf", page=1, id="m", type="math", math="E=mc^{2}"))  # not verbatim
    proxy.rewrite = lambda request: "Energy: \\(E = m c^2\\) holds."
    stage = RelabelStage(RelabelConfig(client=client(proxy), mode="replace", max_tokens=8))
    stage.bind_output(str(tmp_path / "out"))
    [out] = stage(page_record(response="Old: \\(E=mc^{2}\\).", unit_tests=[math]))
    assert out.quality["relabel"]["rejected"] is None and out.response == "Energy: \\(E = m c^2\\) holds."
    assert list((tmp_path / "out" / "_katex").iterdir()) and not (tmp_path / "home-cache").exists()


@pytest.mark.parametrize("content, reason", [("", "empty"), ("abc " * 300, "loop_exact")])
def test_relabel_rejects_empty_and_looping_labels(proxy, tmp_path, content, reason):
    proxy.rewrite = lambda request: content
    cfg = RelabelConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), mode="replace", max_tokens=8,
                        on_reject="drop")
    with pytest.raises(Dropped) as err:
        RelabelStage(cfg)(page_record(response="Old text."))
    assert err.value.reason == f"relabel_{reason}"
    assert err.value.counters["requests"] == 1 and err.value.counters["prompt_tokens"] > 0  # what it cost


def test_loop_detector_is_the_repeats_stages():
    assert loop_kind("abc " * 300) == "exact" and loop_kind("a normal label") is None


def test_audit_flags_or_drops_a_low_score(proxy, tmp_path):
    proxy.rewrite = lambda request: 'Verdict: {"score": 2, "issues": ["missing column"]}'
    cache = str(tmp_path / "c.sqlite")
    [out] = AuditStage(AuditConfig(client=client(proxy), cache_path=cache, max_tokens=8))(page_record())
    assert out.quality["audit"]["score"] == 2.0 and out.quality["audit"]["low"] is True
    assert out.quality["audit"]["issues"] == ["missing column"]
    with pytest.raises(Dropped, match="audit_low"):
        AuditStage(AuditConfig(client=client(proxy), cache_path=cache, max_tokens=8, action="drop"))(page_record())
    assert proxy.chat_requests == 1  # the second stage's verdict came from the cache


def test_garbage_json_from_the_judge_is_asked_once_more_then_dead_lettered(proxy, tmp_path):
    stage = AuditStage(AuditConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8))
    with pytest.raises(RecordError) as err:
        stage(page_record())  # the random model's answer is never JSON
    assert err.value.reason == "audit_unparseable" and proxy.chat_requests == 2


@pytest.mark.parametrize("text", ['{"score": 7}', '{"score": "4"}', '[1]', '{"score": 3, "issues": [1]}', "no",
                                  '{"verdict": {"score": 4}}', '{Page 3} {"score": 6, "issues": []}'])
def test_verdicts_are_validated(text):
    with pytest.raises(ValueError):
        parse_verdict(text)


@pytest.mark.parametrize("text, score", [
    ('{"score": 4, "issues": []}\nNote: the header {Page 3} is fine.', 4.0),
    ('{"score": 4, "issues": []}\n{"score": 1, "issues": ["a second opinion"]}', 4.0),
    ('<think>the label says {x} where the page says {y}</think>\n```json\n{"score": 2, "issues": ["x vs y"]}\n```',
     2.0),
    ('{"note": "not a verdict"} then {"score": 3, "issues": ["minor"]}', 3.0)])
def test_the_first_json_object_that_is_a_verdict_is_parsed(text, score):
    """The parser took the first "{" to the last "}" as one JSON document: any brace after the verdict, a second
    verdict or braces in a <think> block made a good verdict unparseable."""
    assert parse_verdict(text).score == score


def test_audit_reads_a_verdict_followed_by_other_text_with_braces(proxy, tmp_path):
    proxy.rewrite = lambda request: '{"score": 4, "issues": []}\nNote: the header {Page 3} is fine.'
    [out] = AuditStage(AuditConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8))(
        page_record())
    assert out.quality["audit"]["score"] == 4.0 and out.quality["audit"]["low"] is False and proxy.chat_requests == 1


def test_the_counters_are_every_request_sent_and_every_token_reported(proxy, tmp_path):
    """A 500, then an answer that is not a chat answer (its usage was still spent), then the answer: three
    requests and the tokens of both answers, not one request and the last answer's tokens."""
    answers = iter([{"not": "text"}, "A new label."])
    proxy.rewrite = lambda request: next(answers)
    proxy.faults = ["500"]
    cfg = RelabelConfig(client=client(proxy, max_attempts=3), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8,
                        mode="replace")
    stage = RelabelStage(cfg)
    [out] = stage(page_record(response="Old text."))
    counters = out.quality["relabel"]["counters"]
    assert out.response == "A new label." and proxy.chat_requests == 3 and proxy.forwarded == 2
    assert counters["requests"] == 3 and counters["cache_hits"] == 0
    assert counters["prompt_tokens"] == proxy.prompt_tokens > 0
    assert counters["completion_tokens"] == proxy.completion_tokens > 0
    proxy.faults, proxy.chat_requests = ["500"] * 3, 0
    with pytest.raises(RecordError) as err:  # a record that kept failing: its dead letter carries all three
        stage(page_record(id="other", instruction="Convert another page."))
    assert err.value.reason == "request_server_error" and err.value.counters["requests"] == 3 == proxy.chat_requests


def test_a_record_whose_id_is_not_ascii_is_relabeled(proxy, tmp_path):
    proxy.rewrite = lambda request: "A new label."
    cfg = RelabelConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8, mode="replace")
    [out] = RelabelStage(cfg)(page_record(id="página-1", response="Old text."))
    assert out.response == "A new label." and proxy.request_ids == ["p%C3%A1gina-1:relabel"]


def test_preference_pairs_only_for_a_clear_winner(proxy, tmp_path):
    def answers(request):
        text = prompt_text(request)
        if "Rubric" in text:
            return '{"score": 4, "issues": []}' if "refined text" in text else '{"score": 1, "issues": ["bad"]}'
        if "Draft:" in text:
            return "refined text"
        return None

    proxy.rewrite = answers
    cfg = PreferenceConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8,
                           judge_max_tokens=8, margin=2.0)
    degraded = page_record(response="draft text", quality={"augment": {"applied": ["blur"]}})
    source, pair = PreferenceStage(cfg)(degraded)
    assert source.quality["preference"]["pair"] is True and source.response == "draft text"
    assert pair.task == "preference" and pair.response == "refined text" and pair.rejected == "draft text"
    assert (pair.chosen_score, pair.rejected_score) == (4.0, 1.0) and not validate(pair)
    _pairs_load_with_datasets_and_model_reads_them(tmp_path, [source, pair])
    assert proxy.chat_requests == 3  # refine, judge draft, judge refinement
    untouched = page_record(id="other")
    assert PreferenceStage(cfg)(untouched) == [untouched]  # not degraded: passed on, nothing asked
    narrow = PreferenceConfig(client=client(proxy), cache_path=str(tmp_path / "c.sqlite"), max_tokens=8,
                              judge_max_tokens=8, margin=4.0)
    [only] = PreferenceStage(narrow)(page_record(response="draft text", quality={"augment": {"applied": ["x"]}}))
    assert only.quality["preference"]["pair"] is False and proxy.chat_requests == 3  # all cached


def _pairs_load_with_datasets_and_model_reads_them(tmp_path, recs):
    import datasets

    from model.records import iter_preference_pairs
    from tests.helpers import write_records

    root = write_records(tmp_path / "pairs", recs, files=1)
    ds = datasets.load_dataset("parquet", data_dir=f"{root}/data", split="train")
    assert sorted(ds["task"]) == ["parse_page", "preference"] and ds.features["chosen_score"].dtype == "float64"
    [row] = iter_preference_pairs(root, eval_fraction=0.0)
    assert (row["chosen"], row["rejected"], row["chosen_score"]) == ("refined text", "draft text", 4.0)
    assert row["prompt"] == recs[1].instruction and row["image"] == recs[1].image


def test_stage_start_fails_before_any_work_when_the_server_is_down(tmp_path):
    from relabel.serve import free_port

    cfg = RelabelConfig(client=ClientConfig(base_url=f"http://127.0.0.1:{free_port()}/v1", startup_timeout_s=1.0),
                        cache_path=str(tmp_path / "c.sqlite"))
    with pytest.raises(ServerUnavailable, match="does not answer"):
        RelabelStage(cfg)


def _run_cli(args):
    from pipelines.stage import main

    return main(args)


def test_stage_cli_exits_2_naming_the_url_when_the_model_list_is_not_one(tmp_path, capsys):
    """A /v1/models that answers 200 with HTML was a traceback, not the start-up error."""
    from tests.helpers import write_records
    from tests.relabel.scripted_server import ScriptedServer

    server = ScriptedServer(lambda ex: ex.raw(200, b"<html>hi</html>", content_type="text/html"))
    try:
        inp = write_records(tmp_path / "in", records(1), files=1)
        assert _run_cli(["relabel", "--input", inp, "--output", str(tmp_path / "out"), "--set",
                         f"client.base_url={server.base_url}"]) == 2
    finally:
        server.close()
    assert f"{server.base_url}/models" in capsys.readouterr().err and server.requests("POST") == []


def test_stage_cli_dead_letters_when_the_server_dies_then_a_rerun_resumes_and_a_third_sends_nothing(
        proxy, tmp_path, monkeypatch):
    from tests.helpers import write_records

    inp = write_records(tmp_path / "in", records(6), files=1)
    monkeypatch.setenv("OPENAI_BASE_URL", proxy.base_url)
    common = ["relabel", "--input", inp, "--set", "max_tokens=4", "--set", "tasks=[]", "--set", "client.max_attempts=2",
              "--set", "client.backoff_s=0.05", "--set", "client.concurrency=1"]
    proxy.down_after = 3  # the server dies after three answers
    assert _run_cli(common + ["--output", str(tmp_path / "run1")]) == 0
    first = json.loads((tmp_path / "run1" / "manifest.json").read_text())
    counts = first["stages"]["relabel"]["src"]
    assert counts["inputs"] == 6 and counts["out"] == 3 and counts["dead"] == {"request_connection_failed": 3}
    assert first["balanced"] and pq.read_table(tmp_path / "run1" / "dead_letter.parquet").num_rows == 3
    # every request sent is counted, the dead-lettered records' retries too: 3 answered + 3 x 2 attempts
    assert counts["counters"]["requests"] == 9 == proxy.chat_requests
    proxy.down_after, proxy.chat_requests = None, 0
    cache = str(tmp_path / "run1" / "_relabel" / "cache.sqlite")
    assert _run_cli(common + ["--output", str(tmp_path / "run2"), "--set", f"cache_path={cache}"]) == 0
    assert proxy.chat_requests == 3  # only what was not answered before
    second = json.loads((tmp_path / "run2" / "manifest.json").read_text())
    assert second["stages"]["relabel"]["src"]["out"] == 6 and second["balanced"]
    tokens = second["stages"]["relabel"]["src"]["counters"]
    assert tokens["requests"] == 3 and tokens["cache_hits"] == 3  # token accounting per source, in the manifest
    assert tokens["prompt_tokens"] > 3 * 10 and 3 <= tokens["completion_tokens"] <= 12
    proxy.chat_requests = 0
    assert _run_cli(common + ["--output", str(tmp_path / "run3"), "--set", f"cache_path={cache}"]) == 0
    assert proxy.chat_requests == 0


def test_beam_batches_balance_and_a_rerun_sends_nothing(proxy, tmp_path):
    import apache_beam as beam

    from pipelines.accounting import Envelope, Kind
    from pipelines.transforms import ApplyBatchStage
    from schemas.manifest import RunManifest

    cfg = AuditConfig(client=client(proxy, concurrency=4), cache_path=str(tmp_path / "c.sqlite"), max_tokens=4)
    proxy.rewrite = lambda request: '{"score": 1, "issues": []}' if "label 3" in prompt_text(request) else None
    stage = AuditStage(cfg)

    def run():
        _GOT.clear()
        with beam.Pipeline(runner=LocalRunner()) as p:
            (p | beam.Create([Envelope(Kind.ITEM, r) for r in records(10)])
             | beam.BatchElements(min_batch_size=4, max_batch_size=8)
             | beam.ParDo(ApplyBatchStage("audit", stage)) | beam.Map(_collect))
        return list(_GOT)

    out = run()
    manifest = RunManifest.from_events([p for k, p in out if k == Kind.EVENT], ["audit"])
    counts = manifest.stages["audit"]["src"]
    assert counts.inputs == 10 == counts.out + counts.n_dropped + counts.n_dead
    assert counts.out == 1 and counts.dead == {"audit_unparseable": 9}
    assert sum(1 for k, _ in out if k == Kind.DEAD) == 9 and sum(1 for k, _ in out if k == Kind.ITEM) == 1
    sent = proxy.chat_requests
    assert sent == 19  # 1 parseable verdict + 9 x (answer + one retry)
    run()
    assert proxy.chat_requests == sent  # every answer (parseable or not) is cached: the rerun asks nothing


_GOT: list = []


def _collect(element):  # module-level: Beam pickles it by reference, the in-process runner appends here
    _GOT.append(element)


def test_only_an_answer_that_stopped_by_itself_can_be_a_label():
    """olmOCR takes a page only when finish_reason is "stop": "content_filter" means content was left out."""
    from relabel.client import Answer
    from relabel.stages import rejection

    assert [rejection(Answer("A label.", reason), None) for reason in ("stop", "", "length", "content_filter")] == [
        None, None, "truncated", "finish_content_filter"]


@pytest.mark.parametrize("cls", [RelabelConfig, AuditConfig])
def test_a_misspelt_task_fails_at_start_up_naming_it(cls):
    """A typo used to match no record: the stage ran and changed nothing, without a word."""
    with pytest.raises(ValueError, match=r"unknown tasks \['parse_pag'\]; known: .*parse_page"):
        cls(tasks=("parse_pag",))
    assert cls(tasks=("parse_page",)).tasks == ("parse_page",)
