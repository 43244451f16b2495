"""Trainable-module selection per training phase, AdamW, and the warmup + cosine schedule.

Jina-OCR-v1 Table 3: alignment SFT trains the decoder, the cross-modal projector and the output head
with the vision tower frozen; robustness SFT also unfreezes the vision tower at its own (lower)
learning rate; GRPO trains decoder and projector. `param_groups` encodes exactly that, so every
loop (SFT, GRPO) freezes and groups parameters the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from model.models import projector, vision_tower
from schemas.config import option

PHASES = ("alignment", "robustness", "grpo")


@dataclass(frozen=True)
class OptimConfig:
    """The ``optim`` block of an SFT phase: AdamW and the warmup + cosine schedule."""

    lr: float = option(1e-3, help="peak learning rate of the decoder, projector and head")
    vision_lr: float = option(1e-4, help="learning rate of the vision tower (robustness SFT only)")
    weight_decay: float = option(0.0, help="AdamW weight decay")
    betas: tuple[float, float] = option((0.9, 0.95), help="AdamW betas")
    warmup_steps: int = option(10, help="linear warmup steps")
    min_lr_ratio: float = option(0.1, help="the cosine decays to lr * min_lr_ratio")
    train_vision: bool | None = option(None, help="train the vision tower at vision_lr (unset: robustness SFT "
                                       "only, Table 3; a from-scratch tiny model needs it from the start)")

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.vision_lr <= 0 or self.weight_decay < 0 or self.warmup_steps < 0:
            raise ValueError("optim: need lr > 0, vision_lr > 0, weight_decay >= 0, warmup_steps >= 0")
        if not 0 <= self.min_lr_ratio <= 1 or len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError("optim: need 0 <= min_lr_ratio <= 1 and two betas in [0, 1)")


def param_groups(model: nn.Module, phase: str, cfg: OptimConfig) -> list[dict]:
    """Freeze what the phase keeps fixed and return AdamW groups for the rest.

    The projector (vision merger) lives inside the vision tower's module tree, so it is split out:
    it trains in every phase, while the rest of the tower trains only in robustness SFT.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown training phase {phase!r}; expected one of {PHASES}")
    proj = {id(p) for p in projector(model).parameters()}
    tower = {id(p) for p in vision_tower(model).parameters()} - proj
    decoder, vision = [], []
    train_vision = phase == "robustness" if cfg.train_vision is None or phase == "grpo" else cfg.train_vision
    for p in model.parameters():
        if id(p) in tower:
            p.requires_grad_(train_vision)
            if train_vision:
                vision.append(p)
        else:
            p.requires_grad_(True)
            decoder.append(p)
    groups = [{"params": decoder, "lr": cfg.lr, "name": "decoder+projector+head"}]
    if vision:
        groups.append({"params": vision, "lr": cfg.vision_lr, "name": "vision"})
    return groups


def make_optimizer(model: nn.Module, phase: str, cfg: OptimConfig, total_steps: int):
    """AdamW over the phase's groups and a LambdaLR with linear warmup then cosine decay."""
    groups = param_groups(model, phase, cfg)
    opt = torch.optim.AdamW(groups, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step, cfg.warmup_steps, total_steps, cfg.min_lr_ratio))
    return opt, sched


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Multiplier on the base rate: linear warmup to 1, then cosine down to ``min_ratio``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
