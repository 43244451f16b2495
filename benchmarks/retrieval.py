"""Retrieval quality where the truth is known: precision@100 and recall@1000 per failure mode, retrieval vs random
sampling vs scoring every pool page with the classifier (exhaustive); and which CPU embedding retrieves better.

    .venv/bin/python benchmarks/retrieval.py [--html 'out/pool/html-s1[2-9]/records/*.parquet'] [--plain 1000]

Corpus (labelled, classifiers train on it): the Chromium pages of ``--train-html`` (synth/, all suites) plus
``--train-plain`` cheap PIL pages (``benchmarks/retrieval_pool.py``). Failure modes: ``table@synthetic-table``
and ``math@synthetic-formula``, 20 failing pages each (seeds), taken from the corpus's table and formula suites.
Pool: the Chromium pages of ``--html`` plus ``--plain`` PIL pages (5% with a ruled table), cached under
out/pool/. Truth from generation, two ways: ``suite`` (the synth suite the page was made for; PIL table
pages count as table) and ``structure`` (the generated reference holds an HTML table / a display formula).
Make the Chromium pages with ``python -m synth --pages 400 --seed S --out out/pool/html-sS``.
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
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.retrieval_pool import plain_page  # noqa: E402
from schemas.page import PAGE_SCHEMA  # noqa: E402

MODES = {"table@synthetic-table": ("table", "synthetic-table"), "math@synthetic-formula": ("math", "synthetic-formula")}
DISPLAY = re.compile(r"\$\$|\\\[|\\begin\{(equation|align|gather)")


def plain_shard(path: Path, n: int, seed: int, table_share: float = 0.05) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        with pq.ParquetWriter(str(path) + ".tmp", PAGE_SCHEMA) as w:
            for i in range(n):
                rec, _ = plain_page(i, seed, table_share)
                rows.append(rec.to_row())
                if len(rows) == 100:
                    w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
                    rows = []
            if rows:
                w.write_table(pa.Table.from_pylist(rows, PAGE_SCHEMA))
        Path(str(path) + ".tmp").rename(path)
    return path


def truths(paths: list[str]) -> dict[str, dict[str, bool]]:
    """id -> {table_suite, formula_suite, table_structure, formula_structure} from generation."""
    out = {}
    for p in paths:
        t = pq.read_table(p, columns=["id", "domain", "response", "metadata"])
        for pid, dom, resp, meta in zip(*(t.column(c).to_pylist() for c in ("id", "domain", "response", "metadata"))):
            m = json.loads(meta or "{}")
            plain_table = bool(m.get("has_table"))
            out[pid] = {"table_suite": dom == "synthetic-table" or plain_table,
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
    ap.add_argument("--train-html", default="out/pool/html-s11/records/*.parquet")
    ap.add_argument("--train-plain", type=int, default=200)
    ap.add_argument("--html", default="out/pool/html-s1[2-9]/records/*.parquet")
    ap.add_argument("--plain", type=int, default=1000)
    ap.add_argument("--out", default="out/bench-retrieval")
    ap.add_argument("--embedding", default="layout")
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--report-only", action="store_true", help="recompute the tables from an earlier run's outputs")
    ap.add_argument("--dilute", type=float, default=0.1, help="also score a sub-pool whose positives are subsampled "
                                                              "to this prevalence")
    args = ap.parse_args()

    out = Path(args.out)
    corpus = out / "corpus" / "data"
    corpus.mkdir(parents=True, exist_ok=True)
    train_html = sorted(glob.glob(args.train_html))
    for k, p in enumerate(train_html):
        dst = corpus / f"html-{k:03d}.parquet"
        if not dst.exists():
            dst.symlink_to(Path(p).resolve())
    plain_shard(corpus / "plain.parquet", args.train_plain, seed=100)
    pool_dir = out / "pool-pages"
    pool_dir.mkdir(parents=True, exist_ok=True)
    html = sorted(glob.glob(args.html))
    for k, p in enumerate(html):
        dst = pool_dir / f"html-{k:03d}.parquet"
        if not dst.exists():
            dst.symlink_to(Path(p).resolve())
    t = time.perf_counter()
    half = args.plain // 2
    names = [f"plain-s{200 + j}-{m}.parquet" for j, m in enumerate((half, args.plain - half)) if m]
    for j, name in enumerate(names):
        plain_shard(Path("out/pool") / name, int(name.split("-")[-1].split(".")[0]), seed=200 + j)
    for name in names:
        dst = pool_dir / name
        if not dst.exists():
            dst.symlink_to((Path("out/pool") / name).resolve())
    print(f"pool pages ready ({time.perf_counter() - t:.0f} s)", flush=True)

    corpus_files = sorted(str(p) for p in corpus.glob("*.parquet"))
    pool_files = sorted(str(p) for p in pool_dir.glob("*.parquet"))
    truth_c, truth_p = truths(corpus_files), truths(pool_files)
    seeds = {}
    for mode, (_, domain) in MODES.items():
        key = "table_suite" if mode.startswith("table") else "formula_suite"
        seeds[mode] = sorted(i for i, tr in truth_c.items() if tr[key] and i in truth_c)[:20]
    errors = {"failure_modes": [{"name": m, "test_type": tt, "domain": d, "example_ids": seeds[m]}
                                for m, (tt, d) in MODES.items()]}
    (out / "errors.json").write_text(json.dumps(errors))
    if not args.report_only:
        run_both(args, out, pool_dir)
    report(args, out, html, truth_c, truth_p, seeds)


def run_both(args, out: Path, pool_dir: Path) -> None:
    from classifiers.retrieve import RetrieveConfig, retrieve
    from classifiers.train import TrainConfig, train

    t = time.perf_counter()
    tc = time.process_time()
    train(TrainConfig(corpus=str(out / "corpus"), errors=str(out / "errors.json"), out=str(out / "clf"),
                      embedding=args.embedding))
    print(f"train: {time.perf_counter() - t:.0f} s wall, {time.process_time() - tc:.0f} s CPU", flush=True)
    t = time.perf_counter()
    summary = retrieve(RetrieveConfig(corpus=str(pool_dir), classifiers=str(out / "clf"), out=str(out / "retrieval"),
                                      k=args.k, exhaustive=True))
    print(f"retrieve: {time.perf_counter() - t:.0f} s wall (pool job {summary['seconds_pool_job']} s)", flush=True)


def report(args, out: Path, html: list[str], truth_c: dict, truth_p: dict, seeds: dict) -> None:
    corpus_files = sorted(str(p) for p in (out / "corpus" / "data").glob("*.parquet"))
    n = len(truth_p)
    lines = [f"pool: {n} pages ({len(html)} Chromium shards, {args.plain} PIL pages); corpus {len(truth_c)} pages; "
             f"20 seeds per mode; embedding {args.embedding}", "",
             "| mode | truth | prevalence | random p@100 | retrieval p@100 | exhaustive p@100 | retrieval / random |"
             " random r@1000 | retrieval r@1000 | exhaustive r@1000 |", "|" + "---|" * 10]
    for mode in MODES:
        ranked = read_ranked(out / "retrieval" / f"{mode}.jsonl")
        exhaustive = read_ranked(out / "retrieval" / f"{mode}.exhaustive.jsonl")
        for kind in ("suite", "structure"):
            key = ("table_" if mode.startswith("table") else "formula_") + kind
            truth = {i: tr[key] for i, tr in truth_p.items()}
            prev = sum(truth.values()) / n
            p, r = metrics(ranked, truth)
            pe, re_ = metrics(exhaustive, truth)
            lines.append(f"| {mode} | {kind} | {prev:.3f} | {prev:.2f} | {p:.2f} | {pe:.2f} "
                         f"| {p / max(prev, 1e-9):.1f}x | {min(1.0, 1000 / n):.2f} | {r:.2f} | {re_:.2f} |")
    lines += ["", f"sub-pool with positives subsampled to {args.dilute:.0%} prevalence (seeded; rankings filtered to "
              "the sub-pool):", "", "| mode | truth | pages | prevalence | retrieval p@100 | exhaustive p@100 | "
              "retrieval / random | retrieval r@1000 | exhaustive r@1000 |", "|" + "---|" * 9]
    rng = np.random.default_rng(0)
    for mode in MODES:
        ranked = read_ranked(out / "retrieval" / f"{mode}.jsonl")
        exhaustive = read_ranked(out / "retrieval" / f"{mode}.exhaustive.jsonl")
        for kind in ("suite", "structure"):
            key = ("table_" if mode.startswith("table") else "formula_") + kind
            pos = sorted(i for i, tr in truth_p.items() if tr[key])
            neg = sorted(i for i, tr in truth_p.items() if not tr[key])
            keep_pos = int(round(args.dilute * len(neg) / (1 - args.dilute)))
            if keep_pos >= len(pos) or keep_pos < 1:
                continue
            sub = set(neg) | set(rng.choice(pos, keep_pos, replace=False).tolist())
            truth = {i: truth_p[i][key] for i in sub}
            prev = keep_pos / len(sub)
            p, r = metrics([i for i in ranked if i in sub], truth)
            pe, re_ = metrics([i for i in exhaustive if i in sub], truth)
            lines.append(f"| {mode} | {kind} | {len(sub)} | {prev:.3f} | {p:.2f} | {pe:.2f} | {p / prev:.1f}x "
                         f"| {r:.2f} | {re_:.2f} |")
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
