"""MinHash over a label's words: normalisation, shingles, signatures, LSH band keys and b-bit sketches.

Deterministic across processes, runs and machines (xxh3 and fixed-point arithmetic, no Python
``hash``), so the keys of one text are the same on every worker; see ``pipelines/clean/dedup.py``
for how the keys are grouped and verified.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

import numpy as np
import xxhash

from pipelines.clean.dedup_config import MinHashConfig

MERSENNE_61 = (1 << 61) - 1
_U64 = np.uint64
_TAG = re.compile(r"<[^<>]{0,200}>")
# Scripts written without spaces between words, whose every character (with the combining marks
# after it) is one word: Han, kana, Hangul syllables and jamo, and Thai, Lao, Khmer and Myanmar,
# where a space-delimited "word" is a whole phrase and one misread character would change all of
# it. A character class body: ``pipelines/clean/repeats_near.py`` splits words with it too.
CHAR_WORD_SCRIPTS = (
    "\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf"
    "\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003ffff"
)
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")
# Planes whose combining marks and format characters are collected (the others hold none in use).
_PLANES = (0x00000, 0x10000, 0xE0000)
_MIX1 = _U64(0xBF58476D1CE4E5B9)
_MIX2 = _U64(0x94D049BB133111EB)
_STEP = _U64(0x9E3779B97F4A7C15)
_CHUNK = 512  # shingles per permutation block: memory stays 2 x 512 x 112 x 8 B for any label
_P61 = _U64(MERSENNE_61)


@lru_cache(maxsize=1)
def _unicode_tables() -> tuple[str, dict[int, None]]:
    """(pattern of one combining mark, Mn/Mc/Me; translate table deleting the format characters,
    Cf, and the Arabic tatweel), read from ``unicodedata`` once (~0.1 s)."""
    category = unicodedata.category
    marks: list[str] = []
    for low, high in ((0x0000, 0xFFFF), (0x10000, 0x1FFFF), (0xE0000, 0xEFFFF)):
        marks.append(_ranges([c for c in range(low, high + 1) if category(chr(c)) in ("Mn", "Mc", "Me")]))
    fmt = [c for plane in _PLANES for c in range(plane, plane + 0x10000) if category(chr(c)) == "Cf"]
    # a class of many astral ranges is scanned range by range for every character tried; behind a
    # cheap one-range test it only costs where such a character is
    mark = f"[{marks[0]}]|[\U00010000-\U000effff](?<=[{marks[1]}{marks[2]}])"
    return mark, dict.fromkeys([*fmt, 0x0640], None)


def _ranges(codes: list[int]) -> str:
    """A character class body of the ascending code points ``codes``."""
    ranges: list[list[int]] = []
    for c in codes:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


@lru_cache(maxsize=1)
def word_regex() -> re.Pattern[str]:
    """Words: one letter or digit of ``CHAR_WORD_SCRIPTS`` with the combining marks after it, or a
    run of the other letters and digits and of combining marks (Devanagari vowel signs and viramas,
    Arabic harakat and Hebrew points belong to their word, as do accents left uncomposed); such a
    run stops at a CJK character (``2023年`` is two words)."""
    mark, _ = _unicode_tables()
    return re.compile(f"(?=[^\\W_])[{CHAR_WORD_SCRIPTS}](?:{mark})*|(?:[^\\W_{CHAR_WORD_SCRIPTS}]|{mark})+")


def normalize_words(text: str) -> list[str]:
    """The words MinHash sees: HTML tags removed; format characters (soft hyphens, zero-width
    spaces and joiners, word joiners, byte-order marks, bidi controls: category Cf) and the Arabic
    tatweel deleted, as they are invisible or only stretch a line; NFKC-normalised and case-folded
    (NFKC again after ``casefold``, which may leave a character decomposed), so NFC and NFD text,
    conjoining Hangul jamo and syllables, ligatures, full-width and half-width forms give the same
    words; punctuation, symbols and whitespace dropped; words split as ``word_regex`` says (CJK,
    Thai ... one character each). Markdown markup is punctuation, so a Markdown and an HTML table
    with the same cells give the same words."""
    text = _TAG.sub(" ", text)
    if text.isascii():  # no marks, no CJK, nothing NFKC changes: the words are the runs of letters and digits
        return _ASCII_WORD.findall(text.lower())
    _, deleted = _unicode_tables()
    text = unicodedata.normalize("NFKC", text.translate(deleted))
    return word_regex().findall(unicodedata.normalize("NFKC", text.casefold()))


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
