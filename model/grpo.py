"""GRPO under dense verifiable rewards with a ReMax baseline (Jina-OCR-v1 5.3, Table 3).

One step, for ``prompts_per_step`` pages:

1. Rollouts: ``num_rollouts`` sampled completions per page (``model.generate``, temperature and
   completion limit per run) and, for the ReMax baseline, one greedy completion.
2. Rewards: every completion is scored against the page's reference by ``model.rewards``
   (Table 4 product, floors, terms per dataset) in its worker pool with per-call timeouts.
3. Advantages, no reward scaling: ReMax ``A_i = r_i - r_greedy`` (Li et al. 2023; the default,
   because OCR rollouts are near-deterministic and dividing by a small group std amplifies noise),
   or the group mean ``A_i = r_i - mean_j r_j`` for comparison.
4. Update: log-probabilities recomputed with a forward pass; DAPO's clipped objective with
   clip-higher (``eps_low`` < ``eps_high``) and token-level normalisation over all completion
   tokens of the step, plus optional ``beta_kl`` times the k3 KL to a frozen reference model.
   Pages whose advantages are all zero carry no signal and are left out of the update (DAPO's
   dynamic sampling, without resampling); their share is logged.

Pure functions (``remax_advantages``, ``group_mean_advantages``, ``dapo_loss``, ``k3_kl``) hold
the math; ``rollout_phase``, ``reward_phase`` and ``update_phase`` are one step's three phases, and
``train_grpo`` is the loop over them. ``GRPOConfig`` is the ``grpo`` block of ``configs/train.yaml``.
Trains decoder and projector (``model.optim`` phase ``grpo``). ``python -m model.grpo --help``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from model.checkpoint import save_checkpoint
from model.data import DataConfig, Sample, SampleSource
from model.eval import prompt_inputs
from model.models import Loaded, without_suppressed
from model.optim import OptimConfig, make_optimizer, trainable
from model.processing import Encoded
from model.records import RECORD_COLUMNS, iter_records, uniform_sample
from model.rewards import RewardConfig, RewardItem, RewardPool, RewardResult
from model.sft import autocast_for
from schemas.config import ConfigError, option, read_yaml
from schemas.config import load as load_config

log = logging.getLogger(__name__)

BASELINES = ("remax", "group_mean")


# --------------------------------------------------------------------------- pure functions


def remax_advantages(sampled: torch.Tensor, greedy: torch.Tensor) -> torch.Tensor:
    """ReMax: A = r(x, a) - r(x, a_greedy), no scaling. ``sampled``: (P, G) rewards (or (P*G,),
    grouped by prompt); ``greedy``: (P,) rewards of each prompt's greedy rollout."""
    if sampled.dim() == 1:
        group = sampled.numel() // greedy.numel()
        return sampled - greedy.repeat_interleave(group)
    return sampled - greedy[:, None]


def group_mean_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """A_i = r_i - mean of its group of ``group`` rollouts (no std scaling, as Dr. GRPO).
    ``rewards``: (P*G,) grouped by prompt, or (P, G); the result has the same shape.

    A group whose rollouts all scored the same gets exactly 0 (the float mean of equal values can differ
    from them in the last bit, which made a page without signal count as live in ``update_phase``)."""
    grouped = rewards.reshape(-1, group)
    flat = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    centred = grouped.double() - grouped.double().mean(dim=1, keepdim=True)
    return torch.where(flat, 0.0, centred).to(rewards.dtype).reshape(rewards.shape)


def dapo_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              eps_low: float = 0.2, eps_high: float = 0.28) -> torch.Tensor:
    """DAPO clipped surrogate with clip-higher and token-level normalisation (Yu et al. 2025, eq. 8):

        r_t = exp(logp_new_t - logp_old_t)
        L = - sum_{i,t} min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i) / sum_{i,t} mask

    ``logp_*``, ``mask``: (N, T); ``advantages``: (N,) per sequence or (N, T) per token."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    mask = mask.to(logp_new.dtype)
    ratio = torch.exp(logp_new - logp_old)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    objective = torch.minimum(ratio * advantages, clipped * advantages)
    return -(objective * mask).sum() / mask.sum().clamp(min=1.0)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) (Schulman; GRPO eq. 4):
    exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def clip_shares(logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                eps_low: float, eps_high: float) -> tuple[float, float]:
    """Share of tokens where the low clip (ratio < 1 - eps_low, A < 0) or the high clip
    (ratio > 1 + eps_high, A > 0) is active, i.e. the token gives no gradient."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp_new)
    ratio = torch.exp(logp_new - logp_old)
    m = mask.bool()
    n = max(1, int(m.sum()))
    low = ((ratio < 1 - eps_low) & (advantages < 0) & m).sum()
    high = ((ratio > 1 + eps_high) & (advantages > 0) & m).sum()
    return int(low) / n, int(high) / n


# --------------------------------------------------------------------------- config and logs


@dataclass(frozen=True)
class GRPOConfig:
    """One GRPO run. ``lr`` is constant after ``warmup_steps``. Prompts come from records whose
    ``source`` (or ``domain``) is in ``sources`` and, with ``require_unit_tests``, that carry unit
    tests; ``max_prompts`` caps their number."""

    num_rollouts: int = option(8, help="G: sampled completions per page")
    baseline: Literal["remax", "group_mean"] = option(
        "remax", help="advantage baseline: remax (r - r_greedy) or group_mean (r - mean of the group)")
    temperature: float = option(1.0, help="sampling temperature of the rollouts (and of the log-probabilities)")
    top_p: float = option(1.0, help="nucleus sampling of the rollouts")
    max_completion_tokens: int = option(512, help="completion limit per rollout")
    lr: float = option(1e-6, help="learning rate, constant after warmup")
    warmup_steps: int = option(0, help="linear warmup steps")
    steps: int = option(50, help="GRPO steps")
    prompts_per_step: int = option(2, help="pages per step")
    updates_per_batch: int = option(1, help="mu: optimizer steps on one batch of rollouts (ratio != 1 from the 2nd)")
    beta_kl: float = option(0.0, help="weight of the k3 KL to a frozen reference model (0: no reference)")
    eps_low: float = option(0.2, help="DAPO lower clip")
    eps_high: float = option(0.28, help="DAPO upper clip (clip-higher)")
    max_grad_norm: float = option(1.0, help="gradient clipping norm")
    seed: int = option(0, help="prompt order and sampling (make train: the run's seed unless set)")
    sources: tuple[str, ...] = option(("jinaocrsynth",), help="prompts come from records of these sources or domains")
    require_unit_tests: bool = option(True, help="only records that carry unit tests")
    max_prompts: int | None = option(None, help="the first this many prompts in file order (unset: a seeded "
                                                "uniform sample of steps x prompts_per_step, the most a run draws)")
    log_every: int = option(1, help="log every this many steps (0: never)")
    reward: RewardConfig = option(default_factory=RewardConfig, help="reward terms, floors and worker pool")

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"grpo: baseline must be one of {BASELINES}, got {self.baseline!r}")
        if self.num_rollouts < 1 or (self.baseline == "group_mean" and self.num_rollouts < 2):
            raise ValueError("grpo: num_rollouts must be >= 1 (>= 2 for the group-mean baseline)")
        if self.temperature <= 0 or self.max_completion_tokens < 1 or self.prompts_per_step < 1:
            raise ValueError("grpo: temperature > 0, max_completion_tokens >= 1, prompts_per_step >= 1")
        if not 0 <= self.eps_low < 1 or self.eps_high < 0 or self.beta_kl < 0 or self.updates_per_batch < 1:
            raise ValueError("grpo: need 0 <= eps_low < 1, eps_high >= 0, beta_kl >= 0, updates_per_batch >= 1")
        if not 0 < self.top_p <= 1 or self.lr <= 0 or self.max_grad_norm <= 0:
            raise ValueError("grpo: need 0 < top_p <= 1, lr > 0, max_grad_norm > 0")
        if self.warmup_steps < 0 or self.log_every < 0 or (self.max_prompts is not None and self.max_prompts < 1):
            raise ValueError("grpo: need warmup_steps >= 0, log_every >= 0, max_prompts unset or >= 1")
        object.__setattr__(self, "sources", tuple(self.sources))


@dataclass
class GRPOStepLog:
    step: int
    loss: float
    reward_mean: float  # over the sampled rollouts
    reward_std: float
    greedy_reward_mean: float | None  # ReMax baseline only
    terms: dict[str, float]  # mean of each term over the sampled rollouts it applied to
    advantage_mean: float
    advantage_std: float
    advantage_min: float
    advantage_max: float
    zero_advantage_share: float  # prompts whose rollouts all have advantage 0
    clip_low_share: float
    clip_high_share: float
    kl: float | None
    completion_tokens_mean: float
    truncated_share: float  # rollouts that hit max_completion_tokens without end-of-turn
    reward_timeouts: int
    lr: float
    seconds: dict[str, float]


# --------------------------------------------------------------------------- prompts


def load_prompts(corpus: str | Path, processor, cfg: GRPOConfig, split: str = "train",
                 data: DataConfig | None = None) -> list[Sample]:
    """Training prompts from corpus shards: rows of ``cfg.sources`` (matched on source or domain)
    with unit tests when ``cfg.require_unit_tests``, in file order: the first ``cfg.max_prompts``, or when
    unset a seeded uniform sample of the ``steps x prompts_per_step`` a run can draw (only those are
    encoded, so memory does not grow with the corpus)."""
    # prompts are never packed, and a long reference is fine (only the prompt is encoded for rollouts)
    data = data or DataConfig(path=str(corpus), max_length=1 << 30, max_sample_tokens=1 << 30)

    def wanted(records: Iterable[dict]) -> Iterable[dict]:
        for r in records:
            if cfg.sources and r.get("source") not in cfg.sources and r.get("domain") not in cfg.sources:
                continue
            if cfg.require_unit_tests and not r.get("unit_tests"):
                continue
            yield r

    records = wanted(iter_records(corpus, split, RECORD_COLUMNS, data.eval_fraction))
    if cfg.max_prompts is None:  # a run draws at most steps x prompts_per_step: a uniform sample of that many
        records = iter(uniform_sample(records, cfg.steps * cfg.prompts_per_step, cfg.seed))
    out: list[Sample] = []
    for sample in SampleSource(processor, data, split, records=records):
        out.append(sample)
        if cfg.max_prompts is not None and len(out) >= cfg.max_prompts:
            break
    return out


# --------------------------------------------------------------------------- rollouts


@dataclass
class Rollouts:
    """Completions of one prompt: tokens right-padded, mask covering each completion up to and
    including its end-of-turn token."""

    tokens: torch.Tensor  # (G, T) long
    mask: torch.Tensor  # (G, T) bool
    texts: list[str]
    truncated: list[bool]


def _completions(out: torch.Tensor, prompt_len: int, eos: int, pad: int, processor) -> Rollouts:
    tokens = out[:, prompt_len:].clone()
    width = tokens.shape[1]
    is_eos = tokens == eos
    # index of the first end-of-turn, or the width when there is none (truncated)
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.tensor(width))
    mask = torch.arange(width)[None] <= first[:, None]
    tokens[~mask] = pad
    texts = [processor.decode(row[m].tolist()) for row, m in zip(tokens, mask)]
    return Rollouts(tokens, mask, texts, [bool(f >= width) for f in first])


@torch.no_grad()
def rollout(loaded: Loaded, encoded: Encoded, n: int, cfg: GRPOConfig, greedy: bool = False) -> Rollouts:
    """``n`` sampled completions (or one greedy) of the prompt, with ``model.generate``."""
    model, processor = loaded.model, loaded.processor
    device = next(model.parameters()).device
    inputs = prompt_inputs(encoded, device)
    sampling: dict[str, Any] = {"do_sample": False} if greedy else \
        {"do_sample": True, "temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": 0}
    out = model.generate(**inputs, **sampling, num_return_sequences=1 if greedy else n,
                         max_new_tokens=cfg.max_completion_tokens, eos_token_id=processor.eos_token_id,
                         pad_token_id=processor.tokenizer.pad_token_id)
    return _completions(out.cpu(), encoded.prompt_len, processor.eos_token_id,
                        processor.tokenizer.pad_token_id, processor)


def completion_logprobs(model: torch.nn.Module, encoded: Encoded, tokens: torch.Tensor, mask: torch.Tensor,
                        temperature: float = 1.0) -> torch.Tensor:
    """log pi(token_t | prompt, tokens_<t) for each completion token: (G, T). The logits are divided
    by the sampling temperature and the tokens ``generate`` suppresses (vision tokens) left out, so the
    probabilities are those the rollouts were drawn from (before top-p, which is not applied here, as in
    TRL). Padding positions (``mask`` False) are 0."""
    device = next(model.parameters()).device
    g, t = tokens.shape
    lp = encoded.prompt_len
    ids = torch.cat([encoded.input_ids[:lp].expand(g, lp), tokens], dim=1).to(device)
    attention = torch.cat([torch.ones(g, lp, dtype=torch.long), mask.long()], dim=1).to(device)
    mm = torch.cat([encoded.mm_token_type_ids[:lp].expand(g, lp), torch.zeros(g, t, dtype=torch.long)], 1)
    with autocast_for(device):
        out = model(input_ids=ids, attention_mask=attention, mm_token_type_ids=mm.to(device),
                    pixel_values=encoded.pixel_values.repeat(g, 1).to(device),
                    image_grid_thw=encoded.image_grid_thw.repeat(g, 1).to(device), logits_to_keep=t + 1)
    logits = without_suppressed(model, out.logits[:, :-1].float() / temperature)  # lp-1+k predicts token k
    picked = torch.log_softmax(logits, dim=-1).gather(-1, tokens.to(device)[..., None]).squeeze(-1)
    return torch.where(mask.to(device).bool(), picked, 0.0)  # a pad id that is suppressed would be -inf


def _pad_cat(rows: Sequence[torch.Tensor], value: float = 0.0) -> torch.Tensor:
    width = max(r.shape[1] for r in rows)
    return torch.cat([torch.nn.functional.pad(r, (0, width - r.shape[1]), value=value) for r in rows])


# --------------------------------------------------------------------------- scoring


def _items(sample: Sample, texts: Sequence[str]) -> list[RewardItem]:
    return [RewardItem(sample.response, t, sample.unit_tests, (sample.source, sample.domain), sample.convention)
            for t in texts]


def term_means(results: Sequence[RewardResult]) -> dict[str, float]:
    """Mean of each term over the results it applied to (left-out terms do not count)."""
    sums: dict[str, list[float]] = {}
    for r in results:
        for name, value in r.terms.items():
            if value is not None:
                sums.setdefault(name, []).append(value)
    return {name: float(np.mean(v)) for name, v in sums.items()}


def mean_reward(loaded: Loaded, prompts: Sequence[Sample], cfg: GRPOConfig, pool: RewardPool,
                samples_per_prompt: int = 8, greedy: bool = False) -> float:
    """Mean total reward of fresh rollouts on ``prompts`` (sampled, or greedy)."""
    loaded.model.eval()
    items: list[RewardItem] = []
    for s in prompts:
        r = rollout(loaded, s.encoded, 1 if greedy else samples_per_prompt, cfg, greedy=greedy)
        items += _items(s, r.texts)
    return float(np.mean([r.total for r in pool.score_many(items)]))


# --------------------------------------------------------------------------- loop


def train_grpo(loaded: Loaded, cfg: GRPOConfig, prompts: Sequence[Sample], out_dir: str | Path | None,
               pool: RewardPool | None = None, progress: bool = False) -> list[GRPOStepLog]:
    """Run ``cfg.steps`` GRPO steps on ``prompts`` (cycled in a seeded order); write the final
    checkpoint and ``grpo_log.jsonl`` to ``out_dir`` (None: write nothing). ``pool``: a reward
    pool to reuse (else one is started for the run with ``cfg.reward``)."""
    if not prompts:
        raise ValueError("grpo: no prompts")
    own_pool = pool is None
    pool = pool or RewardPool(cfg.reward)
    try:
        return _train(loaded, cfg, list(prompts), out_dir, pool, progress)
    finally:
        if own_pool:
            pool.close()


def _order(n: int, seed: int) -> Iterable[int]:
    rng = np.random.default_rng(seed)
    while True:
        yield from rng.permutation(n).tolist()


@dataclass
class StepRollouts:
    """Phase 1 of a step: the step's pages, ``num_rollouts`` sampled completions of each, and (ReMax)
    one greedy completion of each."""

    batch: list[Sample]
    groups: list[Rollouts]
    greedy: list[Rollouts]


@dataclass
class StepRewards:
    """Phase 2: the sampled rollouts' rewards (P, G), the greedy ones (ReMax), the advantages."""

    rewards: torch.Tensor
    greedy_rewards: torch.Tensor | None
    advantages: torch.Tensor
    sampled: list[RewardResult]
    timeouts: int


@dataclass
class StepUpdate:
    """Phase 3: what the policy update did (all zero when no page carried signal)."""

    loss: float
    kl: float | None
    clip_low: float
    clip_high: float
    live: int  # pages with a nonzero advantage, the only ones updated on
    lr: float  # the learning rate the step used


@dataclass
class Optimization:
    """The run's optimizer, schedule and (with ``beta_kl``) frozen reference model."""

    optimizer: torch.optim.Optimizer
    scheduler: Any
    reference: torch.nn.Module | None


def rollout_phase(loaded: Loaded, cfg: GRPOConfig, batch: list[Sample]) -> StepRollouts:
    loaded.model.eval()
    groups = [rollout(loaded, s.encoded, cfg.num_rollouts, cfg) for s in batch]
    greedy = [rollout(loaded, s.encoded, 1, cfg, greedy=True) for s in batch] if cfg.baseline == "remax" else []
    return StepRollouts(batch, groups, greedy)


def reward_phase(pool: RewardPool, cfg: GRPOConfig, rolled: StepRollouts) -> StepRewards:
    """Score every completion in the pool; advantages against the configured baseline."""
    batch, g = rolled.batch, cfg.num_rollouts
    items = [it for s, r in zip(batch, rolled.groups) for it in _items(s, r.texts)]
    items += [it for s, r in zip(batch, rolled.greedy) for it in _items(s, r.texts)]
    timeouts_before = pool.timeouts
    results = pool.score_many(items)
    sampled = results[: len(batch) * g]
    rewards = torch.tensor([r.total for r in sampled], dtype=torch.float32).reshape(len(batch), g)
    if cfg.baseline == "remax":
        greedy_rewards = torch.tensor([r.total for r in results[len(batch) * g:]], dtype=torch.float32)
        advantages = remax_advantages(rewards, greedy_rewards)
    else:
        greedy_rewards = None
        advantages = group_mean_advantages(rewards, g)
    return StepRewards(rewards, greedy_rewards, advantages, sampled, pool.timeouts - timeouts_before)


def update_phase(model: torch.nn.Module, cfg: GRPOConfig, opt: Optimization, rolled: StepRollouts,
                 advantages: torch.Tensor) -> StepUpdate:
    """``updates_per_batch`` optimizer steps of the DAPO loss (+ k3 KL) on the pages with signal, then
    one scheduler step."""
    model.train()
    batch, groups = rolled.batch, rolled.groups
    live = [i for i in range(len(batch)) if bool((advantages[i] != 0).any())]
    loss_value, kl_value, clip_low, clip_high = 0.0, None, 0.0, 0.0
    if live:
        masks = _pad_cat([groups[i].mask for i in live], value=False).bool()
        adv = advantages[live].reshape(-1).to(next(model.parameters()).device)
        masks = masks.to(adv.device)
        ref_logp = None
        if opt.reference is not None:
            with torch.no_grad():
                ref_logp = _pad_cat([completion_logprobs(opt.reference, batch[i].encoded, groups[i].tokens,
                                                         groups[i].mask, cfg.temperature) for i in live])
        old = None
        for _ in range(cfg.updates_per_batch):
            new = _pad_cat([completion_logprobs(model, batch[i].encoded, groups[i].tokens, groups[i].mask,
                                                cfg.temperature) for i in live])
            if old is None:
                old = new.detach()  # rollouts come from the current policy: ratio 1 on the first update
            loss = dapo_loss(new, old, adv, masks, cfg.eps_low, cfg.eps_high)
            if ref_logp is not None:
                kl = (k3_kl(new, ref_logp) * masks).sum() / masks.sum().clamp(min=1)
                loss = loss + cfg.beta_kl * kl
                kl_value = float(kl.detach())
            opt.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
            opt.optimizer.step()
            low, high = clip_shares(new.detach(), old, adv, masks, cfg.eps_low, cfg.eps_high)
            clip_low, clip_high = clip_low + low / cfg.updates_per_batch, clip_high + high / cfg.updates_per_batch
            loss_value += float(loss.detach()) / cfg.updates_per_batch
    lr = opt.optimizer.param_groups[0]["lr"]
    with warnings.catch_warnings():  # a step without an update still advances the schedule
        warnings.simplefilter("ignore", UserWarning)
        opt.scheduler.step()
    return StepUpdate(loss_value, kl_value, clip_low, clip_high, len(live), lr)


def _step_log(step: int, rolled: StepRollouts, scored: StepRewards, update: StepUpdate,
              seconds: dict[str, float]) -> GRPOStepLog:
    rewards, advantages, groups = scored.rewards, scored.advantages, rolled.groups
    lengths = [int(m.sum()) for r in groups for m in r.mask]
    return GRPOStepLog(
        step=step, loss=update.loss, reward_mean=float(rewards.mean()), reward_std=float(rewards.std(unbiased=False)),
        greedy_reward_mean=None if scored.greedy_rewards is None else float(scored.greedy_rewards.mean()),
        terms=term_means(scored.sampled), advantage_mean=float(advantages.mean()),
        advantage_std=float(advantages.std(unbiased=False)), advantage_min=float(advantages.min()),
        advantage_max=float(advantages.max()), zero_advantage_share=1 - update.live / len(rolled.batch),
        clip_low_share=update.clip_low, clip_high_share=update.clip_high, kl=update.kl,
        completion_tokens_mean=float(np.mean(lengths)),
        truncated_share=float(np.mean([t for r in groups for t in r.truncated])),
        reward_timeouts=scored.timeouts, lr=update.lr, seconds={k: round(v, 4) for k, v in seconds.items()})


def _timed(seconds: dict[str, float], name: str, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    seconds[name] = time.perf_counter() - t0
    return out


def _train(loaded: Loaded, cfg: GRPOConfig, prompts: list[Sample], out_dir: str | Path | None,
           pool: RewardPool, progress: bool) -> list[GRPOStepLog]:
    model = loaded.model
    torch.manual_seed(cfg.seed)
    optimizer, scheduler = make_optimizer(
        model, "grpo", OptimConfig(lr=cfg.lr, warmup_steps=cfg.warmup_steps, min_lr_ratio=1.0), cfg.steps)
    reference = copy.deepcopy(model).eval().requires_grad_(False) if cfg.beta_kl > 0 else None
    opt = Optimization(optimizer, scheduler, reference)
    log.info("GRPO: %d trainable parameters, %d prompts, %d steps, baseline %s", trainable(model), len(prompts),
             cfg.steps, cfg.baseline)
    order = _order(len(prompts), cfg.seed)
    history: list[GRPOStepLog] = []
    for step in range(cfg.steps):
        seconds: dict[str, float] = {}
        batch = [prompts[next(order)] for _ in range(cfg.prompts_per_step)]
        rolled = _timed(seconds, "rollout", rollout_phase, loaded, cfg, batch)
        scored = _timed(seconds, "reward", reward_phase, pool, cfg, rolled)
        update = _timed(seconds, "update", update_phase, model, cfg, opt, rolled, scored.advantages)
        entry = _step_log(step + 1, rolled, scored, update, seconds)
        history.append(entry)
        if progress or (cfg.log_every and (step + 1) % cfg.log_every == 0):
            log.info("grpo step %d reward %.4f (greedy %s) adv %.4f±%.4f zero-adv %.2f loss %.4f terms %s",
                     entry.step, entry.reward_mean, entry.greedy_reward_mean, entry.advantage_mean,
                     entry.advantage_std, entry.zero_advantage_share, entry.loss,
                     {k: round(v, 3) for k, v in entry.terms.items()})
    model.eval()
    if out_dir is not None:
        _save(Path(out_dir), loaded, cfg, opt, history)
    return history


def _save(out: Path, loaded: Loaded, cfg: GRPOConfig, opt: Optimization, history: list[GRPOStepLog]) -> None:
    save_checkpoint(out, loaded.model, loaded.processor, opt.optimizer, opt.scheduler,
                    {"step": cfg.steps, "phase": "grpo", "config": _jsonable(cfg)})
    with open(out / "grpo_log.jsonl", "w") as f:
        for h in history:
            f.write(json.dumps(asdict(h)) + "\n")


def _jsonable(cfg: GRPOConfig) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg), default=str))


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> None:
    from model.models import load_or_exit

    ap = argparse.ArgumentParser(prog="python -m model.grpo",
                                 description="GRPO with dense verifiable rewards (ReMax or group-mean baseline) "
                                             "on corpus pages; writes a checkpoint and grpo_log.jsonl.")
    ap.add_argument("--model", default="tiny", help="'tiny', 'tiny-moe' or a local checkpoint folder")
    ap.add_argument("--corpus", default="out/corpus", help="corpus folder with data/*.parquet")
    ap.add_argument("--config", help="YAML with GRPOConfig keys (reward: RewardConfig keys)")
    ap.add_argument("--out", required=True, help="checkpoint folder to write")
    ap.add_argument("--steps", type=int, help="override steps")
    ap.add_argument("--baseline", choices=BASELINES, help="override the baseline")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        raw: dict[str, Any] = (read_yaml(args.config) or {}) if args.config else {}
        for key, value in (("steps", args.steps), ("baseline", args.baseline)):
            if value is not None:
                raw[key] = value
        cfg = load_config(GRPOConfig, raw, "grpo")
    except (ConfigError, OSError) as exc:  # a bad key or value, a config file missing or not YAML
        print(f"model.grpo: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    loaded = load_or_exit(ap, args.model)
    prompts = load_prompts(args.corpus, loaded.processor, cfg)
    history = train_grpo(loaded, cfg, prompts, args.out)
    print(f"GRPO: {len(history)} steps on {len(prompts)} prompts, reward {history[0].reward_mean:.4f} -> "
          f"{history[-1].reward_mean:.4f}")


if __name__ == "__main__":
    from model.grpo import main as _main  # workers unpickle model.grpo objects, not __main__ ones

    _main()
