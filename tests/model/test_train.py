"""model/train.py: `make train`'s phases chained on a small corpus, each leaving its outputs."""

from __future__ import annotations

import json
from pathlib import Path

from model.records import assigned_split
from model.train import TrainRunConfig, run
from tests.helpers import corpus_record, write_records


def synth_record(n: int):
    text = f"Total revenue {n} grew while costs fell."
    tests = [json.dumps({"type": "present", "text": "revenue", "pdf": "s.pdf", "page": 1, "id": f"p{n}"}),
             json.dumps({"type": "absent", "text": "lorem", "pdf": "s.pdf", "page": 1, "id": f"a{n}"})]
    return corpus_record("jinaocrsynth", "synthetic-layout", n, response=text, unit_tests=tests)


def test_train_runs_every_phase_end_to_end(tmp_path, monkeypatch):
    records = [corpus_record("docs-a", "docs", n) for n in range(12)] + [synth_record(n) for n in range(6)]
    corpus = write_records(tmp_path / "corpus", records)
    cfg = TrainRunConfig.from_mapping(dict(
        model="tiny-moe", corpus=corpus, out=str(tmp_path / "model"), eval_max_new_tokens=8,
        alignment={"steps": 2, "data": {"max_length": 256, "max_sample_tokens": 200},
                   "regularizers": {"balance": 1e-3}},
        robustness={"steps": 1, "data": {"pack": False, "degrade_prob": 1.0, "max_length": 256,
                                         "max_sample_tokens": 200}},
        grpo={"num_rollouts": 2, "max_completion_tokens": 4, "prompts_per_step": 1, "steps": 1,
              "max_prompts": 100, "reward": {"workers": 1}},  # every prompt loaded (unset: steps x prompts_per_step)
        merge={"budget": 2, "workers": 2, "max_new_tokens": 4},
        mtp={"steps": 2, "batch_size": 2, "max_new_tokens": 8, "bench_max_new_tokens": 6},
    ))
    import threading

    import model.train as train_module

    used = []  # (thread, processor) of each eval-page stream
    real = train_module.run_eval_samples

    def spy(cfg, processor, *args, **kwargs):
        used.append((threading.current_thread(), id(processor)))
        return real(cfg, processor, *args, **kwargs)

    monkeypatch.setattr(train_module, "run_eval_samples", spy)
    results = run(cfg)
    # merge search streams eval pages in its worker threads, each through its own processor: a tokenizer call
    # sets state on the tokenizer (split_special_tokens), and a shared one lost pages their image tokens
    workers = {(thread, processor) for thread, processor in used if thread is not threading.main_thread()}
    main = {processor for thread, processor in used if thread is threading.main_thread()}
    assert workers and len({p for _, p in workers}) == len({t for t, _ in workers}) and not main & {
        p for _, p in workers}
    out = Path(cfg.out)
    for name in ("untrained", "sft-alignment", "sft-robustness", "grpo", "merged"):
        assert (out / name / "config.json").exists(), name
    assert json.loads((out / "sft-alignment" / "trainer_state.json").read_text())["state"]["step"] == 2
    assert len((out / "merge_log.jsonl").read_text().splitlines()) == 2
    assert "failure_modes" in json.loads((out / "errors.json").read_text())
    assert (out / "mtp-head" / "model.safetensors").exists()
    ks = [row["k"] for row in results["mtp"]["table"]]
    assert ks == [0, 1, 2, 3] and all(row["lossless"] for row in results["mtp"]["table"])
    synthetic_train = [r for r in records
                       if r.source == "jinaocrsynth" and assigned_split(r.id, "train", 0.1) == "train"]
    assert results["grpo"]["prompts"] == len(synthetic_train)  # only synthetic pages with unit tests
    assert set(results["sft"]) == {"before", "after", "verdict"}
    # strict JSON: the docs pages have no tests (pass rate NaN), the MTP table's k=0 row has no tau: null

    def refuse(name):
        raise ValueError(f"bare {name} in JSON")

    for path in (out / "summary.json", out / "untrained" / "eval.json", out / "sft-robustness" / "eval.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mtp"]["table"][0]["k"] == 0 and summary["mtp"]["table"][0]["tau"] is None
    assert summary["sft"]["before"]["skipped_pages"] == 0
