"""Supervised fine-tuning: alignment SFT (packed) and robustness SFT (unpacked, degraded pages).

Jina-OCR-v1 5.1-5.2 and Table 3. One plain-PyTorch loop serves both phases; what differs is the
config: which modules train (`model.optim.param_groups`), packing, degradations and domain weights
(`model.data.DataConfig`). The loop is AdamW with warmup + cosine, gradient accumulation, gradient
clipping, bf16 autocast on CUDA (fp32 on CPU), optional 5.4 regularizers, and checkpoints that
resume exactly (`model.checkpoint`). Run one phase alone with ``python -m model.sft --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tqdm import tqdm

from model.attention import use_segment_attention
from model.batches import BatchStream
from model.checkpoint import STATE_FILE, load_checkpoint, resume_mismatches, save_checkpoint
from model.data import DataConfig
from model.models import Loaded, ModelLoadError, load
from model.optim import OptimConfig, make_optimizer, trainable
from model.regularizers import RegularizerConfig, regularizer_loss
from schemas.config import ConfigError, option, read_yaml
from schemas.config import load as load_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTConfig:
    """One SFT phase: the ``alignment`` and ``robustness`` blocks of ``configs/train.yaml``."""

    phase: Literal["alignment", "robustness"] = option(
        "alignment", help="which modules train (model.optim.param_groups); make train: the block's name")
    steps: int = option(100, help="optimizer steps")
    grad_accum: int = option(1, help="batches per optimizer step")
    max_grad_norm: float = option(1.0, help="gradient clipping norm")
    log_every: int = option(10, help="log every this many steps (0: never)")
    save_every: int = option(0, help="checkpoint every this many steps (0: only at the end)")
    seed: int = option(0, help="torch seed (make train: the run's seed unless set)")
    optim: OptimConfig = option(default_factory=OptimConfig, help="AdamW and its schedule")
    data: DataConfig = option(default_factory=DataConfig, help="sampling, packing and degradation")
    regularizers: RegularizerConfig = option(default_factory=RegularizerConfig, help="5.4 regularizer coefficients")

    def __post_init__(self) -> None:
        for name in ("steps", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("log_every", "save_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: off), got {getattr(self, name)}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")


@dataclass
class StepLog:
    step: int
    loss: float
    ce: float
    lr: float
    tokens_per_s: float
    response_tokens: int
    parts: dict[str, float] = field(default_factory=dict)
    data_seconds: float = 0.0  # of the step's wall time, spent reading, decoding and packing samples


def target_positions(labels: torch.Tensor) -> torch.Tensor:
    """Indices t (row 0) whose logits predict a response token (label at t+1 is not -100)."""
    return (labels[0, 1:] != -100).nonzero()[:, 0]


def response_ce(logits: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, int]:
    """Summed next-token cross-entropy over response tokens, and their count.

    Position t predicts token t+1; labels are -100 on prompt, image and padding tokens. With
    ``keep`` (from `target_positions`), ``logits`` holds only those positions (batch of one row):
    computing the vocabulary projection for prompt and image tokens would be wasted work.
    """
    if keep is not None:
        targets = labels[0, keep + 1]
        loss = F.cross_entropy(logits[0].float(), targets, reduction="sum")
        return loss, int(targets.numel())
    shift_logits = logits[:, :-1].float()
    shift_labels = labels[:, 1:]
    n = int((shift_labels != -100).sum())
    loss = F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.reshape(-1),
                           ignore_index=-100, reduction="sum")
    return loss, n


class RouterCapture:
    """Collects each MoE layer's router logits during a forward pass.

    Asking the model for ``output_router_logits`` makes transformers compute its own auxiliary
    loss from the attention mask, which breaks on the 4-D block masks of packed rows; a forward
    hook on the router modules reads the same logits without that side effect.
    """

    def __init__(self, model: torch.nn.Module, enabled: bool):
        self.logits: list[torch.Tensor] = []
        self._hooks = []
        if enabled:
            for module in model.modules():
                if type(module).__name__.endswith("TopkRouter") or type(module).__name__.endswith("Router"):
                    self._hooks.append(module.register_forward_hook(self._hook))
            if not self._hooks:
                raise ValueError("router regularizers are on but the model has no MoE router")

    def _hook(self, module, args, output) -> None:
        self.logits.append(output[0] if isinstance(output, tuple) else output)

    def take(self) -> tuple[torch.Tensor, ...]:
        out, self.logits = tuple(self.logits), []
        return out

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


def autocast_for(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def train_sft(loaded: Loaded, cfg: SFTConfig, out_dir: str | Path, resume_from: str | Path | None = None,
              progress: bool = True, stop_after: int | None = None) -> list[StepLog]:
    """Run ``cfg.steps`` optimizer steps and write the final checkpoint to ``out_dir``.

    ``stop_after`` ends the run early at that step (checkpoint written there, schedule unchanged),
    as a preempted job would; resuming from it continues as if never stopped. ``resume_from`` must
    hold a checkpoint of this phase written by the same model config and processor as ``loaded``
    (only weights and optimizer state are read from it): `ModelLoadError` otherwise.
    """
    model, processor = loaded.model, loaded.processor
    if resume_from is not None:
        check_resumable(resume_from, loaded, cfg.phase)
    device = next(model.parameters()).device
    torch.manual_seed(cfg.seed)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg.phase, cfg.optim, cfg.steps)
    stream = BatchStream(cfg.data, processor, model, split="train")
    reg = cfg.regularizers.for_model(model)
    routers = RouterCapture(model, reg.needs_router)
    segments = use_segment_attention(model)  # per-sample causal attention in packed rows
    start = 0
    if resume_from is not None:
        state = load_checkpoint(resume_from, model, optimizer, scheduler)
        stream.load_state_dict(state["stream"])
        start = int(state["step"])
    log.info("%s SFT: %d trainable of %d parameters, steps %d..%d", cfg.phase, trainable(model),
             sum(p.numel() for p in model.parameters()), start, cfg.steps)
    history: list[StepLog] = []
    batches = iter(stream)
    end = min(cfg.steps, stop_after) if stop_after else cfg.steps
    bar = tqdm(range(start, end), desc=f"{cfg.phase} SFT", disable=not progress, leave=False)
    for step in bar:
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        micro = [next(batches) for _ in range(cfg.grad_accum)]
        data_seconds = time.perf_counter() - t0
        total_tokens = sum(b.n_response_tokens for b in micro)
        loss_sum, ce_sum, parts_sum = 0.0, 0.0, {}
        for batch in micro:
            batch = batch.to(device) if hasattr(batch, "to") else batch
            with autocast_for(device):
                keep = target_positions(batch.labels)
                out = model(**batch.model_kwargs(segments=segments), output_hidden_states=reg.needs_hidden,
                            logits_to_keep=keep)
            out.router_logits = routers.take()
            ce, n = response_ce(out.logits, batch.labels, keep)
            # Token-level mean over the whole accumulated step, so micro-batches of different
            # sizes weigh by their response tokens.
            loss = ce / max(1, total_tokens)
            reg_loss, parts = regularizer_loss(reg, out, batch.labels != -100, batch.segment_ids,
                                               out.hidden_states[-1] if reg.needs_hidden else None)
            loss = loss + reg_loss / len(micro)
            loss.backward()
            loss_sum += float(loss.detach())
            ce_sum += float(ce.detach())
            for k, v in parts.items():
                parts_sum[k] = parts_sum.get(k, 0.0) + float(v) / len(micro)
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.max_grad_norm)
        optimizer.step()
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        dt = time.perf_counter() - t0
        entry = StepLog(step + 1, loss_sum, ce_sum / max(1, total_tokens), lr, total_tokens / dt, total_tokens,
                        parts_sum, data_seconds)
        history.append(entry)
        bar.set_postfix(loss=f"{entry.loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{entry.tokens_per_s:.0f}")
        if cfg.log_every and (step + 1) % cfg.log_every == 0:
            log.info("step %d loss %.4f ce %.4f lr %.2e tokens/s %.0f %s", step + 1, entry.loss, entry.ce, lr,
                     entry.tokens_per_s, {k: round(v, 4) for k, v in parts_sum.items()})
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < end:
            _save(out_dir, loaded, optimizer, scheduler, stream, step + 1, cfg)
    routers.close()
    _save(out_dir, loaded, optimizer, scheduler, stream, end, cfg)
    if stream.skipped:
        log.warning("skipped samples: %s", dict(stream.skipped))
    _write_history(Path(out_dir), history, stream)
    model.eval()
    return history


def check_resumable(path: str | Path, loaded: Loaded, phase: str) -> None:
    """`ModelLoadError` unless ``path`` is a training checkpoint of ``phase`` whose model config and
    processor files are ``loaded``'s."""
    path = Path(path)
    if not (path / STATE_FILE).exists():
        raise ModelLoadError(f"cannot resume from {path}: no {STATE_FILE} there (not a training checkpoint)")
    saved_phase = json.loads((path / STATE_FILE).read_text()).get("state", {}).get("phase")
    if saved_phase is not None and saved_phase != phase:
        raise ModelLoadError(f"cannot resume from {path}: it is a {saved_phase} SFT checkpoint, the config's "
                             f"phase is {phase}")
    diffs = resume_mismatches(path, loaded.model, loaded.processor)
    if diffs:
        raise ModelLoadError(f"cannot resume from {path}: the model given differs from the one that wrote it "
                             f"(resuming copies only its weights): " + "; ".join(diffs)
                             + ". Load the model from the checkpoint folder itself (python -m model.sft "
                             "--resume DIR without --model)")


def _save(out_dir, loaded: Loaded, optimizer, scheduler, stream, step: int, cfg: SFTConfig) -> None:
    save_checkpoint(out_dir, loaded.model, loaded.processor, optimizer, scheduler,
                    {"step": step, "stream": stream.state_dict(), "phase": cfg.phase})


def _write_history(out_dir: Path, history: list[StepLog], stream) -> None:
    with open(out_dir / "train_log.jsonl", "a") as f:
        for h in history:
            f.write(json.dumps(asdict(h)) + "\n")
    (out_dir / "skipped.json").write_text(json.dumps(dict(stream.skipped), indent=2))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m model.sft",
                                 description="Run one SFT phase (alignment or robustness) on corpus shards.")
    ap.add_argument("--model", help="'tiny', 'tiny-moe' or a local checkpoint folder (default: the --resume "
                                    "folder's own model and processor, else tiny); with --resume it must be the "
                                    "model that wrote that folder")
    ap.add_argument("--config", help="YAML with SFTConfig keys (phase, steps, optim, data, regularizers)")
    ap.add_argument("--out", help="checkpoint folder to write (required without --resume; with it, default: the "
                                  "--resume folder, which the run then continues in place)")
    ap.add_argument("--resume", help="training checkpoint folder to resume from (the config of the run that wrote it)")
    ap.add_argument("--steps", type=int, help="override steps")
    args = ap.parse_args(argv)
    if args.out is None and args.resume is None:
        ap.error("--out is required unless --resume is given")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        raw: dict[str, Any] = (read_yaml(args.config) or {}) if args.config else {}
        if args.steps:
            raw["steps"] = args.steps
        cfg = load_config(SFTConfig, raw, "sft")
        loaded = load(args.model or args.resume or "tiny")
        train_sft(loaded, cfg, args.out or args.resume, resume_from=args.resume)
    except (ConfigError, ModelLoadError, FileNotFoundError) as exc:  # a bad key, value, config file or checkpoint
        print(f"model.sft: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
