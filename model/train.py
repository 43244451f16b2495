"""`make train`: the Jina-OCR-v1 post-training recipe end to end on the corpus shards.

Phases, each writing a checkpoint folder under ``out`` (default ``out/model/``):

1. ``untrained``: evaluate the freshly built model (the baseline the trained model must beat).
2. ``sft-alignment``: packed SFT with position shift, vision tower frozen (5.1).
3. ``sft-robustness``: unpacked SFT, vision tower unfrozen, degraded pages, hard domains upweighted (5.2).
4. ``grpo``: a short GRPO phase on synthetic pages with unit tests, ReMax baseline (5.3).
5. ``merged``: merge search over the SFT and GRPO checkpoints under an evaluation budget (5.5),
   then error analysis of the selected verifier (``errors.json``).
6. ``mtp-head``: FastMTP draft head fitted on the selected verifier (5.6), with the Table 8
   speculative-decoding table.

Config: ``configs/train.yaml`` (keys mirror the phase configs; defaults in code).
``python -m model.train --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.data import DataConfig, eval_samples
from model.eval import compare, evaluate, format_report
from model.models import build_tiny, load
from model.sft import SFTConfig, train_sft

log = logging.getLogger("model.train")


@dataclass(frozen=True)
class TrainRunConfig:
    model: str = "tiny-moe"
    corpus: str = "out/corpus"
    out: str = "out/model"
    seed: int = 0
    eval_limit: int | None = None
    eval_max_new_tokens: int = 192
    alignment: dict[str, Any] = field(default_factory=dict)
    robustness: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    merge: dict[str, Any] = field(default_factory=dict)
    mtp: dict[str, Any] = field(default_factory=dict)
    phases: tuple[str, ...] = ("alignment", "robustness", "grpo", "merge", "mtp")

    @classmethod
    def from_yaml(cls, path: str | Path | None, **overrides) -> "TrainRunConfig":
        raw = yaml.safe_load(Path(path).read_text()) if path else {}
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if "phases" in raw:
            raw["phases"] = tuple(raw["phases"])
        return cls(**raw)

    def sft(self, phase: str) -> SFTConfig:
        d = dict(getattr(self, phase))
        d["phase"] = phase
        d.setdefault("seed", self.seed)
        data = dict(d.get("data") or {})
        data.setdefault("path", self.corpus)
        data.setdefault("seed", self.seed)
        d["data"] = data
        return SFTConfig.from_dict(d)


def _eval(loaded, cfg: TrainRunConfig, title: str, out: Path):
    samples = eval_samples(DataConfig(path=cfg.corpus, seed=cfg.seed), loaded.processor, limit=cfg.eval_limit)
    report = evaluate(loaded, samples, cfg.eval_max_new_tokens)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report.to_json(), indent=2))
    print(format_report(report, title), flush=True)
    return report


def _grpo(loaded, cfg: TrainRunConfig, target: Path) -> dict[str, Any]:
    from model.grpo import GRPOConfig, load_prompts, train_grpo

    gcfg = GRPOConfig.from_dict({"seed": cfg.seed, **cfg.grpo})
    prompts = load_prompts(cfg.corpus, loaded.processor, gcfg)
    history = train_grpo(loaded, gcfg, prompts, target)
    first, last = history[0], history[-1]
    print(f"GRPO ({gcfg.baseline} baseline): {len(history)} steps on {len(prompts)} prompts, sampled reward "
          f"{first.reward_mean:.3f} -> {last.reward_mean:.3f}, zero-advantage prompts {last.zero_advantage_share:.0%}",
          flush=True)
    return {"steps": len(history), "prompts": len(prompts), "reward_first": first.reward_mean,
            "reward_last": last.reward_mean}


def _state(path: Path) -> dict:
    return {k: v.clone() for k, v in load(str(path)).model.state_dict().items()}


def _merge(loaded, cfg: TrainRunConfig, out: Path, base: Path, candidates: list[Path]) -> dict[str, Any]:
    """5.5: merge search over the candidate checkpoints, scored on the eval split."""
    import copy
    import threading

    from model.merge import make_evaluator, merge_search, write_merged

    mcfg = {"budget": 6, "workers": 2, "max_new_tokens": 64, **cfg.merge}
    base_state = _state(base)
    states = [_state(c) for c in candidates]
    samples = list(eval_samples(DataConfig(path=cfg.corpus, seed=cfg.seed), loaded.processor,
                                limit=cfg.eval_limit))
    local = threading.local()

    def score(state: dict) -> dict:
        # One model copy per worker thread; each evaluation loads the merged weights into it.
        if not hasattr(local, "loaded"):
            local.loaded = copy.deepcopy(loaded)
        local.loaded.model.load_state_dict(state)
        s = evaluate(local.loaded, samples, mcfg["max_new_tokens"], progress=False).summary
        rate = s["unit_test_pass_rate"]
        return {"unit_test_pass_rate": 0.0 if rate != rate else rate, "edit_distance": s["edit_distance"]}

    result = merge_search(base_state, states, make_evaluator(base_state, states, score), budget=mcfg["budget"],
                          workers=mcfg["workers"], seed=cfg.seed, log_path=out / "merge_log.jsonl")

    def save_fn(state: dict, path: Path) -> None:
        loaded.model.load_state_dict(state)
        loaded.model.save_pretrained(path)
        loaded.processor.save_pretrained(path)

    write_merged(result.best, base_state, states, out / "merged", save_fn)
    best = result.best
    print(f"merge search: {len(result.log)} evaluations over {[c.name for c in candidates]}, best "
          f"{best.candidate.method} {best.candidate.params} weights {best.candidate.weights}: {best.scores}",
          flush=True)
    return {"evaluations": len(result.log), "best": best.to_json()}


def _errors(cfg: TrainRunConfig, verifier: Path, target: Path) -> dict[str, Any]:
    from model.errors import analyze, write_report

    loaded = load(str(verifier))
    samples = eval_samples(DataConfig(path=cfg.corpus, seed=cfg.seed), loaded.processor, limit=cfg.eval_limit)
    report = evaluate(loaded, samples, cfg.eval_max_new_tokens, progress=False)
    analysis = analyze([asdict(r) for r in report.rows])
    write_report(analysis, target)
    modes = analysis.get("failure_modes", [])
    print(f"error analysis of {verifier.name}: {len(modes)} failure modes -> {target}", flush=True)
    for m in modes[:5]:
        print(f"  {m['name']}", flush=True)
    return {"failure_modes": len(modes), "path": str(target)}


def _mtp(cfg: TrainRunConfig, verifier: Path, target: Path) -> dict[str, Any]:
    """5.6: fit the FastMTP head on the frozen selected verifier, then the Table 8 decoding table."""
    from model.decode import bench_on_corpus, format_table
    from model.mtp import FitConfig, fit_for_checkpoint

    mcfg = dict(cfg.mtp)
    bench_tokens = int(mcfg.pop("bench_max_new_tokens", 128))
    fcfg = FitConfig.from_dict({"seed": cfg.seed, **mcfg})
    loaded = load(str(verifier))
    result = fit_for_checkpoint(loaded, cfg.corpus, fcfg, out=target)
    rows = bench_on_corpus(loaded, result.head, cfg.corpus, limit=cfg.eval_limit, max_new_tokens=bench_tokens)
    table = format_table(rows)
    (target / "decode_table.txt").write_text(table + "\n")
    print(f"FastMTP head on {verifier.name} (K={fcfg.depths}, {fcfg.steps} steps), speculative decoding on "
          f"the eval pages:\n{table}", flush=True)
    return {"table": [asdict(r) for r in rows]}


def run(cfg: TrainRunConfig) -> dict[str, Any]:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    results: dict[str, Any] = {}

    t = time.perf_counter()
    loaded = build_tiny(cfg.model, seed=cfg.seed) if cfg.model in ("tiny", "tiny-moe") else load(cfg.model)
    loaded.model.save_pretrained(out / "untrained")
    loaded.processor.save_pretrained(out / "untrained")
    before = _eval(loaded, cfg, f"untrained {loaded.source}", out / "untrained")
    timings["eval untrained"] = time.perf_counter() - t

    current = out / "untrained"
    for phase in ("alignment", "robustness"):
        if phase not in cfg.phases:
            continue
        t = time.perf_counter()
        target = out / f"sft-{phase}"
        history = train_sft(loaded, cfg.sft(phase), target)
        timings[f"sft {phase}"] = time.perf_counter() - t
        print(f"{phase} SFT: {len(history)} steps, loss {history[0].loss:.3f} -> {history[-1].loss:.3f}, "
              f"{sum(h.response_tokens for h in history) / max(1e-9, sum(h.response_tokens / h.tokens_per_s for h in history)):.0f} "
              f"response tokens/s", flush=True)
        current = target
    t = time.perf_counter()
    after = _eval(loaded, cfg, f"after SFT ({current.name})", current)
    timings["eval sft"] = time.perf_counter() - t
    verdict = compare(before, after)
    print(verdict, flush=True)
    results["sft"] = {"before": before.summary, "after": after.summary, "verdict": verdict}

    candidates = [current]
    if "grpo" in cfg.phases:
        t = time.perf_counter()
        results["grpo"] = _grpo(loaded, cfg, out / "grpo")
        candidates.append(out / "grpo")
        timings["grpo"] = time.perf_counter() - t
    verifier = current
    if "merge" in cfg.phases and len(candidates) > 1:
        t = time.perf_counter()
        results["merge"] = _merge(loaded, cfg, out, base=out / "sft-alignment", candidates=candidates)
        verifier = out / "merged"
        timings["merge search"] = time.perf_counter() - t
    t = time.perf_counter()
    results["errors"] = _errors(cfg, verifier, out / "errors.json")
    timings["error analysis"] = time.perf_counter() - t
    if "mtp" in cfg.phases:
        t = time.perf_counter()
        results["mtp"] = _mtp(cfg, verifier, out / "mtp-head")
        timings["mtp"] = time.perf_counter() - t
    results["verifier"] = str(verifier)
    results["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    (out / "summary.json").write_text(json.dumps(results, indent=2, default=str))
    print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="SFT (alignment, robustness), GRPO, merge search and FastMTP "
                                             "fitting on the corpus shards; writes out/model/.")
    ap.add_argument("--config", default="configs/train.yaml")
    ap.add_argument("--corpus", help="override corpus folder")
    ap.add_argument("--out", help="override output folder")
    ap.add_argument("--model", help="'tiny', 'tiny-moe' or a local checkpoint folder")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    cfg = TrainRunConfig.from_yaml(args.config, corpus=args.corpus, out=args.out, model=args.model)
    run(cfg)


if __name__ == "__main__":
    main()
