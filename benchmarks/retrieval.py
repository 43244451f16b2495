"""Retrieval quality where the truth is known: precision@100 and recall@1000 per failure mode, retrieval vs random
sampling vs scoring every pool page with the classifier (exhaustive); and which CPU embedding retrieves better.

    .venv/bin/python benchmarks/retrieval.py [--nn-per-seed 20 --head-k 400] [--index-kind ivf]

The pages (``benchmarks/retrieval_pool.py``, rendered once and cached under ``--cache``, ~20 min of CPU):
corpus (labelled; the classifiers train on it): 2 x 300 synth/ Chromium pages of all suites + 200 PIL pages (5% with
a ruled table). Pool: 240 table-suite + 240 formula-suite Chromium pages, 300 layout-suite Chromium pages with
their tables and formulas stripped from the spec before rendering, 1,500 PIL pages (2% with a ruled table):
~2,280 pages, ~10% prevalence per mode. Failure modes ``table@synthetic-table`` and ``math@synthetic-formula``,
20 failing pages each (seeds) from the corpus's table and formula suites.

Truth from generation, two ways: ``suite`` (the page was generated for the table / formula suite; a PIL page
drawn with a table counts as table) and ``structure`` (the generated reference holds an HTML table / a display
formula). The candidate budget (``nn_per_seed`` x 20 seeds + ``head_k``) is kept well below the pool size, so
retrieval scores only a share of the pool and can miss what exhaustive scoring finds.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.retrieval_pool import build  # noqa: E402

MODES = {"table@synthetic-table": ("table", "synthetic-table"), "math@synthetic-formula": ("math", "synthetic-formula")}
DISPLAY = re.compile(r"\$\$|\\\[|\\begin\{(equation|align|gather)")


def truths(paths: list[str]) -> dict[str, dict[str, bool]]:
    """id -> {table_suite, formula_suite, table_structure, formula_structure} from generation."""
    out = {}
    for p in paths:
        t = pq.read_table(p, columns=["id", "domain", "response", "metadata"])
        for pid, dom, resp, meta in zip(*(t.column(c).to_pylist() for c in ("id", "domain", "response", "metadata"))):
            m = json.loads(meta or "{}")
            plain_table = bool(m.get("has_table"))
            out[pid] = {"plain": dom == "benchpool",
                        "table_suite": dom == "synthetic-table" or plain_table,
                        "formula_suite": dom == "synthetic-formula",
                        "table_structure": "<table" in resp,
                        "formula_structure": bool(DISPLAY.search(resp))}
    return out


def read_ranked(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()] if path.exists() else []


def metrics(ranked: list[str], truth: dict[str, bool]) -> tuple[float, float]:
    pos = sum(truth.values())
    p100 = sum(truth.get(i, False) for i in ranked[:100]) / 100
    r1000 = sum(truth.get(i, False) for i in ranked[:1000]) / max(pos, 1)
    return p100, r1000


def embedding_comparison(clf: Path, pool_out: Path, corpus_feats: list[str], truth_all, seeds: dict[str, list[str]]):
    """Seed-neighbour precision@100 of the layout and features embeddings (no classifier), exact search."""
    from classifiers.embed import FeatureEmbedder, LayoutEmbedder
    from classifiers.extract import INPUT_FEATURES, matrix, read_feature_rows

    def load(paths):
        ids, thumbs, feats, texts = [], [], [], []
        for t in read_feature_rows(paths, ["id", "thumb", "features", "text_layer"]):
            ids += t.column("id").to_pylist()
            thumbs.append(matrix(t, "thumb"))
            feats.append(matrix(t, "features")[:, :len(INPUT_FEATURES)])
            texts += t.column("text_layer").to_pylist()
        return ids, np.vstack(thumbs), np.vstack(feats), texts

    cids, cth, cf, ct = load(corpus_feats)
    pids, pth, pf, pt = load(sorted(glob.glob(str(pool_out / "features" / "*.parquet"))))
    lay = LayoutEmbedder().fit(cth, 64)
    fe = FeatureEmbedder().fit(cf, ct)
    res = {}
    for kind, (ce, pe) in {"layout": (lay.transform(cth), lay.transform(pth)),
                           "features": (fe.transform(cf, ct), fe.transform(pf, pt))}.items():
        cpos = {i: k for k, i in enumerate(cids)}
        for mode, sids in seeds.items():
            q = ce[[cpos[i] for i in sids]]
            sims = (pe @ q.T).max(axis=1)  # a pool page's best similarity to any seed
            ranked = [pids[j] for j in np.argsort(-sims, kind="stable")]
            key = "table_structure" if mode.startswith("table") else "formula_structure"
            res[(kind, mode)] = metrics(ranked, {i: truth_all[i][key] for i in pids})
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="out/retrieval-bench-pages", help="rendered pages (made once, kept)")
    ap.add_argument("--out", default="out/bench-retrieval")
    ap.add_argument("--embedding", default="layout")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--nn-per-seed", type=int, default=20)
    ap.add_argument("--head-k", type=int, default=400)
    ap.add_argument("--index-kind", default="ivf", help="flat (exact) or ivf (approximate) over the pool")
    ap.add_argument("--nlist", type=int, default=64)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--report-only", action="store_true", help="recompute the tables from an earlier run's outputs")
    args = ap.parse_args()

    t = time.perf_counter()
    pages = build(Path(args.cache))
    print(f"pages ready ({time.perf_counter() - t:.0f} s)", flush=True)
    out = Path(args.out)
    corpus_files = link(pages["corpus"], out / "corpus" / "data")
    pool_files = link(pages["pool"], out / "pool-pages")
    truth_c, truth_p = truths(corpus_files), truths(pool_files)
    seeds = {}
    for mode in MODES:
        key = "table_suite" if mode.startswith("table") else "formula_suite"
        seeds[mode] = sorted(i for i, tr in truth_c.items() if tr[key] and not tr["plain"])[:20]
    errors = {"failure_modes": [{"name": m, "test_type": tt, "domain": d, "example_ids": seeds[m]}
                                for m, (tt, d) in MODES.items()]}
    (out / "errors.json").write_text(json.dumps(errors))
    summary = None if args.report_only else run_both(args, out)
    if summary is None and (out / "retrieval" / "summary.json").exists():
        summary = json.loads((out / "retrieval" / "summary.json").read_text())
    report(args, out, corpus_files, truth_c, truth_p, seeds, summary)


def link(paths: list[Path], folder: Path) -> list[str]:
    """Symlinks to the cached shards in ``folder`` (a corpus / pool folder of its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for p in paths:
        dst = folder / p.name
        if not dst.exists():
            dst.symlink_to(p.resolve())
        out.append(str(dst))
    return sorted(out)


def run_both(args, out: Path) -> dict:
    from classifiers.index import IndexConfig
    from classifiers.retrieve import RetrieveConfig, retrieve
    from classifiers.train import TrainConfig, train

    t = time.perf_counter()
    tc = time.process_time()
    train(TrainConfig(corpus=str(out / "corpus"), errors=str(out / "errors.json"), out=str(out / "clf"),
                      embedding=args.embedding))
    print(f"train: {time.perf_counter() - t:.0f} s wall, {time.process_time() - tc:.0f} s CPU", flush=True)
    t = time.perf_counter()
    index = IndexConfig(kind=args.index_kind, nlist=args.nlist, nprobe=args.nprobe)
    summary = retrieve(RetrieveConfig(corpus=str(out / "pool-pages"), classifiers=str(out / "clf"),
                                      out=str(out / "retrieval"), k=args.k, nn_per_seed=args.nn_per_seed,
                                      head_k=args.head_k, exhaustive=True, index=index))
    print(f"retrieve: {time.perf_counter() - t:.0f} s wall (pool job {summary['seconds_pool_job']} s)", flush=True)
    return summary


def report(args, out: Path, corpus_files: list[str], truth_c: dict, truth_p: dict, seeds: dict,
           summary: dict | None) -> None:
    n = len(truth_p)
    budget = 20 * args.nn_per_seed + args.head_k
    lines = [f"pool: {n} pages ({sum(not t['plain'] for t in truth_p.values())} Chromium, "
             f"{sum(t['plain'] for t in truth_p.values())} PIL); corpus {len(truth_c)} pages; 20 seeds per mode; "
             f"embedding {args.embedding}; index {args.index_kind} (nlist {args.nlist}, nprobe {args.nprobe}); "
             f"candidate budget {args.nn_per_seed} per seed + head {args.head_k} = at most {budget} "
             f"({budget / n:.0%} of the pool)", ""]
    if summary:
        for mode in MODES:
            m = summary.get("modes", {}).get(mode, {})
            lines.append(f"{mode}: {m.get('candidates', '?')} candidates scored of {n} pool pages, "
                         f"{m.get('kept', '?')} kept")
        lines.append("")
    lines += ["| mode | truth | positives | prevalence = random p@100 | retrieval p@100 | exhaustive p@100 | "
              "retrieval / random | random r@1000 | retrieval r@1000 | exhaustive r@1000 |", "|" + "---|" * 10]
    for mode in MODES:
        ranked = read_ranked(out / "retrieval" / f"{mode}.jsonl")
        exhaustive = read_ranked(out / "retrieval" / f"{mode}.exhaustive.jsonl")
        for kind in ("suite", "structure"):
            key = ("table_" if mode.startswith("table") else "formula_") + kind
            truth = {i: tr[key] for i, tr in truth_p.items()}
            pos = sum(truth.values())
            prev = pos / n
            p, r = metrics(ranked, truth)
            pe, re_ = metrics(exhaustive, truth)
            lines.append(f"| {mode} | {kind} | {pos} | {prev:.3f} | {p:.2f} | {pe:.2f} "
                         f"| {p / max(prev, 1e-9):.1f}x | {min(1.0, 1000 / n):.2f} | {r:.2f} | {re_:.2f} |")
    # Positives made another way: the PIL pages drawn with a ruled table (no synth/ page looks like them).
    plain_tables = {i for i, tr in truth_p.items() if tr["plain"] and tr["table_suite"]}
    if plain_tables:
        ranked = read_ranked(out / "retrieval" / "table@synthetic-table.jsonl")
        exhaustive = read_ranked(out / "retrieval" / "table@synthetic-table.exhaustive.jsonl")
        lines += ["", f"PIL table pages (made another way): {len(plain_tables)} in the pool; retrieval finds "
                  f"{len(plain_tables & set(ranked[:100]))} in its top 100, {len(plain_tables & set(ranked[:1000]))}"
                  f" in its top 1000; exhaustive {len(plain_tables & set(exhaustive[:100]))} / "
                  f"{len(plain_tables & set(exhaustive[:1000]))}"]
    lines += ["", "seed-neighbour retrieval alone (exact cosine, no classifier), structure truth:", "",
              "| embedding | mode | p@100 | r@1000 |", "|---|---|---|---|"]
    comparison = embedding_comparison(out / "clf", out / "retrieval" / "pool", _corpus_features(out, corpus_files),
                                      {**truth_c, **truth_p}, seeds)
    for (kind, mode), (p, r) in comparison.items():
        lines.append(f"| {kind} | {mode} | {p:.2f} | {r:.2f} |")
    print("\n".join(lines))
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _corpus_features(out: Path, corpus_files: list[str]) -> list[str]:
    """Feature shards of the corpus (extracted once, cached), for the embedding comparison."""
    from classifiers.extract import extract_shard

    paths = []
    for k, p in enumerate(corpus_files):
        dst = out / "corpus-features" / f"{k:03d}.parquet"
        if not dst.exists():
            extract_shard(p, str(dst))
        paths.append(str(dst))
    return paths


if __name__ == "__main__":
    main()
