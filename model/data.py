"""Training data settings and samples: ``DataConfig`` (the ``data`` block of an SFT phase) and records -> ``Sample``s.

Jina-OCR-v1 sections 5.1 (alignment SFT) and 5.2 (robustness SFT). The data flow, by module:
`model.records` streams corpus rows and assigns the held-out split; `model.sampler` draws them
domain-balanced and resumably; here ``SampleSource`` turns records into ``Sample``s (chat template,
image patches, response target) and skips bad ones with a reason (``corrupt_image``,
``image_too_large``, ``too_long``): counted in ``.skipped`` and logged once per record, never fatal.
Robustness SFT degrades page images with ``synth.augment.degrade`` at ``degrade_prob``.
`model.batches` packs samples into model batches and drives it all as a resumable ``BatchStream``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from model.processing import Encoded, PageProcessor
from model.records import RECORD_COLUMNS, iter_records
from schemas.config import option

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` block of an SFT phase; defaults in code, overridden from the phase's YAML.

    With ``domain_rates`` given, a present domain that is not listed gets the rate of key ``"*"``,
    else 0, and is logged; ``degrade_domains`` limits degradation (5.2 degrades historical scans).
    """

    path: str = option("out/corpus", help="corpus folder, shard file, glob or URI (make train: the run's corpus)")
    eval_fraction: float = option(0.1, help="share of train rows held out as the eval split (by id hash)")
    max_length: int = option(2048, help="L_train: tokens in one packed row")
    max_sample_tokens: int = option(1536, help="longer samples are skipped as too_long")
    pack: bool = option(True, help="several samples per row (alignment SFT); false: one per row (robustness)")
    domain_rates: dict[str, float] = option({}, help="domain -> relative sampling rate (empty: uniform)")
    upweight: dict[str, float] = option({}, help="domain -> factor multiplying its rate (5.2)")
    pages: dict[str, float] = option({}, help="page-id list file (one id a line: classifiers.retrieve's <mode>.ids) "
                                              "-> how many times a listed page counts in its stream (4.1 retrieval)")
    degrade_prob: float = option(0.0, help="share of training pages degraded by synth.augment.degrade")
    degrade_domains: tuple[str, ...] = option((), help="degrade only pages of these domains (empty: all)")
    shift_prob: float = option(0.4, help="probability of the 5.1 response position-ID shift per sample")
    position_cap: int = option(32768, help="position ids are capped at this minus one (5.1)")
    seed: int = option(0, help="sampling, degradation and shift RNGs (make train: the run's seed unless set)")
    max_pixels: int = option(64_000_000, help="decoded image cap; larger images are skipped")

    def __post_init__(self) -> None:
        for name in ("eval_fraction", "degrade_prob", "shift_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"data: {name} must be in [0, 1], got {value}")
        if not 0 < self.max_sample_tokens <= self.max_length:
            raise ValueError(f"data: need 0 < max_sample_tokens ({self.max_sample_tokens}) <= "
                             f"max_length ({self.max_length}), or no sample could fit a row")
        if self.position_cap <= 0:
            raise ValueError(f"data: position_cap must be positive, got {self.position_cap}")
        for name in ("domain_rates", "upweight", "pages"):
            bad = {k: v for k, v in getattr(self, name).items() if not float(v) >= 0}
            if bad:
                raise ValueError(f"data: {name} must be >= 0, got {bad}")
        object.__setattr__(self, "degrade_domains", tuple(self.degrade_domains))


def page_factors(cfg: DataConfig) -> dict[str, int]:
    """Page id -> repeat count from ``cfg.pages`` (the largest when lists overlap; at least 1)."""
    from pathlib import Path

    out: dict[str, int] = {}
    for path, factor in cfg.pages.items():
        if not Path(path).is_file():
            raise FileNotFoundError(f"data: pages list {path!r} does not exist")
        for line in Path(path).read_text().splitlines():
            if line.strip():
                out[line.strip()] = max(out.get(line.strip(), 1), max(1, round(float(factor))))
    return out


@dataclass
class Sample:
    """One encoded training sample and the record fields the trainers and rewards need."""

    encoded: Encoded
    id: str
    source: str
    domain: str
    response: str
    unit_tests: list[str]
    instruction: str

    @property
    def length(self) -> int:
        return self.encoded.length


class SampleSource:
    """Records -> Samples for one split; bad records are skipped with a reason, never fatal.

    Iterating yields the split's samples in file order (``records`` overrides where they come
    from); ``encode`` does one record, degrading its image when an RNG is given (training only).
    """

    def __init__(self, processor: PageProcessor, cfg: DataConfig = DataConfig(), split: str = "train",
                 records: Iterable[dict] | None = None):
        self.processor, self.cfg, self.split = processor, cfg, split
        self.records = records
        self.skipped: Counter = Counter()
        self._logged: set[tuple[str, str]] = set()

    def _skip(self, record_id: str, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        if (record_id, reason) not in self._logged:
            self._logged.add((record_id, reason))
            log.warning("data: skipping record %s: %s (%s)", record_id, reason, detail)

    def _degrade(self, record: dict, rng: np.random.Generator | None) -> bool:
        cfg = self.cfg
        if rng is None or cfg.degrade_prob <= 0:
            return False
        if cfg.degrade_domains and record.get("domain") not in cfg.degrade_domains:
            return False
        return bool(rng.random() < cfg.degrade_prob)

    def encode(self, record: dict, rng: np.random.Generator | None = None) -> Sample | None:
        from schemas.deadletter import RecordError
        from schemas.images import open_image  # the project's one guarded image opener

        rid = str(record.get("id"))
        try:
            image = open_image(record.get("image") or b"", self.cfg.max_pixels)
            try:
                image = image.convert("RGB")  # truncated payloads fail only when pixels are read
            except Exception as exc:
                raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
        except RecordError as exc:
            self._skip(rid, exc.reason, str(exc))
            return None
        if self._degrade(record, rng):
            from synth.augment import AugmentConfig, degrade

            image, _ = degrade(image, rng, AugmentConfig())
        encoded = self.processor.encode(record["instruction"], image, record["response"])
        if encoded.length > self.cfg.max_sample_tokens:
            self._skip(rid, "too_long", f"{encoded.length} tokens > max_sample_tokens {self.cfg.max_sample_tokens}")
            return None
        return Sample(encoded, rid, record.get("source", ""), record.get("domain", ""), record["response"],
                      list(record.get("unit_tests") or []), record["instruction"])

    def __iter__(self) -> Iterator[Sample]:
        records = self.records if self.records is not None else \
            iter_records(self.cfg.path, self.split, RECORD_COLUMNS, self.cfg.eval_fraction)
        for record in records:
            sample = self.encode(record)
            if sample is not None:
                yield sample


def eval_samples(cfg: DataConfig, processor: PageProcessor, limit: int | None = None) -> Iterator[Sample]:
    """The eval split's samples in file order (deterministic, never degraded), at most ``limit``."""
    for i, sample in enumerate(SampleSource(processor, cfg, "eval")):
        if limit is not None and i >= limit:
            return
        yield sample
