"""Exact and near duplicates: small per-record keys, decided in groups (Jina-OCR-v1 section 4.1).

Dedup never holds the corpus, nor a set of all records, in one place. It runs in four steps, each a
plain function here that the Beam layer calls (``find_duplicates`` chains them in memory, for tests
and small runs, exactly as the DAG does):

1. **Keys, per record, in parallel**: ``extract_keys(record, cfg)`` decodes the image once and
   returns ``DedupKeys(keys, member)``; the DAG emits ``DedupKeys.pairs()``, one ``(key, member)``
   per key.

   - ``px:<sha256>``: exact image, a hash of the decoded, normalised pixels (``pixel_hash``), so
     re-encodes of one page (PNG, lossless WebP, grey or RGB PNG of the same pixels) collapse.
   - ``ph:<band>:<hex>``: near image, 16 bands of 32 bits sampled from the 256-bit pHash
     (``phash_sample_keys``).
   - ``mh:<band>:<digest>``: near text, one key per MinHash LSH band of the response
     (``minhash_signature``, ``band_keys``).

   ``Member`` (id, source, rank, 256-bit pHash, 112-byte b-bit MinHash sketch) stays small
   however large the page or label, and ``pairs()`` sends each kind only the fields its groups
   verify with: pickled with a 32-character id, about 120 bytes per ``px`` pair, 150 per ``ph``
   pair and 230 per ``mh`` pair, so about 6 KB per record for all 31 keys.
2. **Group by key** (Beam ``GroupByKey``), then ``group_edges(key, members, cfg)`` per group with
   more than one member: O(n) edges per group, each member joined to one better-ranked member.
3. **Connected components** per key kind (``px``, ``ph``, ``mh``; ``key_kind``) over the edges
   only: ``connected_components(edges)``, a union-find whose memory is O(duplicates).
4. **Resolve**: ``resolve(components, kind)`` keeps one member per component and returns the
   others with the reason ``duplicate_image``, ``near_duplicate_image`` or
   ``near_duplicate_text``. A record dropped by several kinds keeps the reason ``merge_reason``
   picks (exact image first).

**Keep rule** (``keep_order``): the member with the highest ``rank`` wins, ties go to the smallest
``id``. The rank is the record's source priority (``DedupConfig.source_priority``, default 0) unless
the caller passes one. The rule is a total order on members, so the outcome does not depend on the
order of records, keys, groups or edges, nor on the runner's parallelism; and because every kind
uses the same order, a record dropped in one kind is always represented by a kept record.

**Near images.** pHash is the ``imagehash`` package's (DCT of a grey thumbnail, bits above the
median); the page is first box-reduced to about 128 px on its short side (~60x faster than
letting ``imagehash`` resize a 1288 px page). A 64-bit pHash does not tell document pages apart:
on 300 rendered text pages of one template, some distinct pairs are at distance 0, and one 16-bit
band (the lowest frequencies) was shared by 286 of them, so pigeonhole band keys over it
(``phash_band_keys``) make hot keys of whole templates. The 256-bit pHash (``hash_size=16``)
separates them: resized JPEG re-encodes within 16 bits (p99 14), distinct pages of one template
38 or more. Its keys sample ``phash_band_bits`` (32) of the 256 bits per band for
``phash_bands`` (16) bands (bit-sampling LSH: a pair at distance d shares a band with probability
1 - (1 - (1 - d/256)**32)**16: 0.995 at d = 10, 0.95 at 14, 0.70 at 20), and an edge needs the
distance to be at most ``phash_max_distance`` (20).

**Verification inside groups.** ``px`` keys are exact, so every member joins the group's best
member. ``ph`` groups verify the 256-bit distance. ``mh``: a shared band means 8 equal
min-hashes; the edge also needs the Jaccard similarity estimated from the 1-byte-per-hash sketch
(b-bit MinHash, Li and Konig 2010) to reach ``MinHashConfig.verify_jaccard`` (0.5, standard error
about 0.05), which removes chance band collisions of dissimilar texts (datatrove and NeMo Curator
skip this check); ``None`` trusts band collisions as they do. Verified groups are scanned in keep
order against a list of *centres* (members not close to any earlier centre); a member joins the
first close centre. That is O(n x centres) with at most ``max_centres`` centres, so a hot key
costs bounded time; members of such a group that match none of the first centres get no edge from
it (they still meet in their other bands).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import imagehash
import numpy as np
import xxhash
from PIL import Image, ImageOps

from schemas.deadletter import RecordError
from schemas.page import PageRecord

VERSION = "1"
STAGE = "dedup"
KINDS = ("px", "ph", "mh")
REASONS = {"px": "duplicate_image", "ph": "near_duplicate_image", "mh": "near_duplicate_text"}
_REASON_PRIORITY = {reason: i for i, reason in enumerate(REASONS.values())}

PHASH_SIZE = 16  # 16 x 16 DCT coefficients: the 256-bit pHash used for near images
PHASH_BITS = PHASH_SIZE * PHASH_SIZE
MERSENNE_61 = (1 << 61) - 1
_U64 = np.uint64
_EXIF_ORIENTATION = 0x0112


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class MinHashConfig:
    """MinHash LSH over the response text; the defaults are datatrove's ``MinhashConfig``.

    - ``ngram``: words per shingle (5).
    - ``bands`` x ``rows``: 14 bands of 8 min-hashes, 112 permutations. A pair with Jaccard
      similarity s shares a band with probability 1 - (1 - s**8)**14: 0.65 at the threshold
      s = (1/14)**(1/8) = 0.72, 0.92 at s = 0.8, 0.21 at s = 0.6, 0.04 at s = 0.5. Word 5-grams
      make this strict: editing 3 % of the words leaves s of about 0.75, 5 % about 0.63.
    - ``seed``: derives the permutations; keys from different seeds never match.
    - ``min_words``: texts with fewer normalised words get no ``mh`` keys (short and empty labels
      would otherwise all collide; the short-sample filter handles them).
    - ``verify_jaccard``: minimum Jaccard estimated from the members' sketches for an edge, or
      ``None`` to accept every band collision.
    """

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    min_words: int = 20
    verify_jaccard: float | None = 0.5

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
    """Which duplicate kinds to find and how; every field has a documented default.

    ``source_priority`` maps a source name to its rank (higher wins; sources not named rank 0);
    a mapping is accepted and stored as sorted pairs. ``minhash`` accepts a mapping of
    ``MinHashConfig`` fields (as read from YAML). ``max_pixels`` caps decoded images as
    ``render.max_pixels`` does.
    """

    exact_image: bool = True
    near_image: bool = True
    near_text: bool = True
    phash_bands: int = 16
    phash_band_bits: int = 32
    phash_max_distance: int = 20
    phash_seed: int = 1
    max_centres: int = 64
    max_pixels: int = 64_000_000
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    source_priority: tuple[tuple[str, float], ...] = ()

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


# --------------------------------------------------------------------------- images


def _open(data: bytes | Image.Image, max_pixels: int) -> Image.Image:
    """Decoded, EXIF-oriented image in mode ``L`` or ``RGB``; ``RecordError`` if it is none.

    Grey images stay ``L``: every use below gives the same result as for their RGB conversion
    (strips are converted while hashing; grey values of equal R, G, B are exact), and skipping
    the full-page conversion halves the time for the corpus's grey PNG pages.
    """
    if isinstance(data, Image.Image):
        image = data
    else:
        from schemas.images import open_image

        image = open_image(data, max_pixels)
    try:
        # exif_transpose copies the image even when there is nothing to do: check first.
        if image.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None):
            image = ImageOps.exif_transpose(image)
        if image.mode == "1":
            image = image.convert("L")  # 0 / 255, as its RGB conversion
        elif image.mode not in ("L", "RGB"):
            image = image.convert("RGB")  # palette, alpha (dropped), CMYK, 16-bit, ...
        else:
            image.load()
    except Exception as exc:  # truncated or corrupt pixel data surfaces only on load
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    return image


_STRIP_ROWS = 256


def _pixel_hash_image(image: Image.Image) -> str:
    """sha256 of ``b"WxH" + NUL`` and the RGB bytes, fed in strips: the same digest as hashing
    ``image.convert("RGB").tobytes()`` at once, ~2x faster (no page-sized copies) and with
    less memory."""
    digest = hashlib.sha256(b"%dx%d\x00" % image.size)
    width, height = image.size
    for top in range(0, height, _STRIP_ROWS):
        strip = image.crop((0, top, width, min(height, top + _STRIP_ROWS)))
        digest.update((strip if strip.mode == "RGB" else strip.convert("RGB")).tobytes())
    return digest.hexdigest()


def pixel_hash(data: bytes | Image.Image, max_pixels: int = 64_000_000) -> str:
    """sha256 (hex) over ``WxH`` and the raw RGB bytes of the decoded, EXIF-oriented image.

    Encoded bytes are decoded first, so PNG, lossless WebP and grey or palette PNGs of the same
    pixels give one hash; alpha is dropped. A PIL image skips decoding. Undecodable bytes raise
    ``RecordError("corrupt_image")``, images over ``max_pixels`` ``RecordError("image_too_large")``.
    """
    return _pixel_hash_image(_open(data, max_pixels))


def _thumbnail(image: Image.Image) -> Image.Image:
    """Grey image box-reduced to ~128 px on its short side. An RGB image is reduced before its
    grey conversion, so a grey page and its RGB copy give the same thumbnail."""
    factor = max(1, min(image.size) // 128)
    small = image.reduce(factor) if factor > 1 else image
    return small if small.mode == "L" else small.convert("L")


def _phash_grey(grey: Image.Image, hash_size: int) -> int:
    bits = imagehash.phash(grey, hash_size=hash_size).hash.ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def perceptual_hash(data: bytes | Image.Image, hash_size: int = 8, max_pixels: int = 64_000_000) -> int:
    """pHash (``imagehash.phash``) of the decoded, EXIF-oriented page as an int of hash_size**2 bits.

    The default is 64 bits; ``hash_size=16`` gives the 256-bit hash used to verify near-image
    candidates. The first bit is the most significant.
    """
    return _phash_grey(_thumbnail(_open(data, max_pixels)), hash_size)


def hamming(a: int, b: int) -> int:
    """Number of differing bits."""
    return (a ^ b).bit_count()


def phash_band_keys(h: int, bands: int = 4, bits: int = 64) -> list[str]:
    """``ph:<band>:<hex bits>`` for each of ``bands`` equal slices of a ``bits``-bit hash.

    Pigeonhole: two hashes within Hamming distance < ``bands`` agree on at least one slice. Fine
    for varied images; not used by ``extract_keys`` because slices of a document page's 64-bit
    pHash are shared by whole templates (module docstring).
    """
    if bits % bands:
        raise ValueError(f"bands ({bands}) must divide bits ({bits})")
    width = bits // bands
    mask = (1 << width) - 1
    digits = (width + 3) // 4
    return [f"ph:{i}:{(h >> (bits - width * (i + 1))) & mask:0{digits}x}" for i in range(bands)]


@lru_cache(maxsize=8)
def _bit_samples(bands: int, band_bits: int, bits: int, seed: int) -> np.ndarray:
    """``bands`` rows of ``band_bits`` bit positions: consecutive slices of seeded permutations of
    range(bits), so bits repeat only once every permutation is used up."""
    rows: list[np.ndarray] = []
    round_ = 0
    pool: list[int] = []
    while len(rows) < bands:
        if len(pool) < band_bits:
            pool = sorted(range(bits), key=lambda i: xxhash.xxh3_64_intdigest(b"%d:%d" % (round_, i), seed))
            round_ += 1
        rows.append(np.array(sorted(pool[:band_bits])))
        pool = pool[band_bits:]
    return np.stack(rows)


def phash_sample_keys(h: int, bands: int = 16, band_bits: int = 32, bits: int = PHASH_BITS, seed: int = 1) -> list[str]:
    """``ph:<band>:<hex>``: for each band, the ``band_bits`` bits of ``h`` at seeded positions.

    Bit-sampling LSH for Hamming distance: hashes at distance d share a band with probability
    1 - (1 - (1 - d/bits)**band_bits)**bands.
    """
    all_bits = np.unpackbits(np.frombuffer(h.to_bytes(bits // 8, "big"), dtype=np.uint8))
    sampled = np.packbits(all_bits[_bit_samples(bands, band_bits, bits, seed)], axis=1)
    return [f"ph:{i}:{row.tobytes().hex()}" for i, row in enumerate(sampled)]


# --------------------------------------------------------------------------- text (MinHash)

_TAG = re.compile(r"<[^<>]{0,200}>")
# One CJK (Han, kana, Hangul) character is one word; elsewhere a word is a run of letters and digits.
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\W_]+")
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)
_STEP = _U64(0x9E3779B97F4A7C15)
_CHUNK = 512  # shingles per permutation block: memory stays 2 x 512 x 112 x 8 B for any label
_P61 = _U64(MERSENNE_61)


def normalize_words(text: str) -> list[str]:
    """The words MinHash sees: HTML tags removed, lowercased (``casefold``), punctuation, symbols
    and whitespace dropped, CJK split into characters. Markdown markup is punctuation, so a
    Markdown and an HTML table with the same cells give the same words."""
    return _WORD.findall(_TAG.sub(" ", text).casefold())


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser (uint64 arithmetic wraps, as intended)."""
    x = x ^ (x >> _U64(30))
    x = x * _MIX1
    x = x ^ (x >> _U64(27))
    x = x * _MIX2
    return x ^ (x >> _U64(31))


def shingle_hashes(words: list[str], ngram: int, seed: int) -> np.ndarray:
    """Unique 64-bit hashes of the word ``ngram``-grams (one shingle for shorter texts).

    Each word is hashed once with xxh3-64 (fixed, unsalted: equal in every process and run), and
    the n-gram hash is an order-sensitive polynomial of its word hashes, finalised by splitmix64.
    """
    if not words:
        return np.zeros(0, dtype=np.uint64)
    word_h = np.fromiter(map(xxhash.xxh3_64_intdigest, map(str.encode, words)), dtype=np.uint64, count=len(words))
    n = max(1, len(words) - ngram + 1)
    h = np.full(n, xxhash.xxh3_64_intdigest(b"seed%d" % seed), dtype=np.uint64)
    for j in range(min(ngram, len(words))):
        h = h * _STEP + word_h[j:j + n]
    return np.unique(_mix64(h))


@lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Permutation coefficients a in [1, p), b in [0, p), p = 2**61 - 1, derived by hashing so they
    are the same on every platform and numpy version."""
    a = [xxhash.xxh3_64_intdigest(f"a{i}".encode(), seed) % (MERSENNE_61 - 1) + 1 for i in range(num_perm)]
    b = [xxhash.xxh3_64_intdigest(f"b{i}".encode(), seed) % MERSENNE_61 for i in range(num_perm)]
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


def minhash_signature(text: str | list[str], cfg: MinHashConfig = MinHashConfig()) -> np.ndarray:
    """The ``cfg.num_perm`` min-hashes (uint64) of the text's word ``ngram``-gram shingles.

    ``text`` is a string (normalised with ``normalize_words``) or an already normalised word list.
    Permutation i maps a shingle hash x to (a_i * x + b_i) mod 2**64, reduced mod p = 2**61 - 1,
    as datatrove's 64-bit MinHash does (the product wraps in uint64); the reduction is a Mersenne
    fold (see the code). Deterministic across processes, runs and machines. A text without words
    gets all values 2**61 - 1 (no band keys).
    """
    words = normalize_words(text) if isinstance(text, str) else text
    a, b = _permutations(cfg.num_perm, cfg.seed)
    signature = np.full(cfg.num_perm, MERSENNE_61, dtype=np.uint64)
    shingles = shingle_hashes(words, cfg.ngram, cfg.seed)
    rows = min(_CHUNK, len(shingles))
    y = np.empty((rows, cfg.num_perm), dtype=np.uint64)
    folded = np.empty_like(y)
    for start in range(0, len(shingles), _CHUNK):
        x = shingles[start:start + _CHUNK, None]
        yy, ff = y[:len(x)], folded[:len(x)]
        np.multiply(x, a, out=yy)
        yy += b
        # Mersenne fold (y & p) + (y >> 61) instead of `% p` (4x faster): equals y mod p unless
        # the sum reaches p (probability < 2**-58), where it is p more; still a fixed hash.
        np.bitwise_and(yy, _P61, out=ff)
        yy >>= _U64(61)
        ff += yy
        np.minimum(signature, ff.min(axis=0), out=signature)
    return signature


def band_keys(signature: np.ndarray, cfg: MinHashConfig = MinHashConfig()) -> list[str]:
    """``mh:<band>:<16 hex>``: blake2b-64 of each band's ``rows`` little-endian min-hashes."""
    if len(signature) != cfg.num_perm:
        raise ValueError(f"signature has {len(signature)} values, config wants {cfg.num_perm}")
    if bool((signature == MERSENNE_61).all()):
        return []
    raw = np.asarray(signature, dtype="<u8").tobytes()
    step = cfg.rows * 8
    return [f"mh:{i}:{hashlib.blake2b(raw[i * step:(i + 1) * step], digest_size=8).hexdigest()}"
            for i in range(cfg.bands)]


def sketch(signature: np.ndarray) -> bytes:
    """The low byte of each min-hash (b-bit MinHash with b = 8): 112 bytes for the default config."""
    return (np.asarray(signature, dtype=np.uint64) & _U64(0xFF)).astype(np.uint8).tobytes()


def estimated_jaccard(a: bytes, b: bytes) -> float:
    """Jaccard similarity estimated from two ``sketch``es: equal low bytes happen for equal
    min-hashes and, by chance, 1/256 of the others, hence the correction."""
    if len(a) != len(b) or not a:
        raise ValueError("sketches must be non-empty and of equal length")
    equal = np.count_nonzero(np.frombuffer(a, np.uint8) == np.frombuffer(b, np.uint8)) / len(a)
    return min(1.0, max(0.0, (equal - 1 / 256) / (1 - 1 / 256)))


# --------------------------------------------------------------------------- members and keys


@dataclass(frozen=True)
class Member:
    """What a record contributes to a group: small, and identified by ``id`` alone.

    Equality and hashing use ``id`` only, so a record met in several groups is one node of the
    connected components even if a copy lacks the optional fields. ``rank`` must be finite and
    the same in every copy. ``phash`` (the 256-bit pHash) verifies ``ph`` groups, ``sketch``
    (``sketch(signature)``) verifies ``mh`` groups.
    """

    id: str
    source: str = field(compare=False)
    rank: float = field(default=0.0, compare=False)
    phash: int | None = field(default=None, compare=False)
    sketch: bytes | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.rank):
            raise ValueError(f"member {self.id}: rank must be finite, got {self.rank}")

    def __reduce__(self) -> tuple:
        # positional state: no field names in every shuffled pair
        return (Member, (self.id, self.source, self.rank, self.phash, self.sketch))


Edge = tuple[Member, Member]


class DedupKeys(NamedTuple):
    """A record's grouping keys and its member (the value paired with every key)."""

    keys: list[str]
    member: Member

    def pairs(self) -> list[tuple[str, Member]]:
        """``(key, member)`` per key; each kind's member carries only what its groups verify."""
        m = self.member
        slim = {
            "px": Member(m.id, m.source, m.rank),
            "ph": Member(m.id, m.source, m.rank, phash=m.phash),
            "mh": Member(m.id, m.source, m.rank, sketch=m.sketch),
        }
        return [(key, slim[key_kind(key)]) for key in self.keys]


def extract_keys(record: PageRecord, cfg: DedupConfig = DedupConfig(), rank: float | None = None) -> DedupKeys:
    """Keys and member of one record; writes ``record.quality["dedup"]``.

    ``quality["dedup"]`` gets ``pixel_sha256``, ``phash`` (64-bit pHash, 16 hex digits) and
    ``phash256`` (64 hex digits) when those kinds are on, and ``text_keys`` (number of ``mh``
    keys; 0 when the label is too short). ``rank`` defaults to the source priority. Raises
    ``RecordError`` for an undecodable or oversized image.
    """
    keys: list[str] = []
    info: dict[str, Any] = {}
    phash = None
    text_sketch = None
    if cfg.exact_image or cfg.near_image:
        image = _open(record.image, cfg.max_pixels)
        if cfg.exact_image:
            info["pixel_sha256"] = _pixel_hash_image(image)
            keys.append(f"px:{info['pixel_sha256']}")
        if cfg.near_image:
            grey = _thumbnail(image)
            info["phash"] = f"{_phash_grey(grey, 8):016x}"
            phash = _phash_grey(grey, PHASH_SIZE)
            info["phash256"] = f"{phash:064x}"
            keys.extend(phash_sample_keys(phash, cfg.phash_bands, cfg.phash_band_bits, PHASH_BITS, cfg.phash_seed))
    if cfg.near_text:
        words = normalize_words(record.response or "")
        text_keys: list[str] = []
        if len(words) >= cfg.minhash.min_words:
            signature = minhash_signature(words, cfg.minhash)
            text_keys = band_keys(signature, cfg.minhash)
            text_sketch = sketch(signature) if text_keys else None
        info["text_keys"] = len(text_keys)
        keys.extend(text_keys)
    record.quality[STAGE] = info
    member = Member(record.id, record.source, cfg.rank(record.source) if rank is None else float(rank),
                    phash, text_sketch)
    return DedupKeys(keys, member)


def dedup_keys(record: PageRecord, cfg: DedupConfig = DedupConfig()) -> list[str]:
    """The prefixed keys of one record (``extract_keys(record, cfg).keys``)."""
    return extract_keys(record, cfg).keys


# --------------------------------------------------------------------------- grouping


def key_kind(key: str) -> str:
    """``px``, ``ph`` or ``mh``: the key's prefix, which routes its edges and names the reason."""
    kind = key.split(":", 1)[0]
    if kind not in REASONS:
        raise ValueError(f"not a dedup key: {key!r}")
    return kind


def keep_order(member: Member) -> tuple[float, str]:
    """Sort key, best first: highest rank, then smallest id."""
    return (-member.rank, member.id)


def _close(kind: str, a: Member, b: Member, cfg: DedupConfig) -> bool:
    if kind == "ph":
        if a.phash is None or b.phash is None:
            return False
        return hamming(a.phash, b.phash) <= cfg.phash_max_distance
    # mh: called only when verification is on
    if a.sketch is None or b.sketch is None:
        return True  # nothing to verify with: trust the band, as datatrove does
    return estimated_jaccard(a.sketch, b.sketch) >= cfg.minhash.verify_jaccard


def group_edges(key: str, members: Iterable[Member], cfg: DedupConfig = DedupConfig()) -> list[Edge]:
    """Edges ``(better, worse)`` for one key's group, at most one per member after the best.

    The group is sorted by ``keep_order`` first (duplicate ids merged), so the edges do not depend
    on the order the runner delivers members in. ``px`` groups (and ``mh`` groups without
    verification) join every member to the best one; ``ph`` and ``mh`` groups verify each member
    against up to ``cfg.max_centres`` centres (module docstring).
    """
    kind = key_kind(key)
    ordered = sorted(set(members), key=keep_order)
    if len(ordered) < 2:
        return []
    if kind == "px" or (kind == "mh" and cfg.minhash.verify_jaccard is None):
        best = ordered[0]
        return [(best, m) for m in ordered[1:]]
    centres: list[Member] = []
    edges: list[Edge] = []
    for m in ordered:
        for c in centres:
            if _close(kind, c, m, cfg):
                edges.append((c, m))
                break
        else:
            if len(centres) < cfg.max_centres:
                centres.append(m)
    return edges


def connected_components(edges: Iterable[Edge]) -> list[frozenset[Member]]:
    """Components of the graph the edges span (union by size, path halving), sorted by smallest id.

    Memory is proportional to the members that appear in edges, i.e. to the duplicates.
    """
    parent: dict[Member, Member] = {}
    size: dict[Member, int] = {}

    def find(x: Member) -> Member:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        if size.get(ra, 1) < size.get(rb, 1):
            ra, rb = rb, ra
        parent[rb] = ra
        size[ra] = size.get(ra, 1) + size.pop(rb, 1)
    groups: dict[Member, set[Member]] = defaultdict(set)
    for x in parent:
        groups[find(x)].add(x)
    return sorted((frozenset(g) for g in groups.values()), key=lambda g: min(m.id for m in g))


def keeper(component: Iterable[Member], rule: Callable[[Member], Any] = keep_order) -> Member:
    """The member a component keeps: the first by ``rule`` (highest rank, then smallest id)."""
    return min(component, key=rule)


def resolve(components: Iterable[Iterable[Member]], kind: str,
            rule: Callable[[Member], Any] = keep_order) -> list[tuple[Member, str]]:
    """The members each component drops, with the reason for ``kind`` (``px``, ``ph`` or ``mh``),
    sorted by id. Exactly one member of each component survives: the first by ``rule``."""
    reason = REASONS[kind]
    losers: list[tuple[Member, str]] = []
    for component in components:
        members = set(component)
        best = keeper(members, rule)
        losers.extend((m, reason) for m in members if m != best)
    return sorted(losers, key=lambda loser: loser[0].id)


def merge_reason(a: str | None, b: str) -> str:
    """One reason for a record dropped by several kinds: exact image, then near image, then text."""
    if a is None:
        return b
    return min(a, b, key=lambda r: _REASON_PRIORITY.get(r, len(_REASON_PRIORITY)))


def find_duplicates(pairs: Iterable[tuple[str, Member]], cfg: DedupConfig = DedupConfig()) -> dict[str, str]:
    """The whole decision in memory, as the DAG makes it: ``{dropped record id: reason}``.

    For tests and small runs; the DAG does the same with GroupByKey and one union-find per kind.
    """
    groups: dict[str, list[Member]] = defaultdict(list)
    for key, member in pairs:
        groups[key].append(member)
    edges: dict[str, list[Edge]] = defaultdict(list)
    for key, members in groups.items():
        if len(members) > 1:
            edges[key_kind(key)].extend(group_edges(key, members, cfg))
    drops: dict[str, str] = {}
    for kind in KINDS:
        for member, reason in resolve(connected_components(edges.get(kind, [])), kind):
            drops[member.id] = merge_reason(drops.get(member.id), reason)
    return dict(sorted(drops.items()))
