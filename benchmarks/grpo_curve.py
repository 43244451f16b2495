"""Issue 22: `make train`'s GRPO phase alone, from a checkpoint, with overrides: does the sampled reward move?

    python benchmarks/grpo_curve.py --checkpoint out/model/sft-robustness \\
        --set max_prompts=8 --set prompts_per_step=8 --set num_rollouts=8 [--eval-pages 40]

The GRPO block of ``--config`` (``configs/train.yaml``) with each ``--set KEY=VALUE`` (YAML values) applied,
run on one thread on that config's corpus exactly as ``model.train`` runs it (same prompt loading, same
``model.grpo.train_grpo``), from ``--checkpoint``. Prints one JSON line: the settings, CPU and wall seconds,
the reward curve of ``model.train.reward_curve`` (first-10 and last-10 mean sampled reward, ratio,
zero-advantage share), the greedy reward on the training prompts before and after (``model.grpo.mean_reward``),
and with ``--eval-pages`` the greedy reward on that many held-out eval pages of the same sources before and
after: a reward that rises on the training prompts only is memorised, not learned.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="model folder GRPO starts from (e.g. out/model/sft-robustness)")
    ap.add_argument("--config", default="configs/train.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a grpo key")
    ap.add_argument("--eval-pages", type=int, default=0, help="held-out eval pages of the GRPO sources to score")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from model.data import DataConfig
    from model.grpo import load_prompts, mean_reward, train_grpo
    from model.models import load
    from model.rewards import RewardPool
    from model.train import TrainRunConfig, reward_curve

    sets = [f"grpo.{s}" for s in args.set]
    cfg = TrainRunConfig.from_yaml(args.config, sets)
    g = cfg.grpo
    loaded = load(args.checkpoint)
    data = DataConfig(path=cfg.corpus, max_length=1 << 30, max_sample_tokens=1 << 30, eval_fraction=cfg.eval_fraction)
    prompts = load_prompts(cfg.corpus, loaded.processor, g, data=data)
    held = load_prompts(cfg.corpus, loaded.processor, replace(g, max_prompts=args.eval_pages or 1), split="eval",
                        data=data)[: args.eval_pages]
    pool = RewardPool(g.reward)
    try:
        measured = {"train_greedy_before": mean_reward(loaded, prompts[:32], g, pool, greedy=True)}
        if held:
            measured["eval_greedy_before"] = mean_reward(loaded, held, g, pool, greedy=True)
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            history = train_grpo(loaded, g, prompts, tmp, pool=pool)
        cpu, wall = time.process_time() - t_cpu, time.perf_counter() - t_wall
        measured["train_greedy_after"] = mean_reward(loaded, prompts[:32], g, pool, greedy=True)
        if held:
            measured["eval_greedy_after"] = mean_reward(loaded, held, g, pool, greedy=True)
    finally:
        pool.close()
    curve = reward_curve(history)
    print(json.dumps({"sets": args.set, "prompts": len(prompts), "eval_pages": len(held),
                      "grpo_cpu_s": round(cpu, 1), "grpo_wall_s": round(wall, 1),
                      **{k: round(v, 4) if isinstance(v, float) else v for k, v in curve.items()},
                      **{k: round(v, 4) for k, v in measured.items()},
                      "rewards": [round(h.reward_mean, 3) for h in history]}), flush=True)


if __name__ == "__main__":
    main()
