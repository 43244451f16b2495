"""The FastMTP draft head: one shared dense block applied recursively on a frozen verifier, and its files.

Jina-OCR-v1 3.1 (architecture, state-shift alignment, eq. 1). The head owns only N_e, N_h
(RMSNorm), the projection P (Linear 2d -> d, no bias) and the block B_theta (pre-norm dense
transformer layer sized like one verifier layer). The token embedding E, the output norm N_o and
the LM head W_lm are the verifier's own modules, held by reference and only ever read through
detached weights, so fitting cannot change them:

    z = P([N_e(E(x_next)); N_h(a)])        u = N_o(B_theta(z; pos))        logits = W_lm u

RoPE. B_theta uses 1-D RoPE with the verifier's ``rope_theta`` and ``head_dim`` and takes its
positions from the temporal row (row 0) of the verifier's 3-D M-RoPE position ids. For text
tokens the three M-RoPE rows are equal, so on the response this is exactly the verifier's RoPE;
on image tokens the head sees only the temporal index, which is all a 1-D rotary can hold.

Fitting lives in `model.mtp`, speculative decoding in `model.decode`; both import this module.

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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from model.models import text_model
from schemas.config import load, option

HEAD_WEIGHTS = "model.safetensors"
HEAD_CONFIG = "mtp_config.json"


# -- the head --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HeadConfig:
    """Sizes of the draft block: those of one verifier decoder layer (read by `from_verifier`)."""

    hidden_size: int = option(help="d: the verifier's hidden size")
    intermediate_size: int = option(help="the dense MLP's inner size (the verifier's intermediate_size)")
    num_attention_heads: int = option(help="query heads of the block's attention")
    num_key_value_heads: int = option(help="key/value heads (GQA when fewer than the query heads)")
    head_dim: int = option(help="size of one attention head")
    rope_theta: float = option(help="RoPE base, the verifier's")
    rms_norm_eps: float = option(help="epsilon of the head's RMSNorms")
    vocab_size: int = option(help="the verifier's vocabulary size")
    num_hidden_layers: int = option(help="the verifier's decoder layers; the head is layer N in DeepSeek's numbering")
    depths: int = option(3, help="K: recursive steps the head was fitted for")

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


# -- files: the head's own tensors, and DeepSeek-V3 / vLLM names -----------------------------------

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
    cfg = load(HeadConfig, json.loads((path / HEAD_CONFIG).read_text())["head"], f"{path / HEAD_CONFIG}:head")
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
