"""What dedup is configured with: ``DedupConfig`` (the ``clean.dedup`` block) and its ``MinHashConfig``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from schemas.config import option

PHASH_SIZE = 16  # 16 x 16 DCT coefficients: the 256-bit pHash used for near images
PHASH_BITS = PHASH_SIZE * PHASH_SIZE


@dataclass(frozen=True)
class MinHashConfig:
    """MinHash LSH over the response text; the defaults are datatrove's ``MinhashConfig``.

    ``bands`` x ``rows``: 14 bands of 8 min-hashes, 112 permutations. A pair with Jaccard
    similarity s shares a band with probability 1 - (1 - s**8)**14: 0.65 at the threshold
    s = (1/14)**(1/8) = 0.72, 0.92 at s = 0.8, 0.21 at s = 0.6, 0.04 at s = 0.5. Word 5-grams
    make this strict: editing 3 % of the words leaves s of about 0.75, 5 % about 0.63.
    """

    ngram: int = option(5, help="words per shingle")
    bands: int = option(14, help="LSH bands (one mh key each)")
    rows: int = option(8, help="min-hashes per band (bands x rows permutations)")
    seed: int = option(1, help="derives the permutations; keys from different seeds never match")
    min_words: int = option(20, help="texts with fewer normalised words get no mh keys (short and empty labels "
                                     "would otherwise all collide; the short stage handles them)")
    verify_jaccard: float | None = option(0.5, help="minimum Jaccard estimated from the members' sketches for an "
                                                    "edge; null accepts every band collision")

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.bands < 1 or self.rows < 1 or self.min_words < 0:
            raise ValueError(f"MinHashConfig values must be positive: {self}")
        if self.verify_jaccard is not None and not 0.0 <= self.verify_jaccard <= 1.0:
            raise ValueError(f"verify_jaccard must be in [0, 1] or None, got {self.verify_jaccard}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


@dataclass(frozen=True)
class DedupConfig:
    """Whether dedup runs, which duplicate kinds it finds and how (``pipelines/clean/dedup.py``).

    Built directly, ``minhash`` may also be a mapping of ``MinHashConfig`` fields and
    ``source_priority`` a mapping; both are stored typed (priority as sorted pairs).
    """

    enabled: bool = option(True, help="run the dedup stage after write (the DAG's switch)")
    exact_image: bool = option(True, help="drop exact duplicate images (hash of the decoded pixels)")
    near_image: bool = option(True, help="drop near-duplicate images (256-bit pHash)")
    near_text: bool = option(True, help="drop near-duplicate texts (MinHash LSH)")
    phash_bands: int = option(16, help="near images: bands sampled from the 256-bit pHash (one ph key each)")
    phash_band_bits: int = option(32, help="near images: bits per band")
    phash_max_distance: int = option(20, help="near images: largest Hamming distance of an edge")
    phash_seed: int = option(1, help="near images: seed of the sampled bit positions")
    max_centres: int = option(64, help="centres a verified group is scanned against (bounds a hot key's cost)")
    max_pixels: int = option(64_000_000, help="decoded image cap, as render.max_pixels")
    minhash: MinHashConfig = option(default_factory=MinHashConfig, help="near texts: MinHash LSH settings")
    source_priority: tuple[tuple[str, float], ...] | dict[str, float] = option(
        (), help="source name -> rank; the highest rank keeps a duplicate group (sources not named rank 0)")

    def __post_init__(self) -> None:
        if isinstance(self.minhash, Mapping):
            object.__setattr__(self, "minhash", MinHashConfig(**self.minhash))
        priority = self.source_priority
        pairs = priority.items() if isinstance(priority, Mapping) else priority
        object.__setattr__(self, "source_priority", tuple(sorted((str(k), float(v)) for k, v in pairs)))
        if self.phash_bands < 1 or not 1 <= self.phash_band_bits <= PHASH_BITS:
            raise ValueError(f"phash_bands must be >= 1 and phash_band_bits in [1, {PHASH_BITS}]")
        if not 0 <= self.phash_max_distance <= PHASH_BITS:
            raise ValueError(f"phash_max_distance must be in [0, {PHASH_BITS}], got {self.phash_max_distance}")
        if self.max_centres < 1:
            raise ValueError("max_centres must be >= 1")

    def rank(self, source: str) -> float:
        return dict(self.source_priority).get(source, 0.0)
