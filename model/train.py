"""`make train`: the Jina-OCR-v1 post-training recipe end to end on the corpus shards.

Phases, each writing a checkpoint folder under ``out`` (default ``out/model/``):

1. ``untrained``: evaluate the freshly built model (the baseline the trained model must beat).
2. ``sft-alignment``: packed SFT with position shift, vision tower frozen (5.1).
3. ``sft-robustness``: unpacked SFT, vision tower unfrozen, degraded pages, hard domains upweighted (5.2).
4. ``grpo``: a short GRPO phase on synthetic pages with unit tests, ReMax baseline (5.3).
5. ``merged``: merge search over the SFT and GRPO checkpoints under an evaluation budget (5.5), with this
   run's ``sft-alignment`` (``untrained`` when alignment does not run) as the base; then error analysis of
   the selected verifier (``errors.json``).
6. ``mtp-head``: FastMTP draft head fitted on the selected verifier (5.6), with the Table 8
   speculative-decoding table.

Config: ``configs/train.yaml``, a `TrainRunConfig` with one typed block per phase (defaults in code),
checked in full before any training. ``python -m model.train --help`` lists every key.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from model.data import DataConfig, Sample, eval_samples, uncapped
from model.decode import bench_on_corpus, format_table
from model.errors import analyze, write_report
from model.eval import compare, dumps, evaluate, format_report
from model.grpo import GRPOConfig, load_prompts, train_grpo
from model.merge import MergeConfig, make_evaluator, merge_search, write_merged
from model.models import ModelLoadError, build_tiny, load
from model.mtp import MTPConfig, fit_for_checkpoint
from model.records import shard_files
from model.sft import SFTConfig, train_sft
from schemas.config import ConfigError, describe, option, parse_sets, read_yaml
from schemas.config import load as load_config
from schemas.config import merge as merge_overrides

log = logging.getLogger("model.train")

Phase = Literal["alignment", "robustness", "grpo", "merge", "mtp"]
PHASES: tuple[str, ...] = get_args(Phase)


@dataclass(frozen=True)
class TrainRunConfig:
    """``configs/train.yaml``: the run and one typed block per phase, all checked before any training.

    Build it with `from_yaml` or `from_mapping`: they fill what a block leaves unset from the run
    (every phase's ``seed``, the SFT blocks' ``data.path`` and ``data.seed``, their ``phase``)."""

    model: str = option("tiny-moe", help="tiny (Qwen2.5-VL class), tiny-moe (GLM-4V-MoE class) or a checkpoint folder")
    corpus: str = option("out/corpus", help="corpus folder written by `make corpus` (SFT data.path unless set)")
    out: str = option("out/model", help="folder for every phase's checkpoint and the summary")
    seed: int = option(0, help="model init, evaluation split sampling, and every phase's seed unless the block sets it")
    eval_limit: int | None = option(None, help="evaluate on at most this many eval pages (unset: all)")
    eval_max_new_tokens: int = option(192, help="completion limit of the evaluations")
    eval_batch_size: int = option(16, help="eval pages decoded per batched greedy generate call")
    eval_fraction: float = option(0.1, help="share of 'train' rows held out as eval by id hash (0: only rows "
                                  "written as split 'eval', e.g. the curriculum's eval seed); every phase uses it")
    eval_corpus: str = option("", help="a second corpus (e.g. out/corpus) whose eval split joins every evaluation, "
                              "reported under its own domains (empty: none)")
    eval_corpus_fraction: float = option(0.1, help="share of eval_corpus's 'train' rows held out as its eval split "
                                         "(by id hash, as eval_fraction)")
    tiny_sizes: dict[str, Any] = option({}, help="tiny model sizes: hidden, layers, vision_hidden, vision_depth, "
                                        "rope_theta, mrope_section (model.models.tiny_config; empty: its defaults)")
    white_zero: bool = option(False, help="tiny model: normalise pixels so white paper is 0 "
                                          "(model.models.tiny_image_processor)")
    alignment: SFTConfig = option(default_factory=lambda: SFTConfig(phase="alignment"),
                                  help="5.1 alignment SFT: packed, vision tower frozen (model.sft.SFTConfig)")
    robustness: SFTConfig = option(default_factory=lambda: SFTConfig(phase="robustness"),
                                   help="5.2 robustness SFT: unpacked, degraded pages, vision tower trains")
    grpo: GRPOConfig = option(default_factory=GRPOConfig, help="5.3 GRPO on pages with unit tests (model.grpo)")
    merge: MergeConfig = option(default_factory=MergeConfig, help="5.5 merge search over SFT and GRPO checkpoints")
    mtp: MTPConfig = option(default_factory=MTPConfig, help="5.6 FastMTP head on the selected verifier (model.mtp)")
    phases: tuple[Phase, ...] = option(PHASES, help="the phases to run, of " + ", ".join(PHASES))

    def __post_init__(self) -> None:
        for name in ("alignment", "robustness"):
            if getattr(self, name).phase != name:
                raise ValueError(f"{name}.phase: must be {name!r} (the block's phase), got "
                                 f"{getattr(self, name).phase!r}")
        for name in ("eval_max_new_tokens", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.eval_limit is not None and self.eval_limit < 1:
            raise ValueError(f"eval_limit: must be >= 1 or unset (every eval page), got {self.eval_limit}")
        for name in ("eval_fraction", "eval_corpus_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        for name in ("alignment", "robustness"):  # one eval split for every phase: no SFT on the eval pages
            data = getattr(self, name).data
            if data.path == self.corpus and data.eval_fraction != self.eval_fraction:
                raise ValueError(f"{name}.data.eval_fraction: {data.eval_fraction} differs from the run's "
                                 f"eval_fraction {self.eval_fraction}; every phase holds out the same eval pages "
                                 "(set eval_fraction at the top of the config)")
        if "grpo" in self.phases and self.grpo.steps < 1:  # its reward curve reads the first and last step
            raise ValueError(f"grpo.steps: must be >= 1, got {self.grpo.steps}")
        if "merge" in self.phases:
            candidates = merge_candidates(self.phases)
            if len(candidates) < 2:
                raise ValueError(f"phases: merge needs at least two candidates, and phases {list(self.phases)} "
                                 f"give only {candidates} (base {merge_base(self.phases)}): add grpo to phases "
                                 "or drop merge")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], path: str = "train") -> "TrainRunConfig":
        """Every block loaded and checked (a typo fails here by its full path), run defaults filled in."""
        return load_config(cls, with_run_defaults(values, path), path)

    @classmethod
    def from_yaml(cls, path: str | Path | None, sets: Sequence[str] = (), **overrides) -> "TrainRunConfig":
        """The YAML file, then ``--set key=value`` overrides, then keyword overrides that are not None."""
        raw = (read_yaml(path) or {}) if path else {}
        raw = merge_overrides(raw, parse_sets(sets))
        raw.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(raw)


def sft_result(phases: Sequence[str]) -> str:
    """The checkpoint folder (under ``out``) the SFT phases of ``phases`` end in: untrained without SFT."""
    return next((f"sft-{p}" for p in ("robustness", "alignment") if p in phases), "untrained")


def merge_candidates(phases: Sequence[str]) -> list[str]:
    """The checkpoint folders the merge search combines: the SFT result and, when it runs, GRPO's."""
    return [sft_result(phases)] + (["grpo"] if "grpo" in phases else [])


def merge_base(phases: Sequence[str]) -> str:
    """theta_0 of the merge: the checkpoint every candidate of this run started from, this run's
    ``sft-alignment`` when alignment runs, else ``untrained`` (the run's initial model; an
    ``sft-alignment`` left in ``out`` by an earlier run is not this run's)."""
    return "sft-alignment" if "alignment" in phases else "untrained"


def with_run_defaults(values: Mapping[str, Any], path: str = "train") -> Mapping[str, Any]:
    """``values`` with the run's seed (and, for SFT, corpus and phase name) as each phase block's
    default: a key a block sets itself wins. Anything that is not a mapping is left for `load` to report."""
    if not isinstance(values, Mapping):
        return values
    out = dict(values)
    seed = out.get("seed", TrainRunConfig.seed)
    corpus = out.get("corpus", TrainRunConfig.corpus)
    eval_fraction = out.get("eval_fraction", TrainRunConfig.eval_fraction)
    for name in PHASES:
        block = out.get(name)
        block = {} if block is None else block
        if not isinstance(block, Mapping) or name == "merge":
            continue
        block = {"seed": seed, **block}
        if name in ("alignment", "robustness"):
            if block.get("phase", name) != name:
                raise ConfigError(f"{path}.{name}.phase: must be {name!r} (the block's phase), got {block['phase']!r}")
            block = {"phase": name, **block}
            data = block.get("data") or {}
            if isinstance(data, Mapping):
                block["data"] = {"path": corpus, "seed": seed, "eval_fraction": eval_fraction, **data}
        out[name] = block
    return out


def _eval_data(cfg: TrainRunConfig) -> DataConfig:
    return uncapped(DataConfig(path=cfg.corpus, seed=cfg.seed, eval_fraction=cfg.eval_fraction))


def run_eval_samples(cfg: TrainRunConfig, processor, limit: int | None = None,
                     sources: list | None = None) -> Iterator[Sample]:
    """The run's eval pages: the corpus's eval split, then ``eval_corpus``'s, at most ``limit`` in all; no
    sample-token cap (``uncapped``). The ``SampleSource``s reading them go to ``sources`` when given."""
    parts = [eval_samples(_eval_data(cfg), processor, sources=sources)]
    if cfg.eval_corpus:
        extra = DataConfig(path=cfg.eval_corpus, seed=cfg.seed, eval_fraction=cfg.eval_corpus_fraction)
        parts.append(eval_samples(uncapped(extra), processor, sources=sources))
    return itertools.islice(itertools.chain.from_iterable(parts), limit)


def _eval(loaded, cfg: TrainRunConfig, title: str, out: Path):
    sources: list = []
    samples = run_eval_samples(cfg, loaded.processor, limit=cfg.eval_limit, sources=sources)
    report = evaluate(loaded, samples, cfg.eval_max_new_tokens, batch_size=cfg.eval_batch_size, sources=sources)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(dumps(report.to_json(), indent=2))
    print(format_report(report, title), flush=True)
    return report


def _grpo(loaded, cfg: TrainRunConfig, target: Path) -> dict[str, Any]:
    gcfg = cfg.grpo
    data = uncapped(DataConfig(path=cfg.corpus, eval_fraction=cfg.eval_fraction))
    prompts = load_prompts(cfg.corpus, loaded.processor, gcfg, data=data)
    history = train_grpo(loaded, gcfg, prompts, target)
    curve = reward_curve(history)
    print(f"GRPO ({gcfg.baseline} baseline): {len(history)} steps on {len(prompts)} prompts, sampled reward "
          f"first-{curve['window']} mean {curve['first']:.3f} -> last-{curve['window']} mean {curve['last']:.3f} "
          f"({curve['ratio']:.2f}x), zero-advantage prompts {curve['zero_advantage_share']:.0%} of all steps",
          flush=True)
    return {"steps": len(history), "prompts": len(prompts), "reward_first": history[0].reward_mean,
            "reward_last": history[-1].reward_mean, "curve": curve,
            "rewards": [round(h.reward_mean, 4) for h in history]}


def reward_curve(history: Sequence, window: int = 10) -> dict[str, float]:
    """Mean sampled reward of the first and last ``window`` steps (fewer when the run is short) and
    the mean zero-advantage share: a GRPO phase that learns raises the second above the first."""
    w = max(1, min(window, len(history) // 2 or 1))
    first = sum(h.reward_mean for h in history[:w]) / w
    last = sum(h.reward_mean for h in history[-w:]) / w
    zero = sum(h.zero_advantage_share for h in history) / max(1, len(history))
    return {"window": w, "first": first, "last": last, "ratio": last / first if first > 0 else float("inf"),
            "zero_advantage_share": zero}


def _state(path: Path) -> dict:
    return {k: v.clone() for k, v in load(str(path)).model.state_dict().items()}


def _merge(loaded, cfg: TrainRunConfig, out: Path, base: Path, candidates: list[Path]) -> dict[str, Any]:
    """5.5: merge search over the candidate checkpoints (task vectors against ``base``), scored on the
    eval split."""
    mcfg = cfg.merge
    base_state = _state(base)
    states = [_state(c) for c in candidates]
    local = threading.local()

    def score(state: dict) -> dict:
        # One model copy per worker thread; each evaluation loads the merged weights into it.
        if not hasattr(local, "loaded"):
            local.loaded = copy.deepcopy(loaded)
        local.loaded.model.load_state_dict(state)
        # the eval pages streamed again for each evaluation: never all of them encoded at once
        # through this thread's own processor: a tokenizer call sets state on the tokenizer (split_special_tokens)
        samples = run_eval_samples(cfg, local.loaded.processor, limit=mcfg.max_pages or cfg.eval_limit)
        s = evaluate(local.loaded, samples, mcfg.max_new_tokens, progress=False,
                     batch_size=cfg.eval_batch_size).summary
        rate = s["unit_test_pass_rate"]
        return {"unit_test_pass_rate": 0.0 if rate != rate else rate, "edit_distance": s["edit_distance"]}

    result = merge_search(base_state, states, make_evaluator(base_state, states, score), budget=mcfg.budget,
                          workers=mcfg.workers, seed=cfg.seed, log_path=out / "merge_log.jsonl")

    def save_fn(state: dict, path: Path) -> None:
        loaded.model.load_state_dict(state)
        loaded.model.save_pretrained(path)
        loaded.processor.save_pretrained(path)

    write_merged(result.best, base_state, states, out / "merged", save_fn)
    best = result.best
    print(f"merge search: {len(result.log)} evaluations over {[c.name for c in candidates]}, base {base.name}:",
          flush=True)
    for ev in result.log:
        sc = ev.scores or {}
        print(f"  {ev.candidate.method:<16} weights {[round(w, 2) for w in ev.candidate.weights]} "
              f"{ev.candidate.params}: pass {sc.get('unit_test_pass_rate', float('nan')):.3f} "
              f"edit {sc.get('edit_distance', float('nan')):.3f} objective {ev.objective:.3f}", flush=True)
    print(f"  best {best.candidate.method} {best.candidate.params} weights {best.candidate.weights}: {best.scores}",
          flush=True)
    return {"evaluations": len(result.log), "base": str(base), "checkpoints": [str(c) for c in candidates],
            "best": best.to_json(), "candidates": [ev.to_json() for ev in result.log]}


def _errors(cfg: TrainRunConfig, verifier: Path, target: Path) -> dict[str, Any]:
    loaded = load(str(verifier))
    samples = run_eval_samples(cfg, loaded.processor, limit=cfg.eval_limit)
    report = evaluate(loaded, samples, cfg.eval_max_new_tokens, progress=False, batch_size=cfg.eval_batch_size)
    analysis = analyze([asdict(r) for r in report.rows])
    write_report(analysis, target)
    modes = analysis.get("failure_modes", [])
    print(f"error analysis of {verifier.name}: {len(modes)} failure modes -> {target}", flush=True)
    for m in modes[:5]:
        print(f"  {m['name']}", flush=True)
    return {"failure_modes": len(modes), "path": str(target)}


def _mtp(cfg: TrainRunConfig, verifier: Path, target: Path) -> dict[str, Any]:
    """5.6: fit the FastMTP head on the frozen selected verifier, then the Table 8 decoding table."""
    fcfg = cfg.mtp
    loaded = load(str(verifier))
    result = fit_for_checkpoint(loaded, cfg.corpus, fcfg, limit=fcfg.max_samples, out=target,
                                eval_fraction=cfg.eval_fraction)
    rows = bench_on_corpus(loaded, result.head, cfg.corpus, limit=fcfg.bench_pages or cfg.eval_limit,
                           max_new_tokens=fcfg.bench_max_new_tokens, eval_fraction=cfg.eval_fraction)
    table = format_table(rows)
    (target / "decode_table.txt").write_text(table + "\n")
    print(f"FastMTP head on {verifier.name} (K={fcfg.depths}, {fcfg.steps} steps), speculative decoding on "
          f"the eval pages:\n{table}", flush=True)
    return {"table": [asdict(r) for r in rows]}


def _build_model(cfg: TrainRunConfig):
    if cfg.model not in ("tiny", "tiny-moe"):
        return load(cfg.model)
    try:
        return build_tiny(cfg.model, seed=cfg.seed, white_zero=cfg.white_zero, **cfg.tiny_sizes)
    except (TypeError, ValueError) as exc:  # an unknown size key, a width the heads do not divide, ...
        raise ModelLoadError(f"tiny_sizes {cfg.tiny_sizes}: {exc}") from exc


def run(cfg: TrainRunConfig) -> dict[str, Any]:
    shard_files(cfg.corpus)  # FileNotFoundError naming it, before the output folder is made
    if cfg.eval_corpus:
        shard_files(cfg.eval_corpus)
    timings: dict[str, float] = {}
    results: dict[str, Any] = {}

    t = time.perf_counter()
    loaded = _build_model(cfg)  # ModelLoadError, before the output folder is made
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
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
        history = train_sft(loaded, getattr(cfg, phase), target)
        timings[f"sft {phase}"] = time.perf_counter() - t
        seconds = max(1e-9, sum(h.response_tokens / h.tokens_per_s for h in history))
        print(f"{phase} SFT: {len(history)} steps, loss {history[0].loss:.3f} -> {history[-1].loss:.3f}, "
              f"{sum(h.response_tokens for h in history) / seconds:.0f} response tokens/s", flush=True)
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
    if "merge" in cfg.phases:  # TrainRunConfig checked that it has two candidates
        t = time.perf_counter()
        results["merge"] = _merge(loaded, cfg, out, base=out / merge_base(cfg.phases), candidates=candidates)
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
    (out / "summary.json").write_text(dumps(results, indent=2, default=str))
    print("timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m model.train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="SFT (alignment, robustness), GRPO, merge search and FastMTP fitting on the corpus shards; "
                    "writes out/model/.",
        epilog="config keys (configs/train.yaml; --set KEY=VALUE):\n  " + "\n  ".join(describe(TrainRunConfig)))
    ap.add_argument("--config", default="configs/train.yaml", help="YAML with the keys below")
    ap.add_argument("--corpus", help="override corpus folder")
    ap.add_argument("--out", help="override output folder")
    ap.add_argument("--model", help="'tiny', 'tiny-moe' or a local checkpoint folder")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one config key, e.g. --set grpo.steps=2 (values are YAML)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = TrainRunConfig.from_yaml(args.config, args.set, corpus=args.corpus, out=args.out, model=args.model)
        run(cfg)
    except (ConfigError, ModelLoadError, FileNotFoundError) as exc:  # a bad key or value, a missing config,
        # corpus or checkpoint, a model that cannot be built or loaded
        print(f"model.train: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
