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

   ``Member`` (id, source, rank, 256-bit pHash, 112-byte b-bit MinHash sketch, and the split and
   bytes its record was written with) stays small
   however large the page or label, and ``pairs()`` sends each kind only the fields its groups
   verify with: pickled with a 32-character id, about 130 bytes per ``px`` pair, 160 per ``ph``
   pair and 240 per ``mh`` pair (split and size add 9), so about 6 KB per record for all 31 keys.
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
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pipelines.clean.dedup_config import PHASH_BITS, PHASH_SIZE, DedupConfig
from pipelines.clean.image_hash import hamming, open_page, phash_grey, phash_sample_keys, pixel_hash_image, thumbnail
from pipelines.clean.minhash import band_keys, estimated_jaccard, minhash_signature, normalize_words, sketch
from schemas.page import PageRecord

VERSION = "2"  # 2: MinHash words are NFKC-normalised, format characters and tatweel dropped, marks kept in words
STAGE = "dedup"
KINDS = ("px", "ph", "mh")
REASONS = {"px": "duplicate_image", "ph": "near_duplicate_image", "mh": "near_duplicate_text"}
_REASON_PRIORITY = {reason: i for i, reason in enumerate(REASONS.values())}


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
    # Where the record was written, for the writer that drops it (``pipelines.clean.dedup_stage``):
    # its split and spilled bytes, and its input unit (the refresh key, "" when none) for the
    # duplicates table. Not used by any decision.
    split: str = field(default="train", compare=False)
    size: int = field(default=0, compare=False)
    unit: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not math.isfinite(self.rank):
            raise ValueError(f"member {self.id}: rank must be finite, got {self.rank}")

    def __reduce__(self) -> tuple:
        # positional state: no field names in every shuffled pair
        return (Member, (self.id, self.source, self.rank, self.phash, self.sketch, self.split, self.size, self.unit))


Edge = tuple[Member, Member]


class DedupKeys(NamedTuple):
    """A record's grouping keys and its member (the value paired with every key)."""

    keys: list[str]
    member: Member

    def pairs(self) -> list[tuple[str, Member]]:
        """``(key, member)`` per key; each kind's member carries only what its groups verify."""
        m = self.member
        slim = {
            "px": Member(m.id, m.source, m.rank, split=m.split, size=m.size, unit=m.unit),
            "ph": Member(m.id, m.source, m.rank, phash=m.phash, split=m.split, size=m.size, unit=m.unit),
            "mh": Member(m.id, m.source, m.rank, sketch=m.sketch, split=m.split, size=m.size, unit=m.unit),
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
        image = open_page(record.image, cfg.max_pixels)
        if cfg.exact_image:
            info["pixel_sha256"] = pixel_hash_image(image)
            keys.append(f"px:{info['pixel_sha256']}")
        if cfg.near_image:
            grey = thumbnail(image)
            info["phash"] = f"{phash_grey(grey, 8):016x}"
            phash = phash_grey(grey, PHASH_SIZE)
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
    if record.task != "parse_page":
        # Records derived from one page share its image (KIE, VQA): they duplicate one another only
        # when their task and instruction match too.
        scope = f"{record.task}:{hashlib.sha256(record.instruction.encode('utf-8')).hexdigest()[:12]}:"
        keys = [k.replace(":", f":{scope}", 1) for k in keys]  # after the kind prefix (key_kind)
    record.quality[STAGE] = info
    member = Member(record.id, record.source, cfg.rank(record.source) if rank is None else float(rank),
                    phash, text_sketch, record.split)
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
