"""Checkpoint merging and a budgeted merge search (Jina-OCR-v1 5.5).

Merges act on plain state dicts (every key, so a draft head's weights merge too when present),
computing in float32 and casting back to each tensor's dtype; non-float tensors (step counters,
masks) are copied from the base. With tau_i = theta_i - theta_0:

- `linear`: theta = sum w_i theta_i / sum w_i
- `task_arithmetic`: theta = theta_0 + lam * sum w_i tau_i
- `ties`: trim each tau_i to its top-``density`` magnitudes, elect the sign of sum w_i tau_i, take the
  weighted mean over the entries that agree with it (disjoint mean), theta = theta_0 + lam * tau_m
- `dare`: drop delta entries with probability p, rescale the rest by 1/(1-p), then combine them as
  task arithmetic ("linear") or with TIES sign election ("ties")

`merge_search` treats merging as search under an evaluation budget: it evaluates a small grid over
methods in parallel, then repeatedly perturbs the best configurations so far (weights, lambda,
density, drop rate) with a step size that halves whenever a round brings no improvement, logging
every evaluation as one JSON line. ``python -m model.merge --help`` merges checkpoint folders.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from schemas.config import option

StateDict = dict[str, torch.Tensor]
METHODS = ("linear", "task_arithmetic", "ties", "dare")
PARAMS = {"linear": set(), "task_arithmetic": {"lam"}, "ties": {"density", "lam"},
          "dare": {"p", "seed", "combine", "lam"}}
MERGE_INFO = "merge.json"


@dataclass(frozen=True)
class MergeConfig:
    """The ``merge`` block of ``configs/train.yaml``: the merge search `make train` runs (5.5)."""

    budget: int = option(6, help="evaluations the search may spend, the initial grid included")
    workers: int = option(2, help="candidates evaluated in parallel (one model copy per worker thread)")
    max_new_tokens: int = option(64, help="completion limit when a candidate is scored on the eval split")
    max_pages: int | None = option(None, help="score candidates on the first this many eval pages (unset: "
                                   "the run's eval_limit)")

    def __post_init__(self) -> None:
        for name in ("budget", "workers", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_pages is not None and self.max_pages < 1:
            raise ValueError(f"max_pages must be >= 1 or unset, got {self.max_pages}")


class MergeError(ValueError):
    """State dicts that cannot be merged, or a candidate with bad parameters."""


# --------------------------------------------------------------------------- merge primitives

def _check(states: Sequence[StateDict], weights: Sequence[float], base: StateDict | None = None) -> list[float]:
    if not states:
        raise MergeError("no state dicts to merge")
    if len(weights) != len(states):
        raise MergeError(f"{len(weights)} weights for {len(states)} state dicts")
    if any(w < 0 for w in weights):
        raise MergeError(f"negative merge weight in {list(weights)}")
    ref = base if base is not None else states[0]
    for i, s in enumerate(states):
        if s.keys() != ref.keys():
            diff = sorted(set(s) ^ set(ref))[:5]
            raise MergeError(f"state dict {i} has different keys from the base: {diff}")
        for k, t in s.items():
            if t.shape != ref[k].shape:
                raise MergeError(f"{k}: shape {tuple(t.shape)} in state dict {i}, {tuple(ref[k].shape)} in base")
    return [float(w) for w in weights]


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def linear(states: Sequence[StateDict], weights: Sequence[float]) -> StateDict:
    """theta = sum_i w_i theta_i / sum_i w_i; non-float tensors from the first state dict."""
    w = _check(states, weights)
    total = sum(w)
    if total <= 0:
        raise MergeError("linear merge weights sum to 0")
    out: StateDict = {}
    for k, ref in states[0].items():
        if not ref.is_floating_point():
            out[k] = ref.clone()
            continue
        dt = _work_dtype(ref)
        acc = sum(wi * s[k].to(dt) for wi, s in zip(w, states))
        out[k] = (acc / total).to(ref.dtype)
    return out


def _delta_merge(base: StateDict, states: Sequence[StateDict], weights: Sequence[float], lam: float,
                 combine: Callable[[str, torch.Tensor, torch.Tensor], torch.Tensor]) -> StateDict:
    """theta_0 + lam * combine(key, taus (M, ...), weights (M,)) for every float key."""
    w = _check(states, weights, base)
    out: StateDict = {}
    for k, b in base.items():
        if not b.is_floating_point():
            out[k] = b.clone()
            continue
        dt = _work_dtype(b)
        b32 = b.to(dt)
        taus = torch.stack([s[k].to(dt) - b32 for s in states])
        wt = torch.tensor(w, dtype=dt, device=b.device)
        out[k] = (b32 + lam * combine(k, taus, wt)).to(b.dtype)
    return out


def _weighted_sum(key: str, taus: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (w.view(-1, *[1] * (taus.dim() - 1)) * taus).sum(0)


def task_arithmetic(base: StateDict, states: Sequence[StateDict], weights: Sequence[float],
                    lam: float = 1.0) -> StateDict:
    """theta = theta_0 + lam * sum_i w_i tau_i."""
    return _delta_merge(base, states, weights, lam, _weighted_sum)


def trim(tau: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the ceil(density * n) largest-magnitude entries of ``tau``, zero the rest (TIES step 1)."""
    if not 0.0 < density <= 1.0:
        raise MergeError(f"density must be in (0, 1], got {density}")
    n = tau.numel()
    k = min(n, math.ceil(density * n - 1e-9))
    if k >= n:
        return tau.clone()
    flat = tau.reshape(-1)
    keep = torch.zeros(n, dtype=torch.bool, device=tau.device)
    keep[flat.abs().topk(k).indices] = True
    return torch.where(keep, flat, torch.zeros_like(flat)).view_as(tau)


def _elect_disjoint_mean(taus: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """TIES steps 2-3: gamma = sign(sum_i w_i tau_i); weighted mean over entries whose sign is gamma."""
    wv = w.view(-1, *[1] * (taus.dim() - 1))
    weighted = wv * taus
    gamma = torch.sign(weighted.sum(0))
    agree = (torch.sign(weighted) == gamma) & (weighted != 0)
    divisor = (wv * agree).sum(0)
    summed = (weighted * agree).sum(0)
    return torch.where(divisor > 0, summed / divisor.clamp_min(1e-30), torch.zeros_like(summed))


def ties(base: StateDict, states: Sequence[StateDict], weights: Sequence[float], density: float = 0.2,
         lam: float = 1.0) -> StateDict:
    """TIES-merging: trim to ``density`` per tensor, elect signs, disjoint mean, theta_0 + lam * tau_m."""
    def combine(key, taus, w):
        trimmed = torch.stack([trim(t, density) for t in taus])
        return _elect_disjoint_mean(trimmed, w)

    return _delta_merge(base, states, weights, lam, combine)


def _dare_generator(seed: int, key: str, i: int) -> torch.Generator:
    # Seeded from (seed, key, model index), so a mask does not depend on the order of the keys.
    digest = hashlib.sha256(f"{seed}:{key}:{i}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def drop_and_rescale(tau: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """DARE: zero each entry with probability p, multiply the kept ones by 1/(1-p)."""
    if not 0.0 <= p < 1.0:
        raise MergeError(f"DARE drop rate must be in [0, 1), got {p}")
    keep = torch.rand(tau.shape, generator=generator) >= p
    return torch.where(keep.to(tau.device), tau / (1.0 - p), torch.zeros_like(tau))


def dare(base: StateDict, states: Sequence[StateDict], weights: Sequence[float], p: float = 0.5, seed: int = 0,
         combine: str = "linear", lam: float = 1.0) -> StateDict:
    """DARE deltas combined as task arithmetic (``linear``) or with TIES election (``ties``)."""
    if combine not in ("linear", "ties"):
        raise MergeError(f"DARE combine must be 'linear' or 'ties', got {combine!r}")
    mix = _weighted_sum if combine == "linear" else (lambda key, taus, w: _elect_disjoint_mean(taus, w))

    def drop_then_mix(key, taus, w):
        dropped = torch.stack([drop_and_rescale(t, p, _dare_generator(seed, key, i)) for i, t in enumerate(taus)])
        return mix(key, dropped, w)

    return _delta_merge(base, states, weights, lam, drop_then_mix)


# --------------------------------------------------------------------------- candidates

@dataclass(frozen=True)
class MergeCandidate:
    """One merge configuration: a method, its parameters and one weight per candidate checkpoint."""

    method: str
    params: dict = field(default_factory=dict)
    weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise MergeError(f"unknown merge method {self.method!r}; expected one of {METHODS}")
        extra = set(self.params) - PARAMS[self.method]
        if extra:
            raise MergeError(f"{self.method} takes {sorted(PARAMS[self.method])}, not {sorted(extra)}")
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if any(w < 0 for w in self.weights) or not self.weights:
            raise MergeError(f"weights must be non-empty and >= 0, got {self.weights}")

    def key(self) -> str:
        """Identity for de-duplication: method, rounded parameters and weights."""
        r = lambda v: round(v, 4) if isinstance(v, float) else v  # noqa: E731
        return json.dumps([self.method, {k: r(v) for k, v in sorted(self.params.items())},
                           [r(w) for w in self.weights]])

    def to_json(self) -> dict:
        return {"method": self.method, "params": dict(self.params), "weights": list(self.weights)}

    @classmethod
    def from_json(cls, d: dict) -> "MergeCandidate":
        return cls(d["method"], dict(d.get("params") or {}), tuple(d["weights"]))


def apply(candidate: MergeCandidate, base: StateDict, states: Sequence[StateDict]) -> StateDict:
    """The merged state dict that ``candidate`` describes."""
    p, w = candidate.params, candidate.weights
    if candidate.method == "linear":
        return linear(states, w)
    if candidate.method == "task_arithmetic":
        return task_arithmetic(base, states, w, lam=p.get("lam", 1.0))
    if candidate.method == "ties":
        return ties(base, states, w, density=p.get("density", 0.2), lam=p.get("lam", 1.0))
    return dare(base, states, w, p=p.get("p", 0.5), seed=p.get("seed", 0), combine=p.get("combine", "linear"),
                lam=p.get("lam", 1.0))


# --------------------------------------------------------------------------- search

@dataclass
class Evaluation:
    index: int
    round: int
    candidate: MergeCandidate
    scores: dict
    objective: float
    wall_s: float
    error: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["candidate"] = self.candidate.to_json()
        d["objective"] = self.objective if math.isfinite(self.objective) else None
        return d


@dataclass
class SearchResult:
    best: Evaluation
    log: list[Evaluation]


def default_objective(scores: dict) -> float:
    return float(scores["unit_test_pass_rate"]) - float(scores["edit_distance"])


def initial_grid(n: int) -> list[MergeCandidate]:
    """A small grid over methods with uniform weights, then the candidates alone, then more grid points."""
    u = tuple([1.0 / n] * n)
    grid = [MergeCandidate("linear", {}, u),
            MergeCandidate("ties", {"density": 0.5, "lam": 1.0}, u),
            MergeCandidate("dare", {"p": 0.5, "seed": 0, "combine": "ties", "lam": 1.0}, u),
            MergeCandidate("task_arithmetic", {"lam": 1.5}, u)]
    if n > 1:
        grid += [MergeCandidate("linear", {}, tuple(float(i == j) for j in range(n))) for i in range(n)]
    grid += [MergeCandidate("ties", {"density": 0.2, "lam": 1.0}, u),
             MergeCandidate("dare", {"p": 0.3, "seed": 0, "combine": "linear", "lam": 1.0}, u),
             MergeCandidate("task_arithmetic", {"lam": 0.75}, u)]
    return grid


def perturb(c: MergeCandidate, step: float, rng: random.Random) -> MergeCandidate:
    """A neighbour of ``c``: Gaussian steps on the weights (renormalised to sum 1) and parameters."""
    w = [max(0.0, x + rng.gauss(0.0, step)) for x in c.weights]
    total = sum(w)
    w = [round(x / total, 4) for x in w] if total > 0 else [round(1.0 / len(w), 4)] * len(w)
    p = dict(c.params)
    clip = lambda v, lo, hi: round(min(hi, max(lo, v)), 4)  # noqa: E731
    if "lam" in p:
        p["lam"] = clip(p["lam"] + rng.gauss(0.0, step), 0.1, 3.0)
    if "density" in p:
        p["density"] = clip(p["density"] + rng.gauss(0.0, step), 0.05, 1.0)
    if "p" in p:
        p["p"] = clip(p["p"] + rng.gauss(0.0, step), 0.0, 0.9)
    return MergeCandidate(c.method, p, tuple(w))


def merge_search(base: StateDict | None, states: Sequence[StateDict] | int,
                 evaluate: Callable[[MergeCandidate], dict], budget: int, workers: int = 2, seed: int = 0,
                 log_path: str | Path | None = None, objective: Callable[[dict], float] = default_objective,
                 grid: list[MergeCandidate] | None = None, step: float = 0.2) -> SearchResult:
    """Best merge found in at most ``budget`` calls of ``evaluate``, run ``workers`` at a time.

    ``states`` (or just their number) fixes how many weights a candidate has; ``evaluate`` builds and
    scores the merge itself (see `make_evaluator`). A failing evaluation is logged with its error and
    counts against the budget. The grid takes at most half the budget; each later round proposes
    ``workers`` neighbours of the best results so far, never repeating a configuration.
    """
    if budget < 1 or workers < 1:
        raise MergeError(f"budget and workers must be >= 1, got {budget}, {workers}")
    n = states if isinstance(states, int) else len(states)
    if not isinstance(states, int) and base is not None:
        _check(states, [1.0] * n, base)
    rng = random.Random(seed)
    seen: set[str] = set()
    log: list[Evaluation] = []
    log_file = None
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "w")

    def run_one(index: int, rnd: int, cand: MergeCandidate) -> Evaluation:
        t0 = time.perf_counter()
        try:
            scores = dict(evaluate(cand))
            return Evaluation(index, rnd, cand, scores, float(objective(scores)), time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - a broken merge is a result, not a crash of the search
            return Evaluation(index, rnd, cand, {}, -math.inf, time.perf_counter() - t0, f"{type(e).__name__}: {e}")

    def run_round(pool: ThreadPoolExecutor, rnd: int, cands: list[MergeCandidate]) -> None:
        futures = []
        for c in cands:
            seen.add(c.key())
            futures.append(pool.submit(run_one, len(log) + len(futures), rnd, c))
        for f in futures:  # submission order, so the log is the same whatever finishes first
            ev = f.result()
            log.append(ev)
            if log_file is not None:
                log_file.write(json.dumps(ev.to_json()) + "\n")
                log_file.flush()

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            start = [c for c in (grid or initial_grid(n)) if len(c.weights) == n]
            if not start:
                raise MergeError(f"no grid candidate has {n} weights")
            run_round(pool, 0, _unique(start, seen)[:max(1, math.ceil(budget / 2))])
            best = max(e.objective for e in log)
            rnd = 0
            while len(log) < budget:
                rnd += 1
                ranked = sorted(log, key=lambda e: (-e.objective, e.index))
                parents = [e.candidate for e in ranked if math.isfinite(e.objective)][:max(2, workers)]
                if not parents:
                    parents = [ranked[0].candidate]
                proposals: list[MergeCandidate] = []
                want = min(workers, budget - len(log))
                for j in range(want * 20):
                    if len(proposals) == want:
                        break
                    c = perturb(parents[j % len(parents)], step * (1 + j // want), rng)
                    if c.key() not in seen and c.key() not in {p.key() for p in proposals}:
                        proposals.append(c)
                if not proposals:
                    break  # the neighbourhood is exhausted
                run_round(pool, rnd, proposals)
                new_best = max(e.objective for e in log)
                if not new_best > best:
                    step = max(step / 2, 0.01)
                best = max(best, new_best)
    finally:
        if log_file is not None:
            log_file.close()
    best_eval = sorted(log, key=lambda e: (-e.objective, e.index))[0]
    return SearchResult(best_eval, log)


def _unique(cands: list[MergeCandidate], seen: set[str]) -> list[MergeCandidate]:
    out, keys = [], set(seen)
    for c in cands:
        if c.key() not in keys:
            keys.add(c.key())
            out.append(c)
    return out


def make_evaluator(base: StateDict, states: Sequence[StateDict],
                   score: Callable[[StateDict], dict]) -> Callable[[MergeCandidate], dict]:
    """An ``evaluate`` for `merge_search` that merges and hands the state dict to ``score``."""
    return lambda cand: score(apply(cand, base, states))


def write_merged(best: Evaluation | MergeCandidate, base: StateDict, states: Sequence[StateDict],
                 out_dir: str | Path, save_fn: Callable[[StateDict, Path], None]) -> Path:
    """Write the chosen merge via ``save_fn(state_dict, out_dir)`` plus ``merge.json`` describing it."""
    cand = best.candidate if isinstance(best, Evaluation) else best
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_fn(apply(cand, base, states), out)
    info = {"candidate": cand.to_json()}
    if isinstance(best, Evaluation):
        info.update(scores=best.scores, objective=best.objective if math.isfinite(best.objective) else None)
    (out / MERGE_INFO).write_text(json.dumps(info, indent=2, sort_keys=True))
    return out


# --------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="Merge checkpoint folders (model.models.load/save) with one method.",
        epilog="Example: python -m model.merge --base ckpt/base --models ckpt/a ckpt/b --method ties "
               "--density 0.2 --out ckpt/merged")
    ap.add_argument("--base", required=True, help="base checkpoint folder (or 'tiny'/'tiny-moe'); theta_0")
    ap.add_argument("--models", nargs="+", required=True, help="checkpoint folders to merge")
    ap.add_argument("--method", choices=METHODS, default="linear")
    ap.add_argument("--weights", nargs="+", type=float, help="one weight per model (default: uniform)")
    ap.add_argument("--lam", type=float, default=1.0, help="scale of the merged delta (not for linear)")
    ap.add_argument("--density", type=float, default=0.2, help="TIES: fraction of each delta kept")
    ap.add_argument("--p", type=float, default=0.5, help="DARE: drop rate")
    ap.add_argument("--combine", choices=("linear", "ties"), default="linear", help="DARE: how deltas combine")
    ap.add_argument("--seed", type=int, default=0, help="DARE: mask seed")
    ap.add_argument("--extra", nargs="*", default=[],
                    help="extra safetensors files present in every folder (e.g. a draft head) to merge alike")
    ap.add_argument("--out", required=True, help="folder for the merged checkpoint")
    args = ap.parse_args(argv)

    from safetensors.torch import load_file, save_file

    from model.models import load_or_exit, save

    n = len(args.models)
    params = {"linear": {}, "task_arithmetic": {"lam": args.lam}, "ties": {"density": args.density, "lam": args.lam},
              "dare": {"p": args.p, "seed": args.seed, "combine": args.combine, "lam": args.lam}}[args.method]
    cand = MergeCandidate(args.method, params, tuple(args.weights or [1.0 / n] * n))
    base = load_or_exit(ap, args.base)
    loaded = [load_or_exit(ap, m) for m in args.models]
    states = [m.model.state_dict() for m in loaded]
    target = loaded[0]

    def save_fn(merged: StateDict, out: Path) -> None:
        target.model.load_state_dict(merged)
        save(target.model, target.processor, out)

    write_merged(cand, base.model.state_dict(), states, args.out, save_fn)
    for name in args.extra:
        extra = apply(cand, load_file(str(Path(args.base) / name)), [load_file(str(Path(m) / name))
                                                                     for m in args.models])
        save_file(extra, str(Path(args.out) / name))
    print(f"merged {n} checkpoints with {cand.key()} into {args.out}")


if __name__ == "__main__":
    main()
