"""FastMTP draft head: one shared dense block applied recursively, fitted on a frozen verifier.

Jina-OCR-v1 3.1 (architecture, state-shift alignment, eq. 1) and 5.6 (objective, eqs. 4-5).
The head owns only N_e, N_h (RMSNorm), the projection P (Linear 2d -> d, no bias) and the block
B_theta (pre-norm dense transformer layer sized like one verifier layer). The token embedding E,
the output norm N_o and the LM head W_lm are the verifier's own modules, held by reference and
only ever read through detached weights, so fitting cannot change them:

    z = P([N_e(E(x_next)); N_h(a)])        u = N_o(B_theta(z; pos))        logits = W_lm u

RoPE. B_theta uses 1-D RoPE with the verifier's ``rope_theta`` and ``head_dim`` and takes its
positions from the temporal row (row 0) of the verifier's 3-D M-RoPE position ids. For text
tokens the three M-RoPE rows are equal, so on the response this is exactly the verifier's RoPE;
on image tokens the head sees only the temporal index, which is all a 1-D rotary can hold.

Fitting (`fit_head`) runs the verifier once per sample without gradients (post-norm states b and
positions), then trains the head on the grid of rows p and depths k of eq. 1: depth 1 reads b_p,
depth k > 1 reads the previous depth's output at row p - 1, prompt rows keep b_p at every depth,
and every depth at row p predicts token x_{p+2} and state b_{p+1}. By default the responses are
replaced by the verifier's own greedy outputs first (`self_distill`).

Export (`save_head`, `vllm_mtp_mapping`): the head's tensors and how they map onto DeepSeek-V3's
MTP layer, which vLLM serves with ``speculative_config={"method": "mtp", ...}``:

    ours                            DeepSeek-V3 (HF names, N = num_hidden_layers)
    enorm.weight                    model.layers.N.enorm.weight
    hnorm.weight                    model.layers.N.hnorm.weight
    eh_proj.weight                  model.layers.N.eh_proj.weight
    block.input_layernorm.weight    model.layers.N.input_layernorm.weight
    block.self_attn.{q,k,v,o}_proj  model.layers.N.self_attn.{q,k,v,o}_proj   (MHA/GQA layout)
    block.post_attention_layernorm  model.layers.N.post_attention_layernorm
    block.mlp.{gate,up,down}_proj   model.layers.N.mlp.{gate,up,down}_proj    (dense MLP)
    (tied) verifier final norm      model.layers.N.shared_head.norm.weight
    (tied) verifier lm_head         model.layers.N.shared_head.head.weight
    (tied) verifier embed_tokens    model.layers.N.embed_tokens.weight

DeepSeek computes ``eh_proj(cat([enorm(e), hnorm(h)]))``: embedding first, hidden second, the
same order as our P, so ``eh_proj`` is copied unchanged (MiMo/FastMTP use [h, e] and would need
the two column halves swapped). vLLM applies its single MTP layer K times
(``num_speculative_tokens=K``), which is this head's shared recursion. What the engine must agree
on: it builds layer N like a decoder layer of the verifier's config, so the attention has to be the
plain q/k/v/o (MHA/GQA) kind, as in DeepSeek-V2-family decoders with ``use_mla: false`` such as
DeepSeek-OCR's (an MLA verifier needs an MLA draft block), and the MLP has to be dense at index N
(a DeepSeek-V3 config makes layer N an MoE layer; a dense head needs ``first_k_dense_replace > N``
or a dense-MLP MTP layer). ``export_serving`` writes the renamed tensors, tied ones included, as
one standalone safetensors file.

``python -m model.mtp --help`` fits a head for a checkpoint folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from model.models import rope_index, text_model
from model.processing import Encoded

log = logging.getLogger(__name__)

HEAD_WEIGHTS = "model.safetensors"
HEAD_CONFIG = "mtp_config.json"


# -- the head --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeadConfig:
    """Sizes of the draft block: those of one verifier decoder layer."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    vocab_size: int
    num_hidden_layers: int  # the verifier's; the head is layer N in DeepSeek's numbering
    depths: int = 3  # K: recursive steps the head was fitted for

    @classmethod
    def from_verifier(cls, model: nn.Module, depths: int = 3) -> "HeadConfig":
        tc = model.config.get_text_config()
        heads = tc.num_attention_heads
        rope = getattr(tc, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0))
        return cls(hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
                   num_attention_heads=heads, num_key_value_heads=getattr(tc, "num_key_value_heads", heads),
                   head_dim=getattr(tc, "head_dim", None) or tc.hidden_size // heads, rope_theta=float(theta),
                   rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)), vocab_size=tc.vocab_size,
                   num_hidden_layers=tc.num_hidden_layers, depths=depths)


@dataclass
class Tied:
    """The verifier's E, N_o and W_lm. A plain attribute (not a submodule): the head's
    ``parameters()`` and ``state_dict()`` never contain them."""

    embed: nn.Module
    norm: nn.Module
    lm_head: nn.Module


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin (B, L, head_dim) for 1-D positions (B, L), half-split layout."""
    angles = positions.float()[..., None] * inv_freq.to(positions.device)
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


@dataclass
class HeadCache:
    """The head's own KV cache: keys/values (B, kv_heads, T, head_dim) and which slots are real.

    ``valid`` is False on padding slots of ragged batches; they are never attended to."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    valid: torch.Tensor | None = None  # (B, T) bool

    @property
    def length(self) -> int:
        return 0 if self.k is None else int(self.k.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor) -> None:
        if self.k is None:
            self.k, self.v, self.valid = k, v, valid
        else:
            self.k = torch.cat([self.k, k], dim=2)
            self.v = torch.cat([self.v, v], dim=2)
            self.valid = torch.cat([self.valid, valid], dim=1)

    def crop(self, n: int) -> None:
        """Drop the last ``n`` slots."""
        if n > 0 and self.k is not None:
            self.k, self.v, self.valid = self.k[:, :, :-n], self.v[:, :, :-n], self.valid[:, :-n]


class Attention(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        d, h, kv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.h, self.kv, self.hd = h, kv, hd
        self.inv_freq = rope_inv_freq(hd, cfg.rope_theta)  # plain fp32 tensor: .to(dtype) must not round it
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, kv * hd, bias=False)
        self.v_proj = nn.Linear(d, kv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: HeadCache | None = None,
                valid: torch.Tensor | None = None) -> torch.Tensor:
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.kv, self.hd).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.inv_freq)
        cos, sin = cos[:, None].to(q.dtype), sin[:, None].to(q.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if valid is None:
            valid = torch.ones(B, L, dtype=torch.bool, device=x.device)
        past = 0
        if cache is not None:
            past = cache.length
            cache.append(k, v, valid)
            k, v, key_valid = cache.k, cache.v, cache.valid
        else:
            key_valid = valid
        T = k.shape[2]
        if L == 1 and bool(key_valid.all()):
            mask = None  # one new row sees every cached row (the drafting steps)
        else:
            causal = torch.ones(L, T, dtype=torch.bool, device=x.device).tril(diagonal=past)
            mask = causal[None] & key_valid[:, None, :]
            # A padding query may see no real key; let every query see itself so no row is all -inf.
            mask |= torch.eye(L, T, dtype=torch.bool, device=x.device).roll(past, dims=1)[None]
            mask = mask[:, None]
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, self.h * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftBlock(nn.Module):
    """B_theta: RMSNorm -> causal self-attention (RoPE) -> residual -> RMSNorm -> SwiGLU -> residual."""

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, positions, cache=None, valid=None):
        x = x + self.self_attn(self.input_layernorm(x), positions, cache, valid)
        return x + self.mlp(self.post_attention_layernorm(x))


class DraftHead(nn.Module):
    """N_e, N_h, P and B_theta (trainable); E, N_o, W_lm read from the verifier (frozen)."""

    def __init__(self, cfg: HeadConfig, verifier: nn.Module):
        super().__init__()
        self.config = cfg
        d = cfg.hidden_size
        self.enorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.hnorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.block = DraftBlock(cfg)
        tm = text_model(verifier)
        self.tied = Tied(verifier.get_input_embeddings(), tm.norm, verifier.get_output_embeddings())
        self.reset_parameters()

    @classmethod
    def from_verifier(cls, verifier: nn.Module, depths: int = 3, seed: int = 0) -> "DraftHead":
        torch.manual_seed(seed)
        p = next(verifier.parameters())
        return cls(HeadConfig.from_verifier(verifier, depths), verifier).to(device=p.device, dtype=p.dtype)

    def reset_parameters(self) -> None:
        """Start as the identity on the state: P passes N_h(a) through (its embedding half is 0),
        and the attention and MLP output projections are 0, so u = N_o(N_h(a)) exactly. Untrained,
        the head is a valid, finite (if weak) drafter; fitting starts from the verifier's own state.
        The zeroed weights get gradients from the first step (their inputs are nonzero); q/k/v and
        gate/up follow as soon as o_proj/down_proj move."""
        d = self.config.hidden_size
        with torch.no_grad():
            self.eh_proj.weight.zero_()
            self.eh_proj.weight[:, d:].copy_(torch.eye(d))
            for lin in (self.block.self_attn.q_proj, self.block.self_attn.k_proj, self.block.self_attn.v_proj,
                        self.block.mlp.gate_proj, self.block.mlp.up_proj):
                nn.init.normal_(lin.weight, 0.0, 0.02)
            self.block.self_attn.o_proj.weight.zero_()
            self.block.mlp.down_proj.weight.zero_()

    # Tied parts, read through detached weights: no gradient ever reaches the verifier.
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.tied.embed.weight.detach())

    def out_norm(self, x: torch.Tensor) -> torch.Tensor:
        norm = self.tied.norm
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", self.config.rms_norm_eps))
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return norm.weight.detach() * xf.to(x.dtype)

    def logits(self, u: torch.Tensor) -> torch.Tensor:
        """l = W_lm u."""
        return F.linear(u, self.tied.lm_head.weight.detach())

    def forward(self, next_tokens: torch.Tensor, states: torch.Tensor, positions: torch.Tensor,
                cache: HeadCache | None = None, valid: torch.Tensor | None = None) -> torch.Tensor:
        """u = N_o(B_theta(P([N_e(E(x_{p+1})); N_h(a_p)]); pos)) for rows (B, L) (eq. 1)."""
        z = self.eh_proj(torch.cat([self.enorm(self.embed(next_tokens)), self.hnorm(states)], dim=-1))
        return self.out_norm(self.block(z, positions, cache, valid))


# -- training targets ------------------------------------------------------------------------------

@dataclass
class VerifierTrace:
    """One sample as the frozen verifier saw it: tokens, post-norm states b, 1-D positions."""

    input_ids: torch.Tensor  # (L,)
    states: torch.Tensor  # (L, d), b_p = hidden_states[-1] (after the final norm)
    positions: torch.Tensor  # (L,), temporal row of the M-RoPE ids
    prompt_len: int


def image_inputs(pixel_values: torch.Tensor | None, image_grid_thw: torch.Tensor | None, device) -> dict:
    """``pixel_values``/``image_grid_thw`` kwargs; none on a text-only prompt (an Encoded without
    image has zero grid rows), since generate() runs the vision tower on any pixel_values key."""
    if image_grid_thw is None or image_grid_thw.numel() == 0:
        return {}
    return {"pixel_values": pixel_values.to(device), "image_grid_thw": image_grid_thw.to(device)}


@torch.no_grad()
def trace(model: nn.Module, sample: Encoded) -> VerifierTrace:
    """One verifier forward pass over a full sample (prompt and response)."""
    device = next(model.parameters()).device
    ids = sample.input_ids[None].to(device)
    mm = sample.mm_token_type_ids[None].to(device)
    images = image_inputs(sample.pixel_values, sample.image_grid_thw, device)
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
    ce: float = 0.85
    kl: float = 0.45
    mse: float = 0.45
    beta: float = 0.6  # depth decay of alpha_k


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
    from model.decode import generate  # model.decode imports this module

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
class FitConfig:
    """Draft-head fitting (Table 3: lr 1e-4 to 5e-4 for the 3B model; the tiny one takes more)."""

    depths: int = 3
    steps: int = 300
    batch_size: int = 8
    lr: float = 2e-3
    warmup_steps: int = 15
    min_lr_ratio: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    self_distill: bool = True
    max_new_tokens: int = 192  # self-distilled response length
    seed: int = 0
    log_every: int = 50
    weights: LossWeights = field(default_factory=LossWeights)

    @classmethod
    def from_dict(cls, d: dict | None) -> "FitConfig":
        d = dict(d or {})
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        if "weights" in d:
            d["weights"] = LossWeights(**d["weights"])
        return cls(**d)


@dataclass
class FitResult:
    head: DraftHead
    history: list[dict]  # per logged step: step, loss, ce/kl/mse per depth, lr
    seconds: float
    trainable: int


def trainable_parameters(head: DraftHead) -> list[nn.Parameter]:
    """N_e, N_h, P, B_theta: everything the head registers (the tied verifier parts are not registered)."""
    return list(head.parameters())


def fit_head(model: nn.Module, samples: list[Encoded], cfg: FitConfig = FitConfig(),
             head: DraftHead | None = None) -> FitResult:
    """Fit the draft head on the frozen verifier (5.6). ``samples`` carry their responses (run
    `self_distill` first for FastMTP's self-distilled data). The verifier is only read."""
    from model.optim import lr_factor

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


# -- persistence and export ------------------------------------------------------------------------

def save_head(head: DraftHead, path: str | Path, extra: dict | None = None) -> Path:
    """``model.safetensors`` (the head's own tensors) + ``mtp_config.json`` (sizes and the
    DeepSeek/vLLM name mapping). The tied tensors stay in the verifier checkpoint."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(path / HEAD_WEIGHTS))
    doc = {"head": asdict(head.config), "concat_order": ["embedding", "hidden"],
           "rope": "1-D, temporal row of the verifier's M-RoPE ids",
           "vllm": {"method": "mtp", "num_speculative_tokens": head.config.depths},
           "deepseek_mapping": vllm_mtp_mapping(head), **(extra or {})}
    (path / HEAD_CONFIG).write_text(json.dumps(doc, indent=2))
    return path


def load_head(path: str | Path, verifier: nn.Module) -> DraftHead:
    from safetensors.torch import load_file

    path = Path(path)
    cfg = HeadConfig(**json.loads((path / HEAD_CONFIG).read_text())["head"])
    head = DraftHead(cfg, verifier)
    head.load_state_dict(load_file(str(path / HEAD_WEIGHTS)))
    p = next(verifier.parameters())
    return head.to(device=p.device, dtype=p.dtype).eval()


TIED_NAMES = {"tied.embed.weight": "embed_tokens.weight", "tied.norm.weight": "shared_head.norm.weight",
              "tied.lm_head.weight": "shared_head.head.weight"}


def vllm_mtp_mapping(head: DraftHead, family: str = "deepseek") -> dict[str, str]:
    """{our tensor name: DeepSeek-V3 HF name} for every head tensor plus the three tied ones
    (``tied.*``). The MTP layer sits after the verifier's layers: index ``num_hidden_layers``."""
    if family != "deepseek":
        raise ValueError(f"mtp: no serving layout for family {family!r}; known: 'deepseek'")
    prefix = f"model.layers.{head.config.num_hidden_layers}."
    mapping = {}
    for name in head.state_dict():
        mapping[name] = prefix + (name[len("block."):] if name.startswith("block.") else name)
    mapping.update({ours: prefix + theirs for ours, theirs in TIED_NAMES.items()})
    return mapping


def export_serving(head: DraftHead, path: str | Path, family: str = "deepseek") -> Path:
    """The head under DeepSeek-V3 MTP names, tied tensors copied in, as one safetensors file."""
    from safetensors.torch import save_file

    tensors = {f"tied.{k}.weight": getattr(head.tied, k).weight for k in ("embed", "norm", "lm_head")}
    tensors.update(head.state_dict())
    mapping = vllm_mtp_mapping(head, family)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({mapping[k]: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(out))
    return out


# -- corpus entry point (CLI, make train) ----------------------------------------------------------

def fit_for_checkpoint(loaded, corpus: str, cfg: FitConfig = FitConfig(), limit: int | None = None,
                       out: str | Path | None = None) -> FitResult:
    """Fit a head for ``loaded`` (model.models.Loaded) on the corpus's train split; save it to
    ``out`` when given."""
    from model.data import DataConfig, SampleSource

    samples = [s.encoded for s in SampleSource(loaded.processor, DataConfig(path=corpus), "train")]
    samples = samples[:limit] if limit else samples
    if cfg.self_distill:
        samples = self_distill(loaded.model, samples, loaded.processor.eos_token_id, cfg.max_new_tokens,
                               loaded.processor.tokenizer.pad_token_id or 0)
    result = fit_head(loaded.model, samples, cfg)
    if out is not None:
        save_head(result.head, out, {"verifier": str(loaded.source), "fit": {"steps": cfg.steps,
                                                                              "samples": len(samples)}})
    return result


def main(argv: list[str] | None = None) -> None:
    from model.models import load

    ap = argparse.ArgumentParser(description="Fit a FastMTP draft head (Jina-OCR-v1 3.1, 5.6) on a frozen "
                                             "verifier checkpoint and save it as safetensors + mtp_config.json.")
    ap.add_argument("--checkpoint", required=True, help="verifier: local checkpoint folder, 'tiny' or 'tiny-moe'")
    ap.add_argument("--out", required=True, help="folder for the head")
    ap.add_argument("--corpus", default="out/corpus", help="corpus folder (train split is used)")
    ap.add_argument("--limit", type=int, help="at most this many training pages")
    ap.add_argument("--steps", type=int, default=FitConfig.steps)
    ap.add_argument("--depths", type=int, default=FitConfig.depths, help="K recursive steps")
    ap.add_argument("--lr", type=float, default=FitConfig.lr)
    ap.add_argument("--batch-size", type=int, default=FitConfig.batch_size)
    ap.add_argument("--max-new-tokens", type=int, default=FitConfig.max_new_tokens,
                    help="length of the self-distilled responses")
    ap.add_argument("--no-self-distill", action="store_true", help="fit on the corpus responses as written")
    ap.add_argument("--bench", action="store_true", help="print the Table 8 decoding table on eval pages")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    loaded = load(args.checkpoint)
    cfg = FitConfig(depths=args.depths, steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                    max_new_tokens=args.max_new_tokens, self_distill=not args.no_self_distill)
    result = fit_for_checkpoint(loaded, args.corpus, cfg, args.limit, args.out)
    last = result.history[-1]
    print(f"head: {result.trainable} trainable parameters, {cfg.steps} steps in {result.seconds:.0f}s, "
          f"loss {result.history[0]['loss']:.3f} -> {last['loss']:.3f}; saved to {args.out}")
    if args.bench:
        from model.decode import bench_on_corpus, format_table

        print(format_table(bench_on_corpus(loaded, result.head, args.corpus)))


if __name__ == "__main__":
    main()
