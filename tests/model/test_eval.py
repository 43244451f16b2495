"""model/eval.py: scoring a prediction, the reference likelihood, and the per-domain/type tables."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from model.eval import EvalRow, compare, response_nll, score_prediction, summarize
from model.models import build_tiny, rope_index


def test_score_prediction_runs_the_page_unit_tests():
    tests = [json.dumps({"type": "present", "text": "Revenue", "pdf": "a.pdf", "page": 1, "id": "p"}),
             json.dumps({"type": "absent", "text": "Draft", "pdf": "a.pdf", "page": 1, "id": "a"})]
    ed, results = score_prediction("Revenue grew. Draft", "Revenue grew.", tests)
    assert ed == pytest.approx(6 / 19)
    assert [(r["type"], r["passed"]) for r in results] == [("present", True), ("absent", False)]


def test_response_nll_is_the_teacher_forced_loss_on_response_tokens():
    loaded = build_tiny("tiny", seed=1)
    enc = loaded.processor.encode("Read the page.", Image.new("RGB", (120, 160), "white"), "Hello page")
    ids, mm = enc.input_ids[None], enc.mm_token_type_ids[None]
    labels = ids.clone()
    labels[:, : enc.prompt_len] = -100
    with torch.no_grad():
        out = loaded.model(input_ids=ids, mm_token_type_ids=mm, pixel_values=enc.pixel_values,
                           image_grid_thw=enc.image_grid_thw, position_ids=rope_index(loaded.model, ids, mm,
                                                                                     enc.image_grid_thw))
    logp = out.logits[0, :-1].log_softmax(-1)
    targets = ids[0, 1:]
    picked = -logp[torch.arange(len(targets)), targets][labels[0, 1:] != -100]
    assert response_nll(loaded, enc) == pytest.approx(picked.mean().item(), abs=1e-5)


@pytest.mark.parametrize("kind", ["tiny", "tiny-moe"])
def test_response_nll_in_chunks_equals_one_pass(kind, monkeypatch):
    """Long pages are scored a chunk of positions at a time (memory); the NLL is the same."""
    from model import eval as model_eval

    loaded = build_tiny(kind, seed=2)
    enc = loaded.processor.encode("Read the page.", Image.new("RGB", (120, 160), "white"), "Hello page " * 30)
    with torch.no_grad():
        whole = response_nll(loaded, enc)
        monkeypatch.setattr(model_eval, "NLL_CHUNK", 7)
        assert response_nll(loaded, enc) == pytest.approx(whole, abs=1e-5)


def test_summary_tables_and_verdict():
    def row(i, domain, ed, nll, passed):
        return EvalRow(f"r{i}", "s", domain, "parse_page", "p", "r", ed,
                       [{"type": "present", "passed": passed, "explanation": ""}], nll)

    before = summarize([row(0, "a", 0.8, 9.0, False), row(1, "b", 0.9, 9.0, False)])
    after = summarize([row(0, "a", 0.5, 3.0, True), row(1, "b", 0.9, 5.0, False)])
    assert after.by_domain["a"]["edit_distance"] == pytest.approx(0.5)
    assert after.summary["nll"] == pytest.approx(4.0)
    assert after.by_test_type["present"]["unit_test_pass_rate"] == pytest.approx(0.5)
    assert compare(before, after).startswith("trained model beats")
    assert compare(after, before).startswith("trained model does NOT beat")


def _strict(text: str):
    """JSON as a strict parser reads it: a bare NaN / Infinity raises."""
    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_eval_json_writes_null_for_nan():
    from model.eval import dumps, json_safe

    rows = [EvalRow("r0", "s", "a", "parse_page", "p", "r", 0.5, [], None)]  # no tests, no NLL: NaN rates
    report = summarize(rows)
    assert report.summary["unit_test_pass_rate"] != report.summary["unit_test_pass_rate"]  # NaN in memory
    doc = _strict(dumps(report.to_json()))
    assert doc["summary"]["unit_test_pass_rate"] is None and doc["summary"]["nll"] is None
    assert doc["by_domain"]["a"]["nll"] is None
    assert json_safe({"t": (1.0, float("inf"), float("-inf")), "k": [{"tau": float("nan")}]}) == \
        {"t": [1.0, None, None], "k": [{"tau": None}]}


def test_eval_scores_the_longest_pages_and_reports_skipped_ones(tmp_path):
    """No sample-token cap in evaluation: a page over DataConfig's 1536 tokens is scored; a page that is
    skipped all the same (a corrupt image) is counted in the summary with its unit tests."""
    from model.data import DataConfig
    from model.eval import main
    from model.models import build_tiny
    from tests.helpers import corpus_record, write_records

    long_text = " ".join(f"word{i}" for i in range(1200))
    tests = [json.dumps({"type": "present", "text": f"word{i}", "pdf": "l.pdf", "page": 1, "id": f"l{i}"})
             for i in range(3)]
    records = [corpus_record("docs-a", "docs", 0, split="eval"),
               corpus_record("docs-a", "docs", 1, split="eval", response=long_text, unit_tests=tests),
               corpus_record("docs-a", "docs", 2, split="eval", image=b"not an image", unit_tests=tests[:2])]
    processor = build_tiny("tiny", seed=0).processor
    assert processor.encode("Convert the page to markdown.", Image.new("RGB", (84, 56)), long_text).length > \
        DataConfig().max_sample_tokens
    corpus = write_records(tmp_path / "corpus", records, files=1)
    out = tmp_path / "eval.json"
    main(["--model", "tiny", "--corpus", corpus, "--max-new-tokens", "2", "--out", str(out)])
    doc = _strict(out.read_text())
    assert doc["summary"]["pages"] == 2 and doc["summary"]["tests"] == 4
    assert doc["summary"]["skipped_pages"] == 1 and doc["summary"]["skipped_tests"] == 2
    assert doc["summary"]["skipped"] == {"corrupt_image": {"pages": 1, "tests": 2}}


def test_evaluate_reads_one_batch_of_samples_at_a_time(monkeypatch):
    """Encoded eval pages hold ~2 MB of pixels each: evaluate must not list them all first."""
    import model.eval as ev

    loaded = build_tiny("tiny")
    image = Image.new("RGB", (56, 56), "white")
    produced = []

    def samples():
        for n in range(7):
            produced.append(n)
            encoded = loaded.processor.encode("Convert the page to Markdown.", image)
            yield type("S", (), dict(id=f"p{n}", source="s", domain="d", task="parse_page", response="a",
                                     unit_tests=[], convention="markdown", encoded=encoded))()

    seen = []
    real = ev.greedy_batch

    def spy(model, prompts, max_new_tokens):
        seen.append(len(produced))
        return real(model, prompts, max_new_tokens)

    monkeypatch.setattr(ev, "greedy_batch", spy)
    monkeypatch.setattr(ev, "response_nll", lambda loaded, encoded: 0.0)
    report = ev.evaluate(loaded, samples(), max_new_tokens=1, progress=False, batch_size=3)
    assert seen == [3, 6, 7] and len(report.rows) == 7
