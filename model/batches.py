"""SFT batches: samples packed into one row with position shift (Jina-OCR-v1 5.1), and the resumable stream.

``pack`` / ``single`` build a ``Batch``: several samples in one row (alignment SFT) with a
block-diagonal causal mask so attention stays inside each sample, per-sample M-RoPE positions, the
response position-ID shift of 5.1 (``shift_positions``) and loss labels on response tokens only.
``BatchStream`` draws records from `model.sampler`, encodes them with `model.data.SampleSource` and
packs them; it is exactly resumable.

Batches have batch size 1 and no padding: a packed row is as long as its samples (at most
``max_length``). Labels follow the transformers convention (aligned with ``input_ids``; the loss
shifts them by one), so the last token of a sample never predicts the next sample's first token:
that label is a prompt token, -100.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np
import torch

from model.data import DataConfig, Sample, SampleSource
from model.models import rope_index
from model.processing import PageProcessor
from model.sampler import DomainSampler, key_seed

IGNORE_INDEX = -100
_MAX_SKIPS_IN_A_ROW = 10_000


@dataclass
class Batch:
    """One training row (batch size 1) holding ``n_samples`` samples back to back."""

    input_ids: torch.Tensor  # (1, L) long
    labels: torch.Tensor  # (1, L) long; -100 except response tokens (incl. end-of-turn)
    position_ids: torch.Tensor  # (3, 1, L) M-RoPE positions, response shift applied
    attention_mask: torch.Tensor  # (1, 1, L, L) bool, True = attend; block-diagonal causal
    mm_token_type_ids: torch.Tensor  # (1, L)
    pixel_values: torch.Tensor  # (patches of all images, C*T*P*P)
    image_grid_thw: torch.Tensor  # (n_images, 3)
    n_samples: int
    n_response_tokens: int
    sample_ids: list[str]
    segment_ids: torch.Tensor  # (1, L) long: index of the sample each token belongs to

    def model_kwargs(self, segments: bool = False) -> dict:
        """Everything the model forward needs, without labels.

        ``segments``: the model attends with ``model.attention.SEGMENT_SDPA``, so the row goes in as
        per-sample lengths instead of the (L, L) block mask (same result, a fraction of the work).
        """
        kwargs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                  "position_ids": self.position_ids, "mm_token_type_ids": self.mm_token_type_ids,
                  "pixel_values": self.pixel_values, "image_grid_thw": self.image_grid_thw}
        if segments:
            kwargs["attention_mask"] = None
            kwargs["segment_lengths"] = torch.bincount(self.segment_ids[0]).tolist()
        return kwargs

    def to(self, device: torch.device | str) -> "Batch":
        moved = {f.name: getattr(self, f.name).to(device) if isinstance(getattr(self, f.name), torch.Tensor)
                 else getattr(self, f.name) for f in fields(self)}
        return Batch(**moved)


def shift_positions(positions: torch.Tensor, prompt_len: int, L: int, L_train: int,
                    rng: np.random.Generator, prob: float, cap: int) -> torch.Tensor:
    """Position-ID shift of Jina-OCR-v1 5.1 for one sample; returns a new tensor.

    With probability ``prob`` the response positions (index >= ``prompt_len`` on the last axis,
    every M-RoPE row) move up by one offset drawn uniformly from [1, min(5L, L_train/4)]; prompt
    positions never move. Then all ids are capped at ``cap - 1`` (5.1 caps at 32,768).
    """
    out = positions.clone()
    if rng.random() < prob:
        high = max(1, min(5 * L, L_train // 4))
        out[..., prompt_len:] += int(rng.integers(1, high + 1))
    return out.clamp_(max=cap - 1)


def _block_causal(lengths: list[int]) -> torch.Tensor:
    """(L, L) bool: token i attends to j iff j <= i and both are in the same sample."""
    seg = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    total = int(seg.numel())
    causal = torch.ones(total, total, dtype=torch.bool).tril()
    return causal & (seg[:, None] == seg[None, :])


def pack(samples: list[Sample], rng: np.random.Generator, cfg: DataConfig, model: torch.nn.Module) -> Batch:
    """Samples back to back in one row: own positions (restarting per sample, then shifted), own
    attention block, loss only on their responses. Raises if they exceed ``cfg.max_length``."""
    if not samples:
        raise ValueError("data: pack needs at least one sample")
    total = sum(s.length for s in samples)
    if total > cfg.max_length:
        raise ValueError(f"data: {total} tokens do not fit a row of max_length {cfg.max_length}")
    ids, labels, positions, mm, segments = [], [], [], [], []
    for i, s in enumerate(samples):
        e = s.encoded
        pos = rope_index(model, e.input_ids[None], e.mm_token_type_ids[None], e.image_grid_thw)[:, 0]
        positions.append(shift_positions(pos.long(), e.prompt_len, e.length, cfg.max_length, rng,
                                         cfg.shift_prob, cfg.position_cap))
        lab = e.input_ids.clone()
        lab[:e.prompt_len] = IGNORE_INDEX
        ids.append(e.input_ids)
        labels.append(lab)
        mm.append(e.mm_token_type_ids)
        segments.append(torch.full((e.length,), i, dtype=torch.long))
    label_row = torch.cat(labels)[None]
    return Batch(
        input_ids=torch.cat(ids)[None],
        labels=label_row,
        position_ids=torch.cat(positions, dim=-1)[:, None],
        attention_mask=_block_causal([s.length for s in samples])[None, None],
        mm_token_type_ids=torch.cat(mm)[None],
        pixel_values=torch.cat([s.encoded.pixel_values for s in samples], dim=0),
        image_grid_thw=torch.cat([s.encoded.image_grid_thw for s in samples], dim=0),
        n_samples=len(samples),
        n_response_tokens=int((label_row != IGNORE_INDEX).sum()),
        sample_ids=[s.id for s in samples],
        segment_ids=torch.cat(segments)[None],
    )


def single(sample: Sample, rng: np.random.Generator, cfg: DataConfig, model: torch.nn.Module) -> Batch:
    """One sample per row (robustness SFT keeps long pages intact); same shift rule as ``pack``."""
    return pack([sample], rng, cfg, model)


class BatchStream:
    """Endless training batches for one split; ``state_dict`` / ``load_state_dict`` resume exactly.

    Packing is greedy: samples join the current row while they fit ``max_length``; the first one
    that does not is carried over to start the next row. Two RNGs: ``image_rng`` (degradations,
    drawn while encoding) and ``shift_rng`` (position shifts, drawn while packing). The saved state
    describes the stream just before the carried-over sample was drawn (sampler, image RNG, skip
    counts) plus the shift RNG after the last batch, so a resumed stream draws and encodes that
    sample again, bit-identical, instead of storing its tensors.
    """

    def __init__(self, cfg: DataConfig, processor: PageProcessor, model: torch.nn.Module, split: str = "train"):
        self.cfg, self.model = cfg, model
        self.sampler = DomainSampler.from_config(cfg, split)
        self.source = SampleSource(processor, cfg, split)
        self.image_rng = np.random.default_rng(key_seed("degrade", cfg.seed, split))
        self.shift_rng = np.random.default_rng(key_seed("shift", cfg.seed, split))
        self._carry: Sample | None = None
        self._carry_state: dict | None = None

    @property
    def skipped(self) -> Counter:
        return self.source.skipped

    def _snapshot(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "image_rng": self.image_rng.bit_generator.state,
                "skipped": dict(self.source.skipped)}

    def _draw(self) -> tuple[Sample, dict]:
        before = self._snapshot()
        for _ in range(_MAX_SKIPS_IN_A_ROW):
            sample = self.source.encode(self.sampler.next_record(), self.image_rng)
            if sample is not None:
                return sample, before
        raise RuntimeError(f"data: {_MAX_SKIPS_IN_A_ROW} records in a row were skipped "
                           f"({dict(self.source.skipped)}); check the corpus and max_sample_tokens")

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if not self.cfg.pack:
            return single(self._draw()[0], self.shift_rng, self.cfg, self.model)
        row: list[Sample] = []
        used = 0
        if self._carry is not None:
            row, used = [self._carry], self._carry.length
            self._carry = self._carry_state = None
        while used < self.cfg.max_length:
            sample, before = self._draw()
            if row and used + sample.length > self.cfg.max_length:
                self._carry, self._carry_state = sample, before
                break
            row.append(sample)
            used += sample.length
        return pack(row, self.shift_rng, self.cfg, self.model)

    def state_dict(self) -> dict:
        base = self._carry_state if self._carry is not None else self._snapshot()
        return {**json.loads(json.dumps(base)), "shift_rng": self.shift_rng.bit_generator.state}

    def load_state_dict(self, d: dict) -> None:
        self.sampler.load_state_dict(d["sampler"])
        self.image_rng.bit_generator.state = d["image_rng"]
        self.shift_rng.bit_generator.state = d["shift_rng"]
        self.source.skipped = Counter(d["skipped"])
        self._carry = self._carry_state = None
