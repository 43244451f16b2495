"""Lossless greedy speculative decoding with the FastMTP draft head, and the Table 8 metrics.

Jina-OCR-v1 3.1 (eq. 2) and 6.4. One step, for every row of a batch:

1. The head drafts d_1..d_K: depth 1 reads the verifier state b at the row before the last
   committed token x_m plus E(x_m); depth k reads depth k-1's output plus E(d_{k-1}).
2. The verifier runs once on [x_m, d_1..d_K] with its KV cache; g = its greedy tokens.
3. Accept the longest prefix with d_i = g_{i-1} (eq. 2, n accepted), commit d_1..d_n and then
   g_n: the verifier's token replaces the first rejected draft, or is the bonus token when all
   K match. No sampling, no resampling, so the committed sequence is the verifier's greedy one.
4. Roll back: the verifier cache drops its K - n rejected positions; the head cache drops its
   K - 1 draft rows and takes the newly committed rows with their verifier states (the head's
   cache only ever holds committed rows built from base states, as in training's prompt rows).

Batches are left-padded. Rows accept different lengths, so the caches stay one length for all
rows: the positions after the longest accepted prefix are cropped, and a row that accepted fewer
keeps its extra positions in the cache but masked out (``valid``) for good. Positions are
explicit per row, so the holes never shift a row's RoPE. k = 0 is plain greedy decoding through
the same loop (one verifier pass per token).

The draft head is `model.mtp_head`'s. ``python -m model.speculate --bench --checkpoint DIR --head DIR``
prints the Table 8 columns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from model.data import DataConfig, eval_samples
from model.models import rope_index, without_suppressed
from model.mtp_head import DraftHead, HeadCache
from model.processing import Encoded, image_kwargs


@dataclass
class DecodeResult:
    tokens: list[list[int]]  # committed tokens per row, ending at end-of-turn or max_new_tokens
    accepted: list[list[int]]  # per row: drafts accepted at each speculative step (before truncation)
    verifier_passes: int  # verifier forward calls, prefill included
    seconds: float
    k: int


@dataclass
class _Prompt:
    input_ids: torch.Tensor  # (B, P) left-padded
    positions: torch.Tensor  # (3, B, P)
    mm_token_type_ids: torch.Tensor
    valid: torch.Tensor  # (B, P) bool, False on left padding
    images: dict  # pixel_values / image_grid_thw kwargs (None on text-only batches)


def _left_pad(model: nn.Module, samples: list[Encoded], pad_token_id: int, device) -> _Prompt:
    lens = [s.prompt_len for s in samples]
    B, P = len(samples), max(lens)
    ids = torch.full((B, P), pad_token_id, dtype=torch.long)
    mm = torch.zeros(B, P, dtype=torch.long)
    pos = torch.zeros(3, B, P, dtype=torch.long)
    valid = torch.zeros(B, P, dtype=torch.bool)
    for i, s in enumerate(samples):
        n = s.prompt_len
        row_ids, row_mm = s.input_ids[:n], s.mm_token_type_ids[:n]
        ids[i, P - n:], mm[i, P - n:], valid[i, P - n:] = row_ids, row_mm, True
        grid = image_kwargs(s.pixel_values, s.image_grid_thw, device).get("image_grid_thw")
        pos[:, i, P - n:] = rope_index(model, row_ids[None].to(device), row_mm[None].to(device), grid)[:, 0].cpu()
    with_image = [s for s in samples if s.image_grid_thw is not None and s.image_grid_thw.numel()]
    images = image_kwargs(torch.cat([s.pixel_values for s in with_image]) if with_image else None,
                          torch.cat([s.image_grid_thw for s in with_image]) if with_image else None, device)
    return _Prompt(ids.to(device), pos.to(device), mm.to(device), valid.to(device), images)


def _verifier(model, cache, ids, positions, valid, hidden: bool, **extra):
    """One verifier forward on new tokens; the 2-D mask covers cache + new slots (None at B=1
    without holes, the plain causal path)."""
    mask = None if bool(valid.all()) else valid.long()
    mm = extra.pop("mm_token_type_ids", None)
    return model(input_ids=ids, position_ids=positions, attention_mask=mask,
                 mm_token_type_ids=mm if mm is not None else torch.zeros_like(ids),
                 cache=cache, use_cache=True, output_hidden_states=hidden, **extra)


@torch.inference_mode()
def generate(model: nn.Module, samples: list[Encoded], head: DraftHead | None = None, k: int = 0,
             max_new_tokens: int = 128, eos_token_id: int | None = None, pad_token_id: int = 0) -> DecodeResult:
    """Greedy continuation of each sample's prompt; ``k`` drafts per step from ``head`` (k = 0:
    plain greedy). The output equals the verifier's greedy decoding token for token."""
    from transformers import DynamicCache

    if k > 0 and head is None:
        raise ValueError("decode: k > 0 needs a draft head")
    t0 = time.perf_counter()
    device = next(model.parameters()).device
    B = len(samples)
    def pick(logits: torch.Tensor) -> torch.Tensor:
        # the tokens model.generate never picks are left out here too, so the output stays its greedy decoding
        return without_suppressed(model, logits).argmax(-1)

    prompt = _left_pad(model, samples, pad_token_id, device)
    cache = DynamicCache(config=model.config)
    out = _verifier(model, cache, prompt.input_ids, prompt.positions, prompt.valid, hidden=k > 0,
                    mm_token_type_ids=prompt.mm_token_type_ids, **prompt.images)
    passes = 1
    valid = prompt.valid  # which verifier-cache slots are real
    last = pick(out.logits[:, -1])  # last committed token, not yet in the verifier cache
    pos_next = prompt.positions[0, :, -1] + 1  # its position (text positions continue +1)
    tokens = [[int(t)] for t in last]
    accepted: list[list[int]] = [[] for _ in range(B)]
    done = [_finished(t, eos_token_id, max_new_tokens) for t in tokens]
    rows = torch.arange(B, device=device)

    if k > 0:
        hcache = HeadCache()
        nxt = torch.cat([prompt.input_ids[:, 1:], last[:, None]], dim=1)
        states = torch.where(prompt.valid[..., None], out.hidden_states[-1], 0.0)  # padding: no NaN into K/V
        u = head(nxt, states, prompt.positions[0], hcache, prompt.valid)[:, -1]

    while not all(done):
        if k > 0:
            drafts = [pick(head.logits(u))]
            for depth in range(2, k + 1):
                u = head(drafts[-1][:, None], u[:, None], (pos_next + depth - 2)[:, None], hcache)[:, 0]
                drafts.append(pick(head.logits(u)))
            D = torch.stack(drafts, dim=1)  # (B, k)
            block = torch.cat([last[:, None], D], dim=1)
        else:
            block = last[:, None]
        bpos = pos_next[:, None] + torch.arange(k + 1, device=device)
        valid = torch.cat([valid, torch.ones(B, k + 1, dtype=torch.bool, device=device)], dim=1)
        out = _verifier(model, cache, block, bpos[None].expand(3, -1, -1), valid, hidden=k > 0)
        passes += 1
        g = pick(out.logits)  # (B, k+1): g_j is the verifier's token after block[:j+1]
        if k > 0:
            n = (D == g[:, :k]).long().cumprod(dim=1).sum(dim=1)  # eq. 2
        else:
            n = torch.zeros(B, dtype=torch.long, device=device)
        n_max = int(n.max())
        # Verifier cache: slots after the longest accepted prefix go for every row; a row that
        # accepted fewer masks its own rejected slots out.
        if k - n_max > 0:
            cache.crop(-(k - n_max))
            valid = valid[:, :-(k - n_max)]
        start = valid.shape[1] - (n_max + 1)
        slot = torch.arange(n_max + 1, device=device)
        valid[:, start:] &= slot[None] <= n[:, None]
        bonus = g[rows, n]
        for i in range(B):
            if done[i]:
                continue
            ni = int(n[i])
            accepted[i].append(ni)
            tokens[i].extend((D[i, :ni].tolist() if k > 0 else []) + [int(bonus[i])])
            tokens[i] = _truncate(tokens[i], eos_token_id, max_new_tokens)
            done[i] = _finished(tokens[i], eos_token_id, max_new_tokens)
        last = bonus
        if k > 0 and not all(done):
            # Head: drop the K-1 draft rows, feed the committed rows m..m+n with their verifier
            # states; the last one (state b before the bonus token + E(bonus)) is depth 1 of
            # the next chain. Rows are right-aligned, shorter ones padded at the front.
            hcache.crop(k - 1)
            nxt_all = torch.where(torch.arange(k + 1, device=device)[None] < n[:, None],
                                  torch.cat([D, D[:, :1]], dim=1), g)
            src = slot[None] - (n_max - n)[:, None]
            fed = src >= 0
            src = src.clamp(min=0)
            states = out.hidden_states[-1][rows[:, None], src]
            u = head(nxt_all.gather(1, src), states, pos_next[:, None] + src, hcache, fed)[:, -1]
        pos_next = pos_next + n + 1
    return DecodeResult(tokens, accepted, passes, time.perf_counter() - t0, k)


def _truncate(toks: list[int], eos: int | None, max_new: int) -> list[int]:
    if eos is not None and eos in toks:
        toks = toks[:toks.index(eos) + 1]
    return toks[:max_new]


def _finished(toks: list[int], eos: int | None, max_new: int) -> bool:
    return len(toks) >= max_new or (eos is not None and bool(toks) and toks[-1] == eos)


# -- Table 8 metrics --------------------------------------------------------------------------------

@dataclass
class AcceptStats:
    """From accepted-draft counts A_s per speculative step at depth k (6.4, Table 8)."""

    k: int
    steps: int
    tau: float  # mean tokens committed per step, bonus included = mean(A_s + 1)
    acceptance: float  # (tau - 1) / k
    conditional: list[float] = field(default_factory=list)  # a_d = #{A >= d} / #{A >= d-1}


def accept_stats(accepted: list[int], k: int) -> AcceptStats:
    S = len(accepted)
    if S == 0:
        return AcceptStats(k, 0, float("nan"), float("nan"), [float("nan")] * k)
    tau = sum(a + 1 for a in accepted) / S
    cond = []
    for d in range(1, k + 1):
        reached = sum(a >= d - 1 for a in accepted)
        cond.append(sum(a >= d for a in accepted) / reached if reached else float("nan"))
    return AcceptStats(k, S, tau, (tau - 1) / k if k else float("nan"), cond)


@dataclass
class BenchRow:
    k: int
    tokens: int
    seconds: float
    tok_per_s: float
    speedup: float  # S: throughput against k = 0
    tau: float  # nan at k = 0
    acceptance: float
    cost: float  # c = tau / S, one step in units of one autoregressive step (1 at k = 0)
    conditional: list[float]
    passes_per_token: float  # verifier forward passes per committed token, prefill included
    lossless: bool  # every prompt's output equals the k = 0 output
    distinct_share: float = float("nan")  # mean over outputs of distinct tokens / tokens (degenerate: near 0)


def bench_table(model: nn.Module, head: DraftHead | None, prompts: list[Encoded], ks=(0, 1, 2, 3),
                max_new_tokens: int = 128, eos_token_id: int | None = None, pad_token_id: int = 0,
                warmup: bool = True) -> list[BenchRow]:
    """Batch size 1, every prompt decoded at every k in turn (so load drifts hit all k alike); k = 0 first
    for each prompt, since every other k's output is compared with it."""
    ks = (0, *(kk for kk in ks if kk != 0))
    if warmup:
        for kk in ks:
            generate(model, prompts[:1], head, kk, min(16, max_new_tokens), eos_token_id, pad_token_id)
    acc = {kk: {"tokens": 0, "seconds": 0.0, "accepted": [], "passes": 0, "same": True, "distinct": []}
           for kk in ks}
    for p in prompts:
        ref = None
        for kk in ks:
            r = generate(model, [p], head, kk, max_new_tokens, eos_token_id, pad_token_id)
            a = acc[kk]
            a["tokens"] += len(r.tokens[0])
            a["seconds"] += r.seconds
            a["accepted"] += r.accepted[0]
            a["passes"] += r.verifier_passes
            a["distinct"].append(len(set(r.tokens[0])) / max(1, len(r.tokens[0])))
            ref = r.tokens[0] if kk == 0 else ref
            a["same"] &= r.tokens[0] == ref
    base = acc[0]["tokens"] / acc[0]["seconds"]
    out = []
    for kk in ks:
        a = acc[kk]
        tps = a["tokens"] / a["seconds"]
        speedup = tps / base
        st = accept_stats(a["accepted"], kk)
        tau = st.tau if kk else float("nan")
        out.append(BenchRow(kk, a["tokens"], a["seconds"], tps, speedup, tau, st.acceptance,
                            tau / speedup if kk else 1.0, st.conditional if kk else [],
                            a["passes"] / max(1, a["tokens"]), a["same"],
                            sum(a["distinct"]) / max(1, len(a["distinct"]))))
    return out


def format_table(rows: list[BenchRow]) -> str:
    depth = max((len(r.conditional) for r in rows), default=0)
    head = (f"{'k':>2} {'tok/s':>8} {'S':>6} {'accept':>7} {'tau':>5} {'c':>5} "
            + "".join(f"{'a_' + str(d):>6}" for d in range(1, depth + 1))
            + f" {'passes/tok':>10} {'lossless':>8} {'distinct':>8}")
    lines = [head]
    for r in rows:
        acc = "-" if r.k == 0 else f"{r.acceptance:.1%}"
        tau = "-" if r.k == 0 else f"{r.tau:.2f}"
        cond = "".join(f"{c:>6.3f}" for c in r.conditional) + " " * 6 * (depth - len(r.conditional))
        lines.append(f"{r.k:>2} {r.tok_per_s:>8.1f} {r.speedup:>5.2f}x {acc:>7} {tau:>5} {r.cost:>5.2f} {cond}"
                     f" {r.passes_per_token:>10.3f} {'yes' if r.lossless else 'NO':>8} {r.distinct_share:>8.0%}")
    return "\n".join(lines)


def bench_on_corpus(loaded, head: DraftHead, corpus: str = "out/corpus", limit: int | None = None,
                    max_new_tokens: int = 128, ks=(0, 1, 2, 3), eval_fraction: float = 0.1) -> list[BenchRow]:
    """`bench_table` on the corpus's eval split at ``eval_fraction`` (`model.records.assigned_split`); the
    command lines pass `model.records.cli_eval_fraction`, 0 for a corpus with its own eval split, so its
    train rows stay out of the table."""
    prompts = [s.encoded for s in eval_samples(DataConfig(path=corpus, eval_fraction=eval_fraction),
                                               loaded.processor, limit=limit)]
    if not prompts:
        raise ValueError(f"decode: no eval pages in {corpus}")
    return bench_table(loaded.model, head, prompts, ks, max_new_tokens, loaded.processor.eos_token_id,
                       loaded.processor.tokenizer.pad_token_id)
