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
