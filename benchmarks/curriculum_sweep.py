"""Issue 22: which tiny model and schedule learn to read the curriculum's first level, measured.

    python -m synth.curriculum --out out/curriculum          # the pages (once, ~1 min)
    python benchmarks/curriculum_sweep.py --steps 150 \\
        --runs 'kind=tiny,hidden=128,layers=4' 'kind=tiny-moe,hidden=128,layers=4' ...

Each run is a fresh subprocess on one thread (``torch.set_num_threads(1)``): build the tiny model,
run SFT on level-1 train pages (``alignment`` phase with the vision tower trained, packed rows),
then greedy-decode the level-1 eval pages (another seed) in batches. One JSON line per run: the
settings, parameters, CPU seconds of training, eval NLL, the image gap (NLL with another page's image minus
with the page's own: how much the model looks), edit distance and pass rate per test type, before
(untrained) and after. CPU seconds, not wall time, because the machine is shared.

Run keys: kind, hidden, layers, vision_hidden, vision_depth, rope_theta, mrope (M-RoPE section: frequencies of
time/height/width, e.g. ``2/4/10``), white_zero (1: white paper is pixel 0),
lr, vision_lr, steps, max_length,
shift_prob, warmup, level (domain ``curriculum-l<level>``), eval (pages), mix (levels trained on, equally
weighted, as digits: ``mix=01`` trains on levels 0 and 1 and evaluates ``level``; empty: ``level`` only),
w (the mix's level weights, ``/``-separated: ``mix=01,w=1/3`` samples level 1 three times as often as level 0),
at (``/``-separated steps at which to evaluate on the way, the run resuming from its checkpoint after each:
``at=1000/2000`` adds a ``curve``; the schedule is the full run's, so mid-run figures are at a higher lr).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {"kind": "tiny", "hidden": 128, "layers": 4, "vision_hidden": 64, "vision_depth": 2, "rope_theta": 1e6,
            "white_zero": 0, "lr": 3e-3,
            "vision_lr": 3e-3, "steps": 150, "max_length": 1024, "shift_prob": 0.0, "warmup": 10, "level": 1,
            "eval": 40, "mix": "", "w": "", "at": "", "mrope": ""}


def parse_run(text: str, steps: int | None) -> dict:
    run = dict(DEFAULTS)
    if steps is not None:
        run["steps"] = steps
    for part in filter(None, text.split(",")):
        key, value = part.split("=", 1)
        if key not in DEFAULTS:
            raise SystemExit(f"unknown run key {key!r}; known: {sorted(DEFAULTS)}")
        run[key] = type(DEFAULTS[key])(value)
    return run


def mix_rates(run: dict) -> dict[str, float]:
    levels = run["mix"] or str(run["level"])
    weights = [float(w) for w in run["w"].split("/")] if run["w"] else [1.0] * len(levels)
    if len(weights) != len(levels):
        raise SystemExit(f"w={run['w']!r} needs one weight per level of mix={levels!r}")
    return {f"curriculum-l{m}": w for m, w in zip(levels, weights)}


def one(run: dict, corpus: str, out: str) -> dict:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    from model.data import DataConfig, eval_samples
    from model.eval import evaluate, image_gap
    from model.models import build_tiny, n_params
    from model.optim import OptimConfig
    from model.sft import SFTConfig, train_sft

    loaded = build_tiny(run["kind"], seed=0, hidden=run["hidden"], layers=run["layers"],
                        vision_hidden=run["vision_hidden"], vision_depth=run["vision_depth"],
                        rope_theta=run["rope_theta"], white_zero=bool(run["white_zero"]),
                        mrope_section=[int(x) for x in run["mrope"].split("/")] if run["mrope"] else None)
    domain = f"curriculum-l{run['level']}"
    ev = DataConfig(path=corpus, eval_fraction=0.0)
    samples = [s for s in eval_samples(ev, loaded.processor) if s.domain == domain][: run["eval"]]

    def measure() -> dict:
        rep = evaluate(loaded, samples, 48, progress=False, batch_size=20)
        sm = rep.summary
        return {"nll": round(sm["nll"], 3), "image_gap": round(image_gap(loaded, samples), 3),
                "edit": round(sm["edit_distance"], 3),
                "pass": round(sm["unit_test_pass_rate"], 3), "pages_per_s": round(sm["pages_per_s"], 2),
                **{t: round(a["unit_test_pass_rate"], 3) for t, a in rep.by_test_type.items()}}

    before = measure()
    cfg = SFTConfig(phase="alignment", steps=run["steps"], log_every=0,
                    optim=OptimConfig(lr=run["lr"], vision_lr=run["vision_lr"], warmup_steps=run["warmup"],
                                      min_lr_ratio=0.05, train_vision=True),
                    data=DataConfig(path=corpus, eval_fraction=0.0, pack=True, max_length=run["max_length"],
                                    max_sample_tokens=min(1536, run["max_length"]), shift_prob=run["shift_prob"],
                                    domain_rates=mix_rates(run)))
    cpu, wall, history, curve, resume = 0.0, 0.0, [], [], None
    for stop in [int(a) for a in filter(None, run["at"].split("/"))] + [run["steps"]]:
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        history += train_sft(loaded, cfg, f"{out}/step{stop}", resume_from=resume, progress=False, stop_after=stop)
        cpu, wall = cpu + time.process_time() - t_cpu, wall + time.perf_counter() - t_wall
        resume = f"{out}/step{stop}"
        if stop < run["steps"]:
            curve.append({"step": stop, "train_cpu_s": round(cpu, 1), **measure()})
    after = measure()
    return {"run": run, "params": n_params(loaded.model), "train_cpu_s": round(cpu, 1), "train_wall_s": round(wall, 1),
            "loss_first": round(history[0].ce, 3), "loss_last": round(sum(h.ce for h in history[-10:]) / 10, 3),
            "response_tokens": sum(h.response_tokens for h in history), "before": before, "curve": curve,
            "after": after,
            "example": evaluate(loaded, samples[:1], 48, progress=False).rows[0].prediction}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", default=[""], help="comma-separated key=value overrides, one per run")
    ap.add_argument("--steps", type=int, help="steps of every run unless a run sets its own")
    ap.add_argument("--corpus", default="out/curriculum")
    ap.add_argument("--out", default="out/sweep")
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (each on one thread)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run = json.loads(args.one)
        print(json.dumps(one(run, args.corpus, args.out)), flush=True)
        return
    runs = [parse_run(r, args.steps) for r in args.runs]
    pending = list(enumerate(runs))
    active: list[subprocess.Popen] = []
    while pending or active:
        while pending and len(active) < args.parallel:
            i, run = pending.pop(0)
            active.append(subprocess.Popen([sys.executable, __file__, "--one", json.dumps(run), "--corpus", args.corpus,
                                            "--out", f"{args.out}/run{i}"], cwd=ROOT,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        proc = active.pop(0)
        out, _ = proc.communicate()
        print(out.strip().splitlines()[-1] if out.strip() else f"run failed: rc {proc.returncode}", flush=True)


if __name__ == "__main__":
    main()
