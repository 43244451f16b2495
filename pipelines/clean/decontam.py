"""Decontamination: drop corpus pages that are benchmark pages, so training never sees evaluation data.

``DecontamIndex.from_folder(path)`` indexes a benchmark folder in one of two layouts:

* **olmOCR-Bench**: ``bench_data/*.jsonl`` (or ``*.jsonl`` in ``path`` itself), one unit test per
  line with ``pdf`` (relative to ``bench_data/pdfs/``) and ``page`` (1-based, default 1), plus the
  PDFs under ``bench_data/pdfs/``. One benchmark item per (pdf, page): the page is rendered with
  ``schemas.pdf_pages.rasterize_pdf_page`` at ``longest_side`` (the corpus's
  ``render.longest_side``, so a corpus copy of the page has the same pixels), and its texts are the
  ``text``, ``before``, ``after``, ``cell`` and ``math`` fields of its tests.
* **images and texts**: any other folder; every image (png, jpg, jpeg, webp, tif, tiff, bmp, gif,
  searched recursively) is an item, normalised as the corpus normalises scans
  (``pipelines.render.decode_image``: EXIF orientation, RGB, downscale to ``longest_side``), with the
  texts of its same-stem ``.md`` and ``.txt`` files; a text without an image is a text-only item.

A record is matched against the index three ways, in this order, and dropped with the first that
fires (``quality["decontam"]["match"]`` names the benchmark item):

1. ``contaminated_image``: the exact pixel hash (``pipelines.clean.image_hash.pixel_hash``: decoded,
   RGB, sha256 of size and pixels) equals a benchmark page's, so re-encodes collapse.
2. ``contaminated_phash``: the perceptual hash (``pipelines.clean.image_hash.perceptual_hash``) is within
   ``max_phash_distance`` bits of a benchmark page's. The hash is the 256-bit pHash
   (``phash_size`` 16), not the 64-bit one: dedup's measurements found distinct text pages of one
   template at 64-bit distance 0, while at 256 bits resized JPEG re-encodes stay within 16 bits
   (p99 14) and distinct pages of one template are 38 or more apart; the default 20 is dedup's.
3. ``contaminated_text``: word 13-grams (``pipelines.clean.minhash.normalize_words``: NFKC and
   case-folded, format characters such as soft hyphens and zero-width spaces deleted, punctuation
   and markup dropped, CJK one character a word) of the response shared with one benchmark item.
   With ``m`` the number of the record's distinct 13-grams found in the item, it fires when ``m`` exceeds
   ``max_ngram_overlap`` (0.5) of the record's distinct 13-grams (the record is mostly benchmark
   text), or when ``m`` is at least ``min_matched_ngrams`` (3, i.e. 15 consecutive words) and
   exceeds ``max_bench_overlap`` (0.5) of the item's distinct 13-grams (the record contains most
   of the benchmark text: olmOCR-Bench stores short snippets of a page, so a full corpus copy of
   the page shares few of its own 13-grams with them). Benchmark texts shorter than 13 words give
   no 13-gram and are not used.

Kept and dropped records alike carry the scores: ``nearest_phash`` (item, distance) and ``ngram``
(item with the most shared 13-grams, ``matched``, ``record_overlap``, ``bench_overlap``).
The index is built lazily, once per worker process (shared by the stage objects of a process).
"""

from __future__ import annotations

import io
import json
import threading
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from schemas.config import option
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, params_hash

VERSION = "2"  # 2: 13-gram words are NFKC-normalised, format characters and tatweel dropped, marks kept in words
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif")
TEXT_SUFFIXES = (".md", ".txt")
TEXT_FIELDS = ("text", "before", "after", "cell", "math")
_SHINGLE_SEED = 13


@dataclass(frozen=True)
class DecontamConfig:
    """The benchmark to keep out of the corpus and the thresholds of the three matches (module doc)."""

    folder: str = option("", help="the benchmark folder (required; see the module doc for layouts)")
    longest_side: int = option(1288, help="render benchmark PDF pages and normalise benchmark images like the "
                                          "corpus: set it to the corpus's render.longest_side")
    phash_size: int = option(16, help="pHash side (16: 256 bits)")
    max_phash_distance: int = option(20, help="largest Hamming distance of pHashes that is a match (of 256 bits)")
    ngram: int = option(13, help="words per shingle")
    max_ngram_overlap: float = option(0.5, help="share of the record's n-grams found in one item above which "
                                                "the record is contaminated")
    max_bench_overlap: float = option(0.5, help="share of the item's n-grams found in the record above which "
                                                "it is contaminated (with at least min_matched_ngrams shared)")
    min_matched_ngrams: int = option(3, help="shared n-grams needed for max_bench_overlap to apply")
    max_pixels: int = option(64_000_000, help="decoded image cap (decompression bombs)")


@dataclass
class BenchItem:
    """One benchmark page: its name in reports, where its image comes from, and its texts."""

    name: str
    kind: str  # "pdf" | "image" | "text"
    path: Path | None
    page: int = 1  # 1-based, for PDFs
    texts: list[str] = field(default_factory=list)


def _jsonl_root(folder: Path) -> Path | None:
    for root in (folder / "bench_data", folder):
        if root.is_dir() and any(root.glob("*.jsonl")):
            return root
    return None


def scan_folder(path: str | Path) -> list[BenchItem]:
    """The benchmark items of ``path`` (cheap: reads JSONL and text files, no rendering).

    ``ValueError`` for a missing folder, an empty one, a malformed JSONL line or a missing PDF,
    naming the file and line."""
    folder = Path(path)
    if not str(path) or not folder.is_dir():
        raise ValueError(f"decontam: benchmark folder {str(path)!r} does not exist")
    root = _jsonl_root(folder)
    items = _scan_olmocr_bench(root) if root is not None else _scan_images(folder)
    if not items:
        raise ValueError(f"decontam: benchmark folder {folder} holds no benchmark pages "
                         f"(neither bench_data/*.jsonl nor images or .md/.txt texts)")
    return items


def _scan_olmocr_bench(root: Path) -> list[BenchItem]:
    pdfs = root / "pdfs"
    items: dict[tuple[str, int], BenchItem] = {}
    for jsonl in sorted(root.glob("*.jsonl")):
        for lineno, line in enumerate(jsonl.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{jsonl}:{lineno}"
            try:
                test = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"decontam: {where}: not JSON: {exc}") from None
            if not isinstance(test, dict) or not isinstance(test.get("pdf"), str) or not test["pdf"]:
                raise ValueError(f"decontam: {where}: a test needs a 'pdf' string")
            page = test.get("page", 1)
            if not isinstance(page, int) or isinstance(page, bool) or page < 1:
                raise ValueError(f"decontam: {where}: 'page' must be an int >= 1, got {page!r}")
            key = (test["pdf"], page)
            if key not in items:
                pdf = (pdfs / test["pdf"]).resolve()
                if not pdf.is_relative_to(pdfs.resolve()) or not pdf.is_file():
                    raise ValueError(f"decontam: {where}: pdf {test['pdf']!r} not found under {pdfs}")
                items[key] = BenchItem(f"{test['pdf']}#page={page}", "pdf", pdf, page)
            items[key].texts += [test[k] for k in TEXT_FIELDS if isinstance(test.get(k), str) and test[k].strip()]
    return [items[k] for k in sorted(items)]


def _scan_images(folder: Path) -> list[BenchItem]:
    images: list[Path] = []
    texts: dict[Path, list[str]] = {}  # stem -> texts
    text_files: dict[Path, Path] = {}  # stem -> first text file, to name text-only items
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        suffix = file.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            images.append(file)
        elif suffix in TEXT_SUFFIXES:
            stem = file.with_suffix("")
            text_files.setdefault(stem, file)
            text = file.read_bytes().decode("utf-8", errors="replace")
            if text.strip():
                texts.setdefault(stem, []).append(text)
    items = [BenchItem(str(f.relative_to(folder)), "image", f, texts=list(texts.get(f.with_suffix(""), [])))
             for f in images]
    with_image = {f.with_suffix("") for f in images}
    items += [BenchItem(str(text_files[stem].relative_to(folder)), "text", None, texts=texts.get(stem, []))
              for stem in sorted(text_files) if stem not in with_image and texts.get(stem)]
    return sorted(items, key=lambda item: item.name)


def _phash_words(h: int, size: int) -> np.ndarray:
    """A pHash of ``size**2`` bits as big-endian uint64 words (the first bit most significant)."""
    n_words = max(1, (size * size + 63) // 64)
    return np.frombuffer(h.to_bytes(8 * n_words, "big"), dtype=">u8").astype(np.uint64)


def _shingles(text: str, n: int) -> np.ndarray:
    from pipelines.clean.minhash import normalize_words, shingle_hashes

    words = normalize_words(text)
    if len(words) < n:  # shingle_hashes gives shorter texts one shingle; a short text is no evidence
        return np.zeros(0, dtype=np.uint64)
    return shingle_hashes(words, n, _SHINGLE_SEED)


@dataclass
class TextMatch:
    item: str
    matched: int
    record_overlap: float
    bench_overlap: float


class DecontamIndex:
    """Exact pixel hashes, pHashes and 13-gram sets of a benchmark's pages."""

    def __init__(self, names: list[str], exact: dict[str, int], phashes: np.ndarray, phash_items: np.ndarray,
                 gram_keys: np.ndarray, gram_offsets: np.ndarray, gram_items: np.ndarray,
                 item_grams: np.ndarray, phash_size: int = 16, ngram: int = 13):
        self.names = names
        self.exact = exact
        self.phashes = phashes  # (n, words) uint64
        self.phash_items = phash_items
        self.gram_keys = gram_keys  # sorted distinct 13-gram hashes
        self.gram_offsets = gram_offsets  # CSR: items of gram_keys[i] are gram_items[off[i]:off[i+1]]
        self.gram_items = gram_items
        self.item_grams = item_grams  # distinct 13-grams per item
        self.phash_size = phash_size
        self.ngram = ngram

    @classmethod
    def from_folder(cls, path: str | Path, longest_side: int = 1288, phash_size: int = 16, ngram: int = 13,
                    max_pixels: int = 64_000_000) -> DecontamIndex:
        """Scan, render and hash every benchmark page of ``path`` (see the module doc)."""
        from pipelines.clean.image_hash import perceptual_hash, pixel_hash
        from pipelines.render import RenderConfig, decode_image
        from schemas.pdf_pages import rasterize_pdf_page

        items = scan_folder(path)
        render_cfg = RenderConfig(longest_side=longest_side, max_pixels=max_pixels)
        exact: dict[str, int] = {}
        phashes: list[np.ndarray] = []
        phash_items: list[int] = []
        grams: dict[int, list[int]] = {}
        item_grams = np.zeros(len(items), dtype=np.int64)
        for i, item in enumerate(items):
            try:
                images: list[Any] = []
                if item.kind == "pdf":
                    assert item.path is not None
                    image, _ = rasterize_pdf_page(item.path.read_bytes(), item.page - 1, longest_side)
                    images.append(image)
                elif item.kind == "image":
                    assert item.path is not None
                    data = item.path.read_bytes()
                    images.append(decode_image(data, render_cfg))
                    images.append(data)  # the file's own pixels too, when normalising changed them
                for image in images:
                    exact.setdefault(pixel_hash(image, max_pixels), i)
                if images:
                    phashes.append(_phash_words(perceptual_hash(images[0], phash_size, max_pixels), phash_size))
                    phash_items.append(i)
            except RecordError as exc:
                raise ValueError(f"decontam: benchmark page {item.name} cannot be read ({exc.reason}): {exc}") from exc
            keys = np.unique(np.concatenate([_shingles(t, ngram) for t in item.texts] or [np.zeros(0, np.uint64)]))
            item_grams[i] = len(keys)
            for key in keys.tolist():
                grams.setdefault(key, []).append(i)
        sorted_keys = sorted(grams)
        offsets = np.zeros(len(sorted_keys) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(grams[k]) for k in sorted_keys])
        flat = [i for k in sorted_keys for i in grams[k]]
        n_words = max(1, (phash_size * phash_size + 63) // 64)
        return cls(
            names=[item.name for item in items],
            exact=exact,
            phashes=np.stack(phashes) if phashes else np.zeros((0, n_words), dtype=np.uint64),
            phash_items=np.asarray(phash_items, dtype=np.int64),
            gram_keys=np.asarray(sorted_keys, dtype=np.uint64),
            gram_offsets=offsets,
            gram_items=np.asarray(flat, dtype=np.int64),
            item_grams=item_grams,
            phash_size=phash_size,
            ngram=ngram,
        )

    def __len__(self) -> int:
        return len(self.names)

    def match_pixels(self, digest: str) -> str | None:
        i = self.exact.get(digest)
        return None if i is None else self.names[i]

    def nearest_phash(self, h: int) -> tuple[str, int] | None:
        """(item, Hamming distance) of the benchmark page nearest to pHash ``h``; None if no images."""
        if not len(self.phashes):
            return None
        words = _phash_words(h, self.phash_size)
        distances = np.bitwise_count(self.phashes ^ words).sum(axis=1)
        j = int(np.argmin(distances))
        return self.names[int(self.phash_items[j])], int(distances[j])

    def text_matches(self, text: str) -> list[TextMatch]:
        """Every benchmark item sharing a 13-gram with ``text``, most shared first."""
        keys = _shingles(text, self.ngram)
        if not len(keys) or not len(self.gram_keys):
            return []
        pos = np.searchsorted(self.gram_keys, keys)
        pos[pos == len(self.gram_keys)] = 0
        counts: dict[int, int] = {}
        for p in pos[self.gram_keys[pos] == keys].tolist():
            for item in self.gram_items[self.gram_offsets[p]: self.gram_offsets[p + 1]].tolist():
                counts[item] = counts.get(item, 0) + 1
        order = sorted(counts, key=lambda i: (-counts[i], i))
        return [TextMatch(self.names[i], counts[i], counts[i] / len(keys), counts[i] / max(1, int(self.item_grams[i])))
                for i in order]


# One index per worker process, shared by every stage object built from the same settings.
_INDEXES: dict[tuple, DecontamIndex] = {}
_INDEX_LOCK = threading.Lock()


def _index_for(cfg: DecontamConfig) -> DecontamIndex:
    key = (str(Path(cfg.folder).resolve()), cfg.longest_side, cfg.phash_size, cfg.ngram, cfg.max_pixels)
    with _INDEX_LOCK:
        index = _INDEXES.get(key)
        if index is None:
            try:
                index = DecontamIndex.from_folder(cfg.folder, cfg.longest_side, cfg.phash_size, cfg.ngram,
                                                  cfg.max_pixels)
            except ValueError as exc:  # the folder changed since start-up: name it in every dead letter
                raise RecordError("decontam_index", str(exc)) from exc
            _INDEXES[key] = index
        return index


def _decode(data: bytes, max_pixels: int) -> Any:
    """The record's image, decoded once for both hashes; ``corrupt_image`` when it cannot be."""
    from PIL import Image

    if not isinstance(data, bytes) or not data:
        raise RecordError("corrupt_image", "image payload is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
        if image.width * image.height > max_pixels:
            raise RecordError("image_too_large", f"{image.width}x{image.height} pixels exceeds the cap of {max_pixels}")
        image.load()
    except RecordError:
        raise
    except Exception as exc:  # PIL raises many types for garbage or truncated bytes
        raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
    return image


class DecontamStage:
    """Drops records whose page or text is a benchmark page's (see the module doc for the rules)."""

    name = "decontam"

    @staticmethod
    def content_paths(spec: dict) -> list[str]:
        """What a refresh hashes by content for this stage (``pipelines.refresh.stage_fingerprints``): the
        benchmark folder, so pages added to it make every unit pass decontam again."""
        return [str(spec.get("folder") or "")]

    def __init__(self, cfg: DecontamConfig = DecontamConfig()):
        if not cfg.folder:
            raise ValueError("decontam: 'folder' (the benchmark folder) is required")
        if not 0 <= cfg.max_ngram_overlap <= 1 or not 0 <= cfg.max_bench_overlap <= 1:
            raise ValueError("decontam: max_ngram_overlap and max_bench_overlap must be in [0, 1]")
        if cfg.ngram < 1 or cfg.phash_size < 2 or cfg.max_phash_distance < 0:
            raise ValueError("decontam: ngram >= 1, phash_size >= 2 and max_phash_distance >= 0 required")
        scan_folder(cfg.folder)  # a missing, empty or malformed folder fails at start-up
        self.cfg = cfg
        self._provenance = ProvenanceStep(f"clean:{self.name}", VERSION, params_hash(asdict(cfg)))

    @property
    def index(self) -> DecontamIndex:
        return _index_for(self.cfg)

    def __call__(self, record: PageRecord) -> list[PageRecord]:
        from pipelines.clean.image_hash import perceptual_hash, pixel_hash

        if not isinstance(record.response, str):
            raise RecordError("bad_response", f"response must be a string, got {type(record.response).__name__}")
        index = self.index
        image = _decode(record.image, self.cfg.max_pixels)
        try:
            digest = pixel_hash(image, self.cfg.max_pixels)
            phash = perceptual_hash(image, self.cfg.phash_size, self.cfg.max_pixels)
        except RecordError:
            raise
        except Exception as exc:  # pixel data that fails only while converting
            raise RecordError("corrupt_image", f"cannot decode image: {exc}") from exc
        exact = index.match_pixels(digest)
        nearest = index.nearest_phash(phash)
        matches = index.text_matches(record.response)
        finding: dict[str, Any] = {
            "nearest_phash": None if nearest is None else {"item": nearest[0], "distance": nearest[1]},
            "ngram": _text_finding(matches[0]) if matches else None,
        }
        record.quality[self.name] = finding
        if exact is not None:
            finding["match"] = {"kind": "image", "item": exact}
            raise Dropped("contaminated_image")
        if nearest is not None and nearest[1] <= self.cfg.max_phash_distance:
            finding["match"] = {"kind": "phash", "item": nearest[0], "distance": nearest[1]}
            raise Dropped("contaminated_phash")
        # the item sharing the most 13-grams need not be the one past a threshold (a short item)
        hit = next((m for m in matches if self._contaminated(m)), None)
        if hit is not None:
            finding["match"] = {"kind": "text", **_text_finding(hit)}
            raise Dropped("contaminated_text")
        record.provenance.append(self._provenance)
        return [record]

    def _contaminated(self, m: TextMatch) -> bool:
        return m.record_overlap > self.cfg.max_ngram_overlap or (
            m.matched >= self.cfg.min_matched_ngrams and m.bench_overlap > self.cfg.max_bench_overlap)


def _text_finding(m: TextMatch) -> dict[str, Any]:
    return {"item": m.item, "matched": m.matched, "record_overlap": round(m.record_overlap, 6),
            "bench_overlap": round(m.bench_overlap, 6)}
