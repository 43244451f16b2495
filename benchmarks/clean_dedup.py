"""Dedup figures: MinHash near-duplicate text against ``datasketch``, and image keys per second.

    python benchmarks/clean_dedup.py [--texts 10000] [--pages 300] [--seed 0] [--no-datasketch]

(a) **MinHash near-duplicate text.** ``--texts`` labels of 2-16 KB (Zipf-distributed words, so
    unrelated labels share common phrases as real ones do); ``--dup-fraction`` (10 %) of the base
    labels get a planted copy with 1-5 % of their words edited (substituted, deleted or inserted).
    Ours: ``minhash_signature`` + ``band_keys`` (+ sketch) per label, timed as records/s on one
    core; then the grouping steps (``group_edges`` with sketch verification,
    ``connected_components``) in memory, as the DAG runs them. ``--templated-fraction`` (5 %) of
    the base labels are hard negatives: 8 KB labels on one of 4 templates whose boilerplate makes
    40-65 % of their words (pairwise Jaccard about 0.2-0.5). Reported: recall of planted pairs
    (both in one component), the recall MinHash theory predicts from each pair's exact shingle
    Jaccard, 1 - (1 - J**8)**14, false-positive pairs (edges between labels that are not a planted
    pair) and unrelated labels dropped. ``datasketch`` (MinHash + MinHashLSH, params=(14, 8),
    112 permutations, seed 1, the same normalised word 5-gram shingles) gives its recall,
    false-positive candidate pairs and records/s for MinHash + LSH insert. ``datasketch`` is
    installed into the running interpreter with pip if missing (benchmark only, not a project
    dependency).
(b) **Exact image dedup.** Renders ``--pages`` distinct text pages with ``pipelines.render.
    render_page`` (PNG, the corpus default), then times ``pixel_hash`` on the encoded bytes
    (pages/s, one core) and ``extract_keys`` with image keys (pixel hash + both pHashes); checks
    that lossless WebP re-encodes of a subset collapse.
(c) **Near-duplicate images.** A resized (2/3) JPEG (quality 70) of each rendered page: recall
    (variant in its original's component), edges between distinct pages and the largest band
    group, for pigeonhole bands over the 64-bit pHash (distance <= 3) and for the default, 16 bands
    of 32 bits sampled from the 256-bit pHash (distance <= 20).
"""

from __future__ import annotations

import argparse
import importlib
import io
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from PIL import Image  # noqa: E402

from pipelines.clean.dedup import Member, connected_components, extract_keys, group_edges  # noqa: E402
from pipelines.clean.dedup_config import DedupConfig, MinHashConfig  # noqa: E402
from pipelines.clean.image_hash import (  # noqa: E402
    hamming,
    perceptual_hash,
    phash_band_keys,
    phash_sample_keys,
    pixel_hash,
)
from pipelines.clean.minhash import band_keys, minhash_signature, normalize_words, shingle_hashes, sketch  # noqa: E402
from pipelines.render import RenderConfig, render_page  # noqa: E402
from pipelines.sources.base import SourcePage  # noqa: E402
from samples.make.pdfs import paragraphs, text_pdf  # noqa: E402


def _ensure(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        print(f"installing {package} (benchmark only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", package], check=True)
        importlib.invalidate_caches()
        return importlib.import_module(module)


# --------------------------------------------------------------------------- (a) text


def make_texts(n_total: int, dup_fraction: float, templated_fraction: float, seed: int
               ) -> tuple[list[str], list[tuple[int, int]], list[float], list[list[int]]]:
    """Labels, the planted ``(original, copy)`` index pairs with each copy's edit rate, and the
    templated labels (hard negatives) by template."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "to", "ri", "mon", "sel", "ta", "ve", "lo", "dur", "an", "pe", "qui", "s", "x", "ne", "ro"]
    vocab = sorted({"".join(rng.choice(syllables, size=rng.integers(1, 5))) for _ in range(60000)})
    weights = 1.0 / (np.arange(len(vocab)) + 10.0)
    weights /= weights.sum()
    lengths = np.array([len(w) for w in vocab])
    n_base = round(n_total / (1 + dup_fraction))
    n_templated = round(templated_fraction * n_base)
    templates = [[vocab[i] for i in rng.choice(len(vocab), size=1500, p=weights)] for _ in range(4)]
    by_template: list[list[int]] = [[] for _ in templates]
    texts: list[str] = []
    for n in range(n_base):
        templated = n < n_templated
        target = 8192 if templated else int(rng.integers(2048, 15800))  # bytes, room for edits
        idx = rng.choice(len(vocab), size=target // 3, p=weights)
        ends = np.cumsum(lengths[idx] + 1)
        words = [vocab[i] for i in idx[: int(np.searchsorted(ends, target - 40))]]
        if templated:  # shared boilerplate: 40-65 % of the words, from the template's start
            t = n % len(templates)
            k = int(rng.uniform(0.4, 0.65) * len(words))
            words[:k] = templates[t][:k]
            by_template[t].append(n)
        for cut in range(int(rng.integers(8, 20)), len(words), int(rng.integers(40, 120))):
            words[cut] += ".\n\n"  # paragraphs
        texts.append(" ".join(words))
    pairs: list[tuple[int, int]] = []
    rates: list[float] = []
    for original in rng.choice(n_base, size=n_total - n_base, replace=False):
        words = texts[original].split(" ")
        rate = float(rng.uniform(0.01, 0.05))
        for _ in range(max(1, round(rate * len(words)))):
            op, pos = rng.random(), int(rng.integers(0, len(words)))
            if op < 0.5:
                words[pos] = vocab[int(rng.integers(len(vocab)))]
            elif op < 0.75 and len(words) > 1:
                del words[pos]
            else:
                words.insert(pos, vocab[int(rng.integers(len(vocab)))])
        pairs.append((int(original), len(texts)))
        rates.append(rate)
        texts.append(" ".join(words))
    return texts, pairs, rates, by_template


def ours_text(texts: list[str], pairs: list[tuple[int, int]], cfg: DedupConfig) -> dict:
    mh = cfg.minhash
    t0 = time.perf_counter()
    keyed: list[tuple[list[str], bytes]] = []
    for value in texts:
        signature = minhash_signature(value, mh)
        keyed.append((band_keys(signature, mh), sketch(signature)))
    sig_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    groups: dict[str, list[Member]] = defaultdict(list)
    for i, (keys, sk) in enumerate(keyed):
        member = Member(f"{i:06d}", "bench", 0.0, sketch=sk)
        for key in keys:
            groups[key].append(member)
    edges = [e for key, members in groups.items() if len(members) > 1 for e in group_edges(key, members, cfg)]
    components = connected_components(edges)
    group_s = time.perf_counter() - t0

    planted = {frozenset((f"{a:06d}", f"{b:06d}")) for a, b in pairs}
    candidates = set()
    for members in groups.values():
        ids = sorted(m.id for m in members)
        candidates.update(frozenset((x, y)) for i, x in enumerate(ids) for y in ids[i + 1:])
    where = {m.id: n for n, comp in enumerate(components) for m in comp}
    found = sum(1 for a, b in pairs if where.get(f"{a:06d}", -1) == where.get(f"{b:06d}", -2))
    planted_ids = {x for pair in planted for x in pair}
    return {
        "sig_s": sig_s,
        "group_s": group_s,
        "candidate_recall": len(candidates & planted) / len(planted),
        "recall": found / len(pairs),
        "found_flags": [where.get(f"{a:06d}", -1) == where.get(f"{b:06d}", -2) for a, b in pairs],
        "fp_candidates": len(candidates - planted),
        "fp_edges": sum(1 for a, b in edges if frozenset((a.id, b.id)) not in planted),
        "unrelated_in_components": sum(1 for comp in components for m in comp if m.id not in planted_ids),
    }


def theory(texts: list[str], pairs: list[tuple[int, int]], mh: MinHashConfig) -> tuple[list[float], list[float]]:
    """Exact shingle Jaccard of each planted pair and its LSH candidate probability."""
    jaccards, probs = [], []
    for a, b in pairs:
        sa = shingle_hashes(normalize_words(texts[a]), mh.ngram, mh.seed)
        sb = shingle_hashes(normalize_words(texts[b]), mh.ngram, mh.seed)
        inter = len(np.intersect1d(sa, sb, assume_unique=True))
        j = inter / (len(sa) + len(sb) - inter)
        jaccards.append(j)
        probs.append(1 - (1 - j ** mh.rows) ** mh.bands)
    return jaccards, probs


def datasketch_text(texts: list[str], pairs: list[tuple[int, int]], mh: MinHashConfig) -> dict:
    datasketch = _ensure("datasketch", "datasketch")
    first = datasketch.MinHash(num_perm=mh.num_perm, seed=mh.seed)  # its default scheme (affine32 in 2.x)
    perms, scheme = first.permutations, getattr(first, "scheme", None)
    extra = {"scheme": scheme} if scheme else {}
    lsh = datasketch.MinHashLSH(num_perm=mh.num_perm, params=(mh.bands, mh.rows))
    t0 = time.perf_counter()
    sigs = []
    for i, value in enumerate(texts):
        words = normalize_words(value)
        shingles = {" ".join(words[k:k + mh.ngram]).encode() for k in range(max(1, len(words) - mh.ngram + 1))}
        m = datasketch.MinHash(num_perm=mh.num_perm, seed=mh.seed, permutations=perms, **extra)
        m.update_batch(list(shingles))
        lsh.insert(i, m)
        sigs.append(m)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    candidates = set()
    for i, m in enumerate(sigs):
        candidates.update(frozenset((i, j)) for j in lsh.query(m) if j != i)
    query_s = time.perf_counter() - t0
    planted = {frozenset(p) for p in pairs}
    return {
        "version": getattr(datasketch, "__version__", "?") + (f" ({scheme})" if scheme else ""),
        "build_s": build_s,
        "query_s": query_s,
        "recall": len(candidates & planted) / len(planted),
        "found_flags": [frozenset(p) in candidates for p in pairs],
        "fp_candidates": len(candidates - planted),
    }


def bench_text(args) -> None:
    cfg = DedupConfig()
    mh = cfg.minhash
    t0 = time.perf_counter()
    texts, pairs, rates, by_template = make_texts(args.texts, args.dup_fraction, args.templated_fraction, args.seed)
    sizes = [len(t.encode()) for t in texts]
    print(f"(a) MinHash near-duplicate text: {len(texts)} labels of {min(sizes) / 1024:.1f}-{max(sizes) / 1024:.1f} KB "
          f"(mean {np.mean(sizes) / 1024:.1f} KB), {len(pairs)} planted copies with 1-5 % of words edited "
          f"(made in {time.perf_counter() - t0:.0f} s); word {mh.ngram}-grams, {mh.bands} bands x {mh.rows} rows, "
          f"seed {mh.seed}")
    ours = ours_text(texts, pairs, cfg)
    jaccards, probs = theory(texts, pairs, mh)
    template_pairs = [(a, b) for members in by_template for i, a in enumerate(members) for b in members[:i]]
    template_j, _ = theory(texts, template_pairs[:: max(1, len(template_pairs) // 2000)], mh)
    print(f"  hard negatives: {sum(map(len, by_template))} labels in {len(by_template)} templates sharing 40-65 % "
          f"of their words ({len(template_pairs)} pairs, exact Jaccard {min(template_j):.2f}-{max(template_j):.2f}, "
          f"mean {np.mean(template_j):.2f}); every pair that is not planted counts as a false positive")
    rate = len(texts) / ours["sig_s"]
    mb = sum(sizes) / 1e6 / ours["sig_s"]
    print(f"  planted pairs' exact Jaccard: mean {np.mean(jaccards):.3f}, "
          f"min {min(jaccards):.3f}, max {max(jaccards):.3f}")
    print(f"  {'':<44}{'recall':>8}{'FP pairs':>10}{'records/s':>11}")
    print(f"  {'theory 1-(1-J^8)^14 (expected recall)':<44}{np.mean(probs):>8.3f}")
    print(f"  {'ours: band candidates':<44}{ours['candidate_recall']:>8.3f}{ours['fp_candidates']:>10}"
          f"{rate:>11.0f}   signature+band keys+sketch, {mb:.1f} MB/s")
    print(f"  {'ours: after sketch check + components':<44}{ours['recall']:>8.3f}{ours['fp_edges']:>10}"
          f"{'':>11}   grouping {ours['group_s']:.2f} s; unrelated labels in components: "
          f"{ours['unrelated_in_components']}")
    buckets = [(0.01, 0.02), (0.02, 0.03), (0.03, 0.04), (0.04, 0.0501)]
    rows = []
    for lo, hi in buckets:
        sel = [i for i, r in enumerate(rates) if lo <= r < hi]
        rows.append((lo, hi, sel))
    if not args.no_datasketch:
        ds = datasketch_text(texts, pairs, mh)
        ds_rate = len(texts) / ds["build_s"]
        print(f"  {'datasketch ' + ds['version'] + ': LSH candidates':<44}{ds['recall']:>8.3f}{ds['fp_candidates']:>10}"
              f"{ds_rate:>11.0f}   MinHash+insert; queries {ds['query_s']:.1f} s; ours {rate / ds_rate:.1f}x faster")
    print("  recall by edit rate:" + "".join(
        f"  {100 * lo:.0f}-{100 * min(hi, 0.05):.0f}%: ours {np.mean([ours['found_flags'][i] for i in sel]):.2f}"
        + (f" / datasketch {np.mean([ds['found_flags'][i] for i in sel]):.2f}" if not args.no_datasketch else "")
        + f" / theory {np.mean([probs[i] for i in sel]):.2f}"
        for lo, hi, sel in rows if sel))


# --------------------------------------------------------------------------- (b), (c) images


def render_pages(n: int, seed: int) -> list:
    rng = random.Random(seed)
    cfg = RenderConfig()
    records = []
    for i in range(n):
        pdf = text_pdf([paragraphs(rng, rng.randint(3, 9), (20, 90))])
        page = SourcePage(source="bench", source_id=f"p{i:05d}", page_number=1, payload_kind="pdf", payload=pdf,
                          response="", domain="d", language="en", license="cc0", instruction="Convert.")
        records.append(render_page(page, cfg))
    return records


def bench_images(args) -> None:
    t0 = time.perf_counter()
    records = render_pages(args.pages, args.seed)
    render_s = time.perf_counter() - t0
    sizes = [len(r.image) for r in records]
    print(f"(b) exact image dedup: {len(records)} distinct pages rendered by render_page "
          f"({records[0].width}x{records[0].height} PNG, mean {np.mean(sizes) / 1024:.0f} KB, "
          f"{len(records) / render_s:.1f} pages/s to render)")
    t0 = time.perf_counter()
    hashes = [pixel_hash(r.image) for r in records]
    px_s = time.perf_counter() - t0
    print(f"  pixel_hash (decode + RGB + sha256):       {len(records) / px_s:8.1f} pages/s "
          f"({1000 * px_s / len(records):.1f} ms/page, one core)")
    image_cfg = DedupConfig(near_text=False)
    t0 = time.perf_counter()
    for r in records:
        extract_keys(r, image_cfg)
    keys_s = time.perf_counter() - t0
    print(f"  extract_keys, image keys (px + 2 pHashes): {len(records) / keys_s:8.1f} pages/s "
          f"({1000 * keys_s / len(records):.1f} ms/page)")
    subset = records[: min(30, len(records))]
    collapsed = 0
    for r, h in zip(subset, hashes):
        rgb = Image.open(io.BytesIO(r.image)).convert("RGB")
        buf = io.BytesIO()
        rgb.save(buf, format="WEBP", lossless=True, method=0)
        collapsed += pixel_hash(buf.getvalue()) == h
    print(f"  lossless WebP (RGB) re-encodes of grey PNG pages with the same pixel hash: {collapsed}/{len(subset)}; "
          f"distinct pixel hashes among the {len(records)} pages: {len(set(hashes))}")

    originals, variants = [], []
    for r in records:
        image = Image.open(io.BytesIO(r.image)).convert("RGB")
        small = image.resize((image.width * 2 // 3, image.height * 2 // 3), Image.Resampling.BILINEAR)
        buf = io.BytesIO()
        small.save(buf, format="JPEG", quality=70)
        originals.append(image)
        variants.append(buf.getvalue())
    print(f"(c) near-duplicate images: {len(records)} pages and a 2/3-size JPEG (q70) of each")
    hashes64, hashes256 = [], []
    for data in [*originals, *variants]:
        hashes64.append(perceptual_hash(data))
        hashes256.append(perceptual_hash(data, hash_size=16))
    n = len(records)
    cfg = DedupConfig()
    schemes = (
        ("64-bit pHash, 4x16-bit pigeonhole, d <= 3", hashes64, lambda h: phash_band_keys(h, 4), 3),
        ("256-bit pHash, 16x32 sampled bits, d <= 20", hashes256,
         lambda h: phash_sample_keys(h, cfg.phash_bands, cfg.phash_band_bits), cfg.phash_max_distance),
    )
    for label, hashes, keys_of, max_distance in schemes:
        scheme_cfg = DedupConfig(phash_max_distance=max_distance)
        groups: dict[str, list[Member]] = defaultdict(list)
        for i, h in enumerate(hashes):
            member = Member(f"{i % n:05d}-{i // n}", "bench", 0.0, phash=h)
            for key in keys_of(h):
                groups[key].append(member)
        edges = [e for ms in groups.values() if len(ms) > 1 for e in group_edges("ph:", ms, scheme_cfg)]
        where = {m.id: c for c, comp in enumerate(connected_components(edges)) for m in comp}
        recall = np.mean([where.get(f"{p:05d}-0", -1) == where.get(f"{p:05d}-1", -2) for p in range(n)])
        false_pairs = sum(1 for a, b in edges if a.id[:5] != b.id[:5])
        largest = max(len(ms) for ms in groups.values())
        distinct = [hamming(hashes[i], hashes[j]) for i in range(n) for j in range(i)]
        print(f"  {label:<44} recall {recall:.3f}  edges between distinct pages {false_pairs:4d}  "
              f"largest band group {largest:4d} of {2 * n}  distinct pages' distance: min {min(distinct)}, "
              f"pairs within threshold {sum(d <= max_distance for d in distinct)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=10000, help="labels in all, planted copies included")
    parser.add_argument("--dup-fraction", type=float, default=0.1, help="share of base labels given a copy")
    parser.add_argument("--templated-fraction", type=float, default=0.05,
                        help="share of base labels built on a shared boilerplate (hard negatives)")
    parser.add_argument("--pages", type=int, default=300, help="pages to render for (b) and (c)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-datasketch", action="store_true", help="skip the datasketch comparison")
    parser.add_argument("--skip-text", action="store_true")
    parser.add_argument("--skip-images", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_text:
        bench_text(args)
    if not args.skip_images:
        bench_images(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
