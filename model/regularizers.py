"""Auxiliary regularizers for SFT/GRPO runs (Jina-OCR-v1 5.4).

Pure functions on tensors, plus `regularizer_loss`, which the training loop calls once per
micro-batch with the model output:

- `load_balance`: sequence-level MoE load balancing, L_bal = N * sum_i f_i P_i.
- `gate_entropy`: normalized router entropy, L_ent = 1/(T log N) sum_t H(p_t).
- `z_loss`: PaLM output-logit penalty, L_z = lambda_z * logsumexp(z)^2.
- `contrastive`: SimCTG margin loss over token pairs of one local chunk (eq. 3).

Token layout. Router logits come flattened over the batch, (B*L, N) per MoE layer. A packed
row holds several samples; ``segment_ids`` (B, L) names the sample of each position (0, 1, ...
within a row; negative = padding). "Per sequence" means per (row, segment) pair, so tokens of
different samples are never averaged or paired together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from schemas.config import option

ROUTER_KINDS = ("softmax", "sigmoid")
# Families whose router scores are sigmoid(logits) (DeepSeek-V3-style gates).
SIGMOID_ROUTER_MODELS = ("glm4v_moe", "glm4_moe", "deepseek_v3", "glm4v_moe_text", "glm4_moe_lite")


# --------------------------------------------------------------------------- token bookkeeping

def sequence_keys(segment_ids: torch.Tensor | None, shape: tuple[int, int]) -> torch.Tensor:
    """(B*L,) id of the sequence each flattened position belongs to; -1 for padding.

    ``segment_ids`` None means one sequence per row with no padding.
    """
    b, length = shape
    rows = torch.arange(b).repeat_interleave(length)
    if segment_ids is None:
        return rows
    seg = segment_ids.reshape(-1).long().cpu()
    width = int(seg.max().item()) + 1 if seg.numel() else 1
    keys = rows * max(width, 1) + seg
    return torch.where(seg >= 0, keys, torch.full_like(keys, -1))


def _groups(keys: torch.Tensor) -> list[torch.Tensor]:
    """Index tensors of the positions of each sequence key (negative keys dropped)."""
    order = torch.argsort(keys, stable=True)
    sorted_keys = keys[order]
    uniq, counts = torch.unique_consecutive(sorted_keys, return_counts=True)
    return [idx for k, idx in zip(uniq.tolist(), torch.split(order, counts.tolist())) if k >= 0]


# --------------------------------------------------------------------------- router terms

def router_probs(logits: torch.Tensor, kind: str = "softmax") -> torch.Tensor:
    """Router probabilities p_{i,t} from (T, N) router logits.

    ``softmax``: p = softmax(logits). ``sigmoid`` (GLM-4.5/DeepSeek-V3 gates): s = sigmoid(logits),
    normalised per token to sum 1, DeepSeek-V3's s'_{i,t} = s_{i,t} / sum_j s_{j,t}.
    """
    logits = logits.float()
    if kind == "softmax":
        return logits.softmax(-1)
    if kind == "sigmoid":
        s = logits.sigmoid()
        return s / s.sum(-1, keepdim=True)
    raise ValueError(f"router kind {kind!r}; expected one of {ROUTER_KINDS}")


def load_balance(probs: torch.Tensor, top_k: int) -> torch.Tensor:
    """L_bal = N * sum_i f_i P_i for one sequence of (T, N) router probabilities (5.4).

    f_i = (1/T) sum_t 1{i in topk(t)} (no gradient), P_i = (1/T) sum_t p_{i,t}. The top-k is taken on
    ``probs``; for sigmoid gates the normalisation does not change which experts are chosen.
    """
    t, n = probs.shape
    chosen = probs.detach().topk(top_k, dim=-1).indices
    f = torch.zeros(n, device=probs.device).scatter_add_(
        0, chosen.reshape(-1), torch.ones(chosen.numel(), device=probs.device)) / t
    p = probs.mean(0)
    return n * (f * p).sum()


def gate_entropy(probs: torch.Tensor) -> torch.Tensor:
    """L_ent = 1/(T log N) sum_t [-sum_i p_{i,t} log p_{i,t}] for (T, N) probabilities (5.4); in [0, 1]."""
    t, n = probs.shape
    h = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
    return h.sum() / (t * math.log(n))


def router_losses(router_logits: tuple[torch.Tensor, ...] | list[torch.Tensor], keys: torch.Tensor,
                  top_k: int, kind: str = "softmax") -> tuple[torch.Tensor, torch.Tensor]:
    """(L_bal, L_ent) over MoE layers: per sequence, averaged over sequences, then over layers.

    ``router_logits``: one (T, N) tensor per MoE layer, T = B*L flattened positions; ``keys``: (T,)
    sequence ids from `sequence_keys` (-1 = padding, excluded).
    """
    groups = _groups(keys.cpu())
    if not router_logits or not groups:
        raise ValueError("router_losses needs at least one MoE layer and one non-padding token")
    bal, ent = [], []
    for layer_logits in router_logits:
        if layer_logits.shape[0] != keys.shape[0]:
            raise ValueError(f"router logits cover {layer_logits.shape[0]} tokens, segment ids {keys.shape[0]}")
        probs = router_probs(layer_logits, kind)
        idx = [g.to(probs.device) for g in groups]
        bal.append(torch.stack([load_balance(probs[g], top_k) for g in idx]).mean())
        ent.append(torch.stack([gate_entropy(probs[g]) for g in idx]).mean())
    return torch.stack(bal).mean(), torch.stack(ent).mean()


# --------------------------------------------------------------------------- output and representation terms

def z_loss(logits: torch.Tensor, mask: torch.Tensor | None, lambda_z: float) -> torch.Tensor:
    """L_z = lambda_z * logsumexp(z)^2 averaged over the positions where ``mask`` is True (PaLM)."""
    z = logits.float()
    if mask is not None:
        z = z[mask.bool()]
    z = z.reshape(-1, z.shape[-1])
    if z.shape[0] == 0:
        return logits.sum() * 0.0
    return lambda_z * z.logsumexp(-1).pow(2).mean()


def chunk_ids(keys: torch.Tensor, chunk_len: int) -> torch.Tensor:
    """(T,) local-chunk id per kept position (key >= 0), -1 elsewhere.

    Within each sequence the kept positions, in order, fall into consecutive chunks of ``chunk_len``.
    """
    if chunk_len < 1:
        raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
    out = torch.full_like(keys, -1)
    next_id = 0
    for idx in _groups(keys):
        idx = idx.sort().values
        local = torch.arange(len(idx)) // chunk_len
        out[idx] = local + next_id
        next_id += int(local[-1]) + 1
    return out


def contrastive(hidden: torch.Tensor, chunks: torch.Tensor, margin: float) -> torch.Tensor:
    """SimCTG loss with margin m (eq. 3): 1/|P| sum_{(i,j) in P} max(0, m - (s_ii - s_ij)).

    ``hidden``: (T, D) token states; ``chunks``: (T,) chunk id per token, -1 = excluded.
    s_ij = cos(h_i, h_j); P = ordered pairs i != j of one chunk.
    """
    keep = chunks >= 0
    h, c = hidden.reshape(-1, hidden.shape[-1])[keep.to(hidden.device)].float(), chunks[keep].cpu()
    if h.shape[0] < 2:
        return hidden.sum() * 0.0
    order = torch.argsort(c, stable=True)
    h, c = h[order.to(h.device)], c[order]
    # Pad the chunks into a (C, S, D) block so one batched matmul gives every in-chunk similarity.
    uniq, counts = torch.unique_consecutive(c, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.arange(len(c)) - starts.repeat_interleave(counts)
    row = torch.arange(len(uniq)).repeat_interleave(counts)
    size = int(counts.max())
    dev = h.device
    block = h.new_zeros(len(uniq), size, h.shape[-1])
    block[row.to(dev), slot.to(dev)] = F.normalize(h, dim=-1)
    valid = torch.zeros(len(uniq), size, dtype=torch.bool, device=dev)
    valid[row.to(dev), slot.to(dev)] = True
    s = block @ block.transpose(1, 2)  # (C, S, S) cosine similarities
    s_ii = s.diagonal(dim1=1, dim2=2).unsqueeze(-1)
    pairs = valid.unsqueeze(2) & valid.unsqueeze(1) & ~torch.eye(size, dtype=torch.bool, device=dev)
    if not pairs.any():
        return hidden.sum() * 0.0
    return torch.relu(margin - (s_ii - s))[pairs].mean()


# --------------------------------------------------------------------------- what the training loop calls

@dataclass(frozen=True)
class RegularizerConfig:
    """Coefficients of the 5.4 terms; 0.0 switches a term off.

    ``z_loss`` is lambda_z itself. ``router_kind``/``top_k`` must match the model's gate
    (`for_model` reads them from its config); they are only needed when a router term is on.
    """

    balance: float = option(0.0, help="switch-style load-balancing loss on the MoE router")
    entropy: float = option(0.0, help="gate entropy; positive sharpens routing, negative spreads it")
    z_loss: float = option(0.0, help="lambda_z of the z-loss on the output logits")
    contrastive: float = option(0.0, help="SimCTG contrastive loss on hidden states within chunks")
    margin: float = option(0.5, help="SimCTG margin rho")
    chunk_len: int = option(64, help="tokens per contrastive chunk (>= 2)")
    router_kind: str | None = option(None, help=f"gate kind, one of {ROUTER_KINDS} (unset: read from the model)")
    top_k: int | None = option(None, help="experts per token (unset: read from the model)")

    def __post_init__(self) -> None:
        if self.router_kind is not None and self.router_kind not in ROUTER_KINDS:
            raise ValueError(f"router_kind {self.router_kind!r}; expected one of {ROUTER_KINDS}")
        if self.chunk_len < 2:
            raise ValueError(f"chunk_len must be >= 2 (a chunk needs a pair), got {self.chunk_len}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.balance < 0 or self.z_loss < 0 or self.contrastive < 0:
            raise ValueError("balance, z_loss and contrastive coefficients must be >= 0")

    @property
    def needs_router(self) -> bool:
        return self.balance != 0.0 or self.entropy != 0.0

    @property
    def needs_hidden(self) -> bool:
        return self.contrastive != 0.0

    @property
    def enabled(self) -> bool:
        return self.needs_router or self.needs_hidden or self.z_loss != 0.0

    def for_model(self, model) -> "RegularizerConfig":
        """Copy with ``top_k`` and ``router_kind`` filled in from the model's config where unset."""
        from dataclasses import replace

        cfg = getattr(model, "config", model)
        text = getattr(cfg, "text_config", None) or cfg
        top_k = self.top_k or getattr(text, "num_experts_per_tok", None)
        kind = self.router_kind
        if kind is None:
            types = {getattr(cfg, "model_type", ""), getattr(text, "model_type", "")}
            kind = "sigmoid" if types & set(SIGMOID_ROUTER_MODELS) else "softmax"
        return replace(self, top_k=top_k, router_kind=kind)


def regularizer_loss(cfg: RegularizerConfig, out, batch_mask: torch.Tensor | None,
                     segment_ids: torch.Tensor | None, hidden: torch.Tensor | None
                     ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the enabled terms and their unweighted values (detached) for logging.

    ``out``: model output (``logits``; ``router_logits`` when a router term is on).
    ``batch_mask``: (B, L) True at training-target tokens (labels != -100); the z-loss applies to the
    logits that predict them (position t-1), the contrastive term to the targets' own states.
    ``segment_ids``: (B, L) sample index per position in packed rows, negative = padding; None = one
    sample per row. ``hidden``: (B, L, D) last hidden states, needed when ``contrastive`` > 0.
    """
    logits = out.logits
    total = logits.new_zeros((), dtype=torch.float32)
    parts: dict[str, torch.Tensor] = {}
    if not cfg.enabled:
        return total, parts
    shape_source = next((t for t in (batch_mask, segment_ids) if t is not None), None)
    b, length = (shape_source.shape[:2] if shape_source is not None else logits.shape[:2])
    # The SFT loop computes logits only where they predict a target (``logits_to_keep``); then every
    # kept position counts for the z-loss.
    targets_only = logits.shape[1] != length
    keys = sequence_keys(segment_ids, (b, length))
    if cfg.needs_router:
        router_logits = getattr(out, "router_logits", None)
        if not router_logits:
            raise ValueError("balance/entropy regularizers are on but the model returned no router_logits "
                             "(dense model, or output_router_logits was not set)")
        if cfg.top_k is None or cfg.router_kind is None:
            raise ValueError("router terms need top_k and router_kind; use RegularizerConfig.for_model(model)")
        bal, ent = router_losses(router_logits, keys, cfg.top_k, cfg.router_kind)
        if cfg.balance:
            total = total + cfg.balance * bal
            parts["balance"] = bal.detach()
        if cfg.entropy:
            total = total + cfg.entropy * ent
            parts["entropy"] = ent.detach()
    if cfg.z_loss:
        if targets_only:
            lz = z_loss(logits, None, cfg.z_loss)
        else:
            mask = torch.ones(b, length, dtype=torch.bool, device=logits.device) if batch_mask is None \
                else batch_mask
            # Position t predicts token t+1: penalise the logits that produce a target token.
            lz = z_loss(logits[:, :-1], mask[:, 1:].to(logits.device), cfg.z_loss)
        total = total + lz
        parts["z_loss"] = lz.detach()
    if cfg.needs_hidden:
        if hidden is None:
            raise ValueError("contrastive regularizer is on but no hidden states were passed")
        kept = keys.clone()
        if batch_mask is not None:
            kept[~batch_mask.reshape(-1).bool().cpu()] = -1
        ctr = contrastive(hidden.reshape(b * length, -1), chunk_ids(kept, cfg.chunk_len), cfg.margin)
        total = total + cfg.contrastive * ctr
        parts["contrastive"] = ctr.detach()
    return total, parts
