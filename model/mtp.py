"""Fitting the FastMTP draft head on a frozen verifier (Jina-OCR-v1 5.6, eqs. 1, 4-5).

The head itself (`DraftHead`, its config and files) is `model.mtp_head`. `fit_head` runs the
verifier once per sample without gradients (post-norm states b and positions), then trains the
head on the grid of rows p and depths k of eq. 1: depth 1 reads b_p, depth k > 1 reads the
previous depth's output at row p - 1, prompt rows keep b_p at every depth, and every depth at row
p predicts token x_{p+2} and state b_{p+1}. By default the responses are replaced by the
verifier's own greedy outputs first (`self_distill`, decoded by `model.decode.generate`).

``MTPConfig`` is the ``mtp`` block of ``configs/train.yaml``. ``python -m model.mtp --help`` fits a
head for a checkpoint folder.
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from model.data import DataConfig, SampleSource
from model.decode import bench_on_corpus, format_table, generate
from model.models import ModelLoadError, load, rope_index
from model.mtp_head import DraftHead, HeadCache, save_head
from model.optim import lr_factor
from model.processing import Encoded, image_kwargs
from model.records import (
    EVAL_FRACTION_HELP,
    RECORD_COLUMNS,
    cli_eval_fraction,
    fraction_arg,
    iter_records,
    uniform_sample,
)
from schemas.config import option

log = logging.getLogger(__name__)


# -- training targets ------------------------------------------------------------------------------

@dataclass
class VerifierTrace:
    """One sample as the frozen verifier saw it: tokens, post-norm states b, 1-D positions."""

    input_ids: torch.Tensor  # (L,)
    states: torch.Tensor  # (L, d), b_p = hidden_states[-1] (after the final norm)
    positions: torch.Tensor  # (L,), temporal row of the M-RoPE ids
    prompt_len: int


@torch.no_grad()
def trace(model: nn.Module, sample: Encoded) -> VerifierTrace:
    """One verifier forward pass over a full sample (prompt and response)."""
    device = next(model.parameters()).device
    ids = sample.input_ids[None].to(device)
    mm = sample.mm_token_type_ids[None].to(device)
    images = image_kwargs(sample.pixel_values, sample.image_grid_thw, device)
    pos = rope_index(model, ids, mm, images.get("image_grid_thw"))
    out = model(input_ids=ids, **images, mm_token_type_ids=mm, position_ids=pos, output_hidden_states=True)
    return VerifierTrace(ids[0], out.hidden_states[-1][0].detach(), pos[0, 0], sample.prompt_len)


@dataclass
class GridBatch:
    """Right-padded traces for the depth grid of eq. 1."""

    input_ids: torch.Tensor  # (B, L)
    next_tokens: torch.Tensor  # (B, L): x_{p+1}
    states: torch.Tensor  # (B, L, d): b_p
    positions: torch.Tensor  # (B, L)
    prompt_rows: torch.Tensor  # (B, L) bool: p < prompt_len
    loss_rows: torch.Tensor  # (B, L) bool: prompt_len - 1 <= p <= len - 3


def collate(traces: list[VerifierTrace]) -> GridBatch:
    """Rows whose target x_{p+2} is a response token a draft can propose enter the loss: the
    first response token x_P is always the verifier's own, so the earliest is p = P - 1 (the
    first draft chain starts there); p + 2 must exist."""
    B, L, d = len(traces), max(t.input_ids.shape[0] for t in traces), traces[0].states.shape[-1]
    dev = traces[0].states.device
    ids = torch.zeros(B, L, dtype=torch.long, device=dev)
    states = torch.zeros(B, L, d, dtype=traces[0].states.dtype, device=dev)
    pos = torch.zeros(B, L, dtype=torch.long, device=dev)
    prompt = torch.zeros(B, L, dtype=torch.bool, device=dev)
    rows = torch.zeros(B, L, dtype=torch.bool, device=dev)
    for i, t in enumerate(traces):
        n = t.input_ids.shape[0]
        ids[i, :n], states[i, :n], pos[i, :n] = t.input_ids, t.states, t.positions
        prompt[i, :t.prompt_len] = True
        rows[i, max(0, t.prompt_len - 1):max(0, n - 2)] = True
    nxt = torch.zeros_like(ids)
    nxt[:, :-1] = ids[:, 1:]
    return GridBatch(ids, nxt, states, pos, prompt, rows)


def grid_forward(head: DraftHead, batch: GridBatch, depths: int) -> list[torch.Tensor]:
    """u^(k) for k = 1..K over all rows, with the state shift of eq. 1:
    a_p^(1) = b_p; a_p^(k) = u_{p-1}^(k-1) (k > 1), except prompt rows, which keep b_p.

    Rows before the shortest prompt of the batch read b_p and attend only to such rows, so their
    outputs are the same at every depth: they run once and serve every depth as a KV prefix."""
    split = int(batch.prompt_rows.sum(1).min())
    prefix = HeadCache()
    u0 = head(batch.next_tokens[:, :split], batch.states[:, :split], batch.positions[:, :split], prefix) \
        if split else batch.states[:, :0]
    tokens, base, pos = batch.next_tokens[:, split:], batch.states[:, split:], batch.positions[:, split:]
    prompt = batch.prompt_rows[:, split:, None]
    a = base
    outs = []
    for _ in range(depths):
        u = head(tokens, a, pos, HeadCache(prefix.k, prefix.v, prefix.valid))
        outs.append(torch.cat([u0, u], dim=1))
        before = u0[:, -1:] if split else batch.states[:, :1]  # u_{split-1}, the same at every depth
        a = torch.where(prompt, base, torch.cat([before, u[:, :-1]], dim=1))
    return outs


# -- objective (5.6) -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LossWeights:
    """Eq. 5: the weights of the three terms and the depth decay of alpha_k."""

    ce: float = option(0.85, help="weight of the cross-entropy on x_{p+2} (eq. 4)")
    kl: float = option(0.45, help="weight of KL(Q || P) to the verifier's next-token distribution")
    mse: float = option(0.45, help="weight of ||u - b_{p+1}||^2, the state regression")
    beta: float = option(0.6, help="depth decay: alpha_k = beta^(k-1), normalised over the depths")

    def __post_init__(self) -> None:
        for name in ("ce", "kl", "mse"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


def depth_weights(depths: int, beta: float = 0.6) -> list[float]:
    """alpha_k = beta^(k-1) / sum_r beta^(r-1) (5.6)."""
    raw = [beta ** (k - 1) for k in range(1, depths + 1)]
    return [r / sum(raw) for r in raw]


@dataclass
class MTPLoss:
    total: torch.Tensor
    ce: list[float]  # per depth, eq. 4
    kl: list[float]
    mse: list[float]


def mtp_loss(draft_logits: list[torch.Tensor], draft_states: list[torch.Tensor], target_tokens: torch.Tensor,
             target_states: torch.Tensor, target_logits: torch.Tensor, w: LossWeights = LossWeights()) -> MTPLoss:
    """Eq. 5 over N valid rows. Per depth k: ``draft_logits[k]`` (N, V) = l^(k), ``draft_states[k]``
    (N, d) = u^(k). Targets shared by all depths: x_{p+2} (N,), b_{p+1} (N, d), and the verifier's
    logits W_lm b_{p+1} (N, V) for Q. Targets are detached here."""
    target_states = target_states.detach()
    with torch.no_grad():
        log_q = F.log_softmax(target_logits.detach().float(), dim=-1)
        q = log_q.exp()
        q_log_q = (q * log_q).sum(-1)  # -H(Q): KL(Q || P) = sum Q log Q - sum Q log P
    alphas = depth_weights(len(draft_logits), w.beta)
    total = target_states.new_zeros((), dtype=torch.float32)
    ce_k, kl_k, mse_k = [], [], []
    for alpha, logits, u in zip(alphas, draft_logits, draft_states):
        log_p = F.log_softmax(logits.float(), dim=-1)
        ce = F.nll_loss(log_p, target_tokens)  # eq. 4: E_p[-log P(x_{p+2})]
        kl = (q_log_q - (q * log_p).sum(-1)).mean()  # E_p[KL(Q || P)]
        mse = (u.float() - target_states.float()).pow(2).sum(-1).mean()  # E_p ||u - b_{p+1}||^2
        total = total + alpha * (w.ce * ce + w.kl * kl + w.mse * mse)
        ce_k.append(ce.detach().item())
        kl_k.append(kl.detach().item())
        mse_k.append(mse.detach().item())
    return MTPLoss(total, ce_k, kl_k, mse_k)


def batch_loss(head: DraftHead, batch: GridBatch, depths: int, w: LossWeights = LossWeights()) -> MTPLoss:
    outs = grid_forward(head, batch, depths)
    b, r = batch.loss_rows, batch.loss_rows.nonzero(as_tuple=True)
    rows_i, rows_p = r
    target_tokens = batch.input_ids[rows_i, rows_p + 2]
    target_states = batch.states[rows_i, rows_p + 1]
    with torch.no_grad():
        target_logits = head.logits(target_states)
    states = [u[b] for u in outs]
    return mtp_loss([head.logits(u) for u in states], states, target_tokens, target_states, target_logits, w)


# -- data -------------------------------------------------------------------------------------------

@torch.no_grad()
def self_distill(model: nn.Module, samples: list[Encoded], eos_token_id: int, max_new_tokens: int = 128,
                 pad_token_id: int = 0, batch_size: int = 8) -> list[Encoded]:
    """The same prompts with the verifier's own greedy outputs as responses (FastMTP's data).
    Decoded in batches by `model.decode.generate` at k = 0, which is plain greedy decoding."""
    out = []
    for i in range(0, len(samples), batch_size):
        group = samples[i:i + batch_size]
        result = generate(model, group, None, 0, max_new_tokens, eos_token_id, pad_token_id)
        for s, toks in zip(group, result.tokens):
            P = s.prompt_len
            response = torch.tensor(toks, dtype=torch.long)
            out.append(Encoded(torch.cat([s.input_ids[:P], response]), s.pixel_values, s.image_grid_thw,
                               torch.cat([s.mm_token_type_ids[:P], torch.zeros_like(response)]), P))
    return out


# -- fitting ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MTPConfig:
    """The ``mtp`` block: draft-head fitting (Table 3: lr 1e-4 to 5e-4 for the 3B model; the tiny
    one takes more) and the decoding table `make train` prints after it."""

    depths: int = option(3, help="K: recursive steps of the shared block (drafts per speculative step)")
    steps: int = option(300, help="optimizer steps")
    batch_size: int = option(8, help="samples per step")
    lr: float = option(2e-3, help="peak learning rate (AdamW)")
    warmup_steps: int = option(15, help="linear warmup steps before the cosine decay")
    min_lr_ratio: float = option(0.1, help="the cosine decays to lr * min_lr_ratio")
    betas: tuple[float, float] = option((0.9, 0.95), help="AdamW betas")
    weight_decay: float = option(0.0, help="AdamW weight decay")
    max_grad_norm: float = option(1.0, help="gradient clipping norm")
    self_distill: bool = option(True, help="fit on the verifier's own greedy outputs instead of the corpus responses")
    max_new_tokens: int = option(192, help="length of the self-distilled responses")
    seed: int = option(0, help="head initialisation and batch order (make train: the run's seed unless set)")
    log_every: int = option(50, help="log the loss every this many steps (0: first and last only)")
    weights: LossWeights = option(default_factory=LossWeights, help="eq. 5 loss weights")
    max_samples: int | None = option(None, help="make train: fit on the first this many train pages (unset: a "
                                              "seeded uniform sample of steps x batch_size, the most a fit draws)")
    bench_pages: int | None = option(None, help="make train: eval pages in the decoding table (unset: eval_limit)")
    bench_max_new_tokens: int = option(128, help="make train: tokens per page in the speculative decoding table")

    def __post_init__(self) -> None:
        for name in ("depths", "steps", "batch_size", "max_new_tokens", "bench_max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "log_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_samples", "bench_pages"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or unset, got {getattr(self, name)}")
        if not (self.lr > 0 and self.max_grad_norm > 0):
            raise ValueError(f"lr and max_grad_norm must be > 0, got {self.lr}, {self.max_grad_norm}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")


@dataclass
class FitResult:
    head: DraftHead
    history: list[dict]  # per logged step: step, loss, ce/kl/mse per depth, lr
    seconds: float
    trainable: int


def trainable_parameters(head: DraftHead) -> list[nn.Parameter]:
    """N_e, N_h, P, B_theta: everything the head registers (the tied verifier parts are not registered)."""
    return list(head.parameters())


def fit_head(model: nn.Module, samples: list[Encoded], cfg: MTPConfig = MTPConfig(),
             head: DraftHead | None = None) -> FitResult:
    """Fit the draft head on the frozen verifier (5.6). ``samples`` carry their responses (run
    `self_distill` first for FastMTP's self-distilled data). The verifier is only read."""
    t0 = time.perf_counter()
    was_training = model.training
    model.eval()
    traces = [trace(model, s) for s in samples]
    traces = [t for t in traces if t.input_ids.shape[0] - t.prompt_len >= 2]
    if not traces:
        raise ValueError("mtp: no sample has a response of at least 2 tokens to fit on")
    head = head or DraftHead.from_verifier(model, cfg.depths, cfg.seed)
    head.train()
    params = trainable_parameters(head)
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio))
    rng = random.Random(cfg.seed)
    order: list[int] = []
    history = []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            perm = list(range(len(traces)))
            rng.shuffle(perm)
            order += perm
        picked, order = order[:cfg.batch_size], order[cfg.batch_size:]
        loss = batch_loss(head, collate([traces[i] for i in picked]), cfg.depths, cfg.weights)
        opt.zero_grad(set_to_none=True)
        loss.total.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        lr = opt.param_groups[0]["lr"]
        sched.step()
        if step == 0 or step + 1 == cfg.steps or (cfg.log_every and (step + 1) % cfg.log_every == 0):
            entry = {"step": step + 1, "loss": loss.total.detach().item(), "ce": loss.ce, "kl": loss.kl,
                     "mse": loss.mse, "lr": lr}
            history.append(entry)
            log.info("mtp step %d loss %.4f ce %s", step + 1, entry["loss"], [round(c, 3) for c in loss.ce])
    head.eval()
    model.train(was_training)
    return FitResult(head, history, time.perf_counter() - t0, sum(p.numel() for p in params))


# -- corpus entry point (CLI, make train) ----------------------------------------------------------

def fit_for_checkpoint(loaded, corpus: str, cfg: MTPConfig = MTPConfig(), limit: int | None = None,
                       out: str | Path | None = None, eval_fraction: float = 0.1) -> FitResult:
    """Fit a head for ``loaded`` (model.models.Loaded) on the corpus's train split: its first ``limit``
    pages when given, else a seeded uniform sample of ``steps x batch_size`` pages (the most a fit
    draws, so memory does not grow with the corpus); save it to ``out`` when given."""
    data = DataConfig(path=corpus, eval_fraction=eval_fraction)
    records = None
    if not limit:
        rows = iter_records(corpus, "train", RECORD_COLUMNS, eval_fraction)
        records = iter(uniform_sample(rows, cfg.steps * cfg.batch_size, cfg.seed))
    samples = []
    for s in SampleSource(loaded.processor, data, "train", records=records):
        if limit and len(samples) >= limit:
            break
        samples.append(s.encoded)
    if cfg.self_distill:
        samples = self_distill(loaded.model, samples, loaded.processor.eos_token_id, cfg.max_new_tokens,
                               loaded.processor.tokenizer.pad_token_id or 0)
    result = fit_head(loaded.model, samples, cfg)
    if out is not None:
        save_head(result.head, out, {"verifier": str(loaded.source), "fit": {"steps": cfg.steps,
                                                                              "samples": len(samples)}})
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m model.mtp",
                                 description="Fit a FastMTP draft head (Jina-OCR-v1 3.1, 5.6) on a frozen "
                                             "verifier checkpoint and save it as safetensors + mtp_config.json.")
    ap.add_argument("--checkpoint", required=True, help="verifier: local checkpoint folder, 'tiny' or 'tiny-moe'")
    ap.add_argument("--out", required=True, help="folder for the head")
    ap.add_argument("--corpus", default="out/corpus", help="corpus folder (train split is used)")
    ap.add_argument("--eval-fraction", type=fraction_arg,
                    help=EVAL_FRACTION_HELP + "; the head fits on the rest of the train rows, --bench decodes the "
                                              "eval pages")
    ap.add_argument("--limit", type=int, help="at most this many training pages")
    ap.add_argument("--steps", type=int, default=MTPConfig.steps)
    ap.add_argument("--depths", type=int, default=MTPConfig.depths, help="K recursive steps")
    ap.add_argument("--lr", type=float, default=MTPConfig.lr)
    ap.add_argument("--batch-size", type=int, default=MTPConfig.batch_size)
    ap.add_argument("--max-new-tokens", type=int, default=MTPConfig.max_new_tokens,
                    help="length of the self-distilled responses")
    ap.add_argument("--no-self-distill", action="store_true", help="fit on the corpus responses as written")
    ap.add_argument("--bench", action="store_true", help="print the Table 8 decoding table on eval pages")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:  # a value that can never run, a checkpoint that cannot load: one line, exit 2, before any work
        cfg = MTPConfig(depths=args.depths, steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                        max_new_tokens=args.max_new_tokens, self_distill=not args.no_self_distill)
        fraction = cli_eval_fraction(args.corpus, args.eval_fraction)
        loaded = load(args.checkpoint)
    except (ValueError, ModelLoadError, FileNotFoundError) as exc:
        ap.exit(2, f"{ap.prog}: {exc}\n")
    result = fit_for_checkpoint(loaded, args.corpus, cfg, args.limit, args.out, eval_fraction=fraction)
    last = result.history[-1]
    print(f"head: {result.trainable} trainable parameters, {cfg.steps} steps in {result.seconds:.0f}s, "
          f"loss {result.history[0]['loss']:.3f} -> {last['loss']:.3f}; saved to {args.out}")
    if args.bench:
        print(format_table(bench_on_corpus(loaded, result.head, args.corpus, eval_fraction=fraction)))


if __name__ == "__main__":
    main()
