"""FastMTP speculative decoding on this CPU: the Jina-OCR-v1 Table 8 columns for k = 0..3.

    python benchmarks/mtp.py [--checkpoint DIR] [--corpus out/corpus] [--steps 300] [--threads 1]

Verifier: ``--checkpoint``, else the newest verifier ``make train`` wrote (out/model/merged, grpo,
sft-robustness, sft-alignment), else a tiny one trained here first with model.sft (alignment SFT,
``--sft-steps``) and kept in ``out/bench/mtp/verifier`` for the next run. A draft head is fitted on
it (model.mtp: self-distilled train split, ``--steps``), then every eval page (model.data's
held-out split) is decoded greedily at batch size 1 for each k in turn, so load changes on a
shared machine hit all k alike. Printed per k: output tok/s, speedup S against k = 0, acceptance
rate (tau - 1)/k, tau (tokens committed per verifier step, bonus included), step cost c = tau/S,
conditional acceptance a_d per depth, verifier forward passes per committed token (prefill
included), and whether every output equals the k = 0 output token for token.

Targets (issue 7): tau >= 2.5 at k = 3, a_1 >= 0.8, wall-clock speedup > 1 at the best k, and
lossless. Exits 1 if one is missed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from model.data import DataConfig, eval_samples  # noqa: E402
from model.decode import bench_table, format_table, generate  # noqa: E402
from model.models import load  # noqa: E402
from model.mtp import MTPConfig, fit_for_checkpoint  # noqa: E402
from model.records import cli_eval_fraction  # noqa: E402

TRAINED = ("merged", "grpo", "sft-robustness", "sft-alignment")


def find_verifier(args) -> str:
    if args.checkpoint:
        return args.checkpoint
    for name in TRAINED:
        if (REPO / "out" / "model" / name / "config.json").exists():
            return str(REPO / "out" / "model" / name)
    cached = REPO / "out" / "bench" / "mtp" / "verifier"
    if (cached / "config.json").exists():
        return str(cached)
    from model.models import build_tiny
    from model.sft import SFTConfig, train_sft
    from schemas.config import load as load_config

    print(f"no trained verifier found: alignment SFT of a tiny-moe model, {args.sft_steps} steps ...", flush=True)
    cfg = load_config(SFTConfig, {"phase": "alignment", "steps": args.sft_steps, "log_every": 0,
                                  "optim": {"lr": 3e-3, "warmup_steps": 10, "min_lr_ratio": 0.1},
                                  "data": {"path": args.corpus, "pack": True, "max_length": 1024,
                                           "max_sample_tokens": 1024, "shift_prob": 0.0}}, "sft")
    t = time.perf_counter()
    train_sft(build_tiny("tiny-moe", seed=0), cfg, cached, progress=False)
    print(f"  trained in {time.perf_counter() - t:.0f}s -> {cached}", flush=True)
    return str(cached)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="verifier checkpoint folder (default: make train's, else trained here)")
    ap.add_argument("--corpus", default=str(REPO / "out" / "corpus"))
    ap.add_argument("--steps", type=int, default=300, help="head fitting steps")
    ap.add_argument("--sft-steps", type=int, default=400, help="SFT steps when a verifier is trained here")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="per eval page when decoding")
    ap.add_argument("--distill-tokens", type=int, default=192, help="self-distilled response length")
    ap.add_argument("--limit", type=int, help="at most this many eval pages")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier timings on a shared CPU)")
    ap.add_argument("--out", help="write the table as JSON here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    source = find_verifier(args)
    loaded = load(source)
    loaded.model.eval()
    cfg = MTPConfig(steps=args.steps, max_new_tokens=args.distill_tokens)
    t = time.perf_counter()
    fraction = cli_eval_fraction(args.corpus)  # the corpus's own eval split when it has one, as the CLIs
    fit = fit_for_checkpoint(loaded, args.corpus, cfg, eval_fraction=fraction)
    print(f"verifier {source}\nhead: {fit.trainable} trainable parameters, fitted in "
          f"{time.perf_counter() - t:.0f}s (self-distill + {cfg.steps} steps), loss "
          f"{fit.history[0]['loss']:.3f} -> {fit.history[-1]['loss']:.3f}", flush=True)
    torch.set_num_threads(args.threads)
    prompts = [s.encoded for s in eval_samples(DataConfig(path=args.corpus, eval_fraction=fraction), loaded.processor,
                                               limit=args.limit)]
    eos = loaded.processor.eos_token_id
    outputs = [generate(loaded.model, [p], None, 0, args.max_new_tokens, eos).tokens[0] for p in prompts]
    n_tokens = sum(len(o) for o in outputs)
    print(f"verifier output on {len(prompts)} eval pages: {n_tokens} tokens, {len({t for o in outputs for t in o})} "
          f"distinct, {len({tuple(o) for o in outputs})} distinct page outputs (a low count means a degenerate "
          f"verifier that drafts trivially)")
    rows = bench_table(loaded.model, fit.head, prompts, (0, 1, 2, 3), args.max_new_tokens, eos,
                       loaded.processor.tokenizer.pad_token_id)
    print(f"eval pages, batch size 1, {torch.get_num_threads()} thread(s), max {args.max_new_tokens} new tokens:")
    print(format_table(rows))

    by_k = {r.k: r for r in rows}
    best = max(rows[1:], key=lambda r: r.speedup)
    checks = {
        "tau(k=3) >= 2.5": by_k[3].tau >= 2.5,
        "a_1(k=3) >= 0.8": by_k[3].conditional[0] >= 0.8,
        f"speedup > 1 at best k (k={best.k}, {best.speedup:.2f}x)": best.speedup > 1.0,
        "lossless at every k": all(r.lossless for r in rows),
    }
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'MISS'} {name}")
    if args.out:
        Path(args.out).write_text(json.dumps({"verifier": source, "rows": [asdict(r) for r in rows],
                                              "checks": checks}, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
