"""Failure-mode classifiers (Jina-OCR-v1 4.1): one per mode of ``errors.json``, trained on the corpus's pages.

``python -m classifiers.train --corpus out/corpus --errors out/model/errors.json --out out/classifiers``

Targets per failure mode (``model.errors``: ``<test type>@<domain>`` with its ``failing_ids``, every failing
page up to ``model.errors``' bound, and ``example_ids``): the failing pages are positives, and so are the
pages carrying the weak label the test type maps to (``TYPE_WEAK_LABELS``: a ``table`` failure -> pages
whose label has an HTML table, ``math`` -> a display formula, a formula crop's bare-LaTeX label included,
``order`` -> >= 3 text columns; a ``historical-*`` domain adds the historical pages); a type with no weak
label falls back to the failing pages plus the pages of the mode's domain. Without failure modes, the weak
labels themselves are the modes (``weak:html_table`` ...).

Inputs are only what an unlabelled page has (``INPUT_FEATURES``: image and text layer, plus the page
embedding), so the classifiers can flag pages with no label yet. Per mode: a calibrated (sigmoid)
linear model and a calibrated gradient-boosted one; stratified cross-validation gives precision,
recall and average precision of each, the better (average precision) is kept. Written per mode under
``OUT/<mode>/``: ``model.skops`` (loaded through ``classifiers.store`` with a fixed trust list),
``head.npz`` (a linear model on the embedding alone, used as a query vector in the index), ``seeds.parquet``
(the failing pages' embeddings), ``card.json`` (features, CV figures, counts) and ``training_ids.txt``;
and ``OUT/manifest.json``, ``OUT/embedder.npz``, ``OUT/training_mix.parquet`` (id and image hash of every page
the model trained on: the train split of its training corpus, ``training_corpus``, for deduplication at retrieval).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from classifiers.embed import FeatureEmbedder, LayoutEmbedder, VisionEmbedder, write_embeddings
from classifiers.errors import InputError
from classifiers.extract import ALL_FEATURES, extract_row, iter_rows
from classifiers.features import INPUT_FEATURES, LABEL_FEATURES, WEAK_LABELS, weak_labels
from classifiers.store import save_model
from schemas.config import ConfigError, describe, load, option

log = logging.getLogger("classifiers.train")

TYPE_WEAK_LABELS = {"table": "html_table", "math": "display_formula", "order": "many_columns"}
MODEL_KINDS = ("linear", "boosted")


@dataclass(frozen=True)
class TrainConfig:
    """What ``python -m classifiers.train`` runs; every key also a ``--set key=value``."""

    corpus: str = option("out/corpus", help="corpus folder (data/*.parquet) of labelled pages")
    failing_corpus: str | None = option(None, help="corpus holding the failing pages of errors.json that `corpus` "
                                                   "lacks (the model's training corpus, e.g. make train's "
                                                   "out/curriculum); they join the training pages as positives")
    training_corpus: str | None = option(None, help="the corpus the model trained on (model.train's `corpus`): its "
                                                    "train-split pages are training_mix.parquet, which retrieval "
                                                    "leaves out; unset: failing_corpus when set, else corpus")
    errors: str | None = option("out/model/errors.json", help="model.errors report (unset or absent: weak labels)")
    out: str = option("out/classifiers", help="folder for the classifiers, cards and embedder")
    embedding: str = option("layout", help="page embedding: layout (thumbnail PCA), features (+ text-layer TF-IDF "
                                           "SVD) or vision (checkpoint's pooled vision tower)")
    checkpoint: str | None = option(None, help="model/ checkpoint folder for embedding: vision")
    dim: int = option(64, help="layout embedding dimension (PCA components)")
    max_pages: int = option(50_000, help="corpus pages read for training (the first, in file order), besides the "
                                         "failing pages, which are always read")
    folds: int = option(5, help="cross-validation folds (fewer when a class is smaller)")
    min_positives: int = option(4, help="a mode with fewer positives (or negatives) is skipped, with the reason")
    boosted_iter: int = option(100, help="HistGradientBoosting iterations")
    seed: int = option(0, help="CV split and model seeds")
    eval_fraction: float = option(0.1, help="the training run's held-out share of training_corpus (model.data): "
                                            "eval-split pages are not in the training mix, so retrieval may return "
                                            "them")

    def __post_init__(self) -> None:
        if self.embedding not in ("layout", "features", "vision"):
            raise ValueError(f"embedding must be layout, features or vision, got {self.embedding!r}")
        if self.embedding == "vision" and not self.checkpoint:
            raise ValueError("embedding: vision needs checkpoint")
        if self.folds < 2:
            raise ValueError("folds must be >= 2")

    @property
    def mix_corpus(self) -> str:
        """The model's training corpus, whose train split is the training mix: ``training_corpus``, else
        ``failing_corpus`` (documented as the model's corpus; ``make retrieve`` passes make train's), else ``corpus``
        (the classifiers train on the model's own corpus)."""
        return self.training_corpus or self.failing_corpus or self.corpus


def mode_slug(name: str) -> str:
    """A folder name for a mode: ``table@synthetic-table`` stays, anything outside [\\w.@+-] becomes _."""
    return re.sub(r"[^\w.@+-]", "_", name)


@dataclass
class CorpusPages:
    ids: list[str]
    domains: list[str]
    features: np.ndarray  # ALL_FEATURES
    thumbs: np.ndarray
    texts: list[str | None]
    vision: np.ndarray | None


def read_corpus(cfg: TrainConfig, failing_ids: set[str] | frozenset[str] = frozenset()) -> CorpusPages:
    """Feature rows of the first ``max_pages`` labelled pages and of every failing page in the corpus.
    Failing pages (``failing_ids``) the corpus lacks are read from ``failing_corpus`` and added."""
    from model.records import shard_files

    ids, domains, feats, thumbs, texts, vis = [], [], [], [], [], []
    vision = VisionEmbedder(cfg.checkpoint) if cfg.embedding == "vision" else None

    def add(row: dict, what: str) -> bool:
        """One page's features (and vision embedding) into the training arrays; False if it cannot be decoded."""
        try:
            r = extract_row(row)
        except Exception as exc:  # a page that cannot be decoded is left out, and said
            log.warning("train: %s %s left out: %s", what, row.get("id"), exc)
            return False
        ids.append(r["id"])
        domains.append(r["domain"])
        feats.append(r["features"])
        thumbs.append(r["thumb"])
        texts.append(r["text_layer"])
        if vision is not None:
            image = row["image"]["bytes"] if isinstance(row["image"], dict) else row["image"]
            vis.append(vision.embed_images([bytes(image)])[0])
        return True

    failing = set(failing_ids)
    for path in shard_files(cfg.corpus):
        for row in iter_rows(path):
            # max_pages caps the pages sampled; the failing pages (the mode's positives) are always taken
            if len(ids) >= cfg.max_pages and row["id"] not in failing:
                continue
            add(row, "page")
    missing = failing - set(ids)
    if missing and cfg.failing_corpus:
        for path in shard_files(cfg.failing_corpus):
            for row in iter_rows(path):
                if row["id"] not in missing:
                    continue
                if add(row, "failing page"):
                    missing.discard(row["id"])
    if missing:
        log.warning("train: %d failing pages are in neither %s nor failing_corpus %s", len(missing), cfg.corpus,
                    cfg.failing_corpus)
    if not ids:
        raise InputError(f"no readable pages in {cfg.corpus}")
    return CorpusPages(ids, domains, np.array(feats, np.float32), np.array(thumbs, np.float32), texts,
                       np.array(vis, np.float32) if vis else None)


def training_mix(cfg: TrainConfig) -> pa.Table:
    """(id, image_sha256) of every page the model trained on: the rows of its training corpus (``mix_corpus``)
    in split train, less the eval share ``model.records.assigned_split`` holds out. Only those columns are read.
    A pool page outside it (another corpus, or this one's eval split) was never trained on, so retrieval may
    return it."""
    from model.records import assigned_split, open_parquet, shard_files

    mix_ids, mix_sha = [], []
    for path in shard_files(cfg.mix_corpus):
        pf = open_parquet(path)
        cols = [c for c in ("id", "split", "image_sha256") if c in pf.schema_arrow.names]
        for g in range(pf.metadata.num_row_groups):
            for row in pf.read_row_group(g, columns=cols, use_threads=False).to_pylist():
                if assigned_split(row["id"], row.get("split") or "train", cfg.eval_fraction) == "train":
                    mix_ids.append(row["id"])
                    mix_sha.append(row.get("image_sha256") or "")
    return pa.table({"id": pa.array(mix_ids, pa.string()), "image_sha256": pa.array(mix_sha, pa.string())})


def fit_embedder(cfg: TrainConfig, pages: CorpusPages):
    n_in = len(INPUT_FEATURES)
    if cfg.embedding == "layout":
        emb = LayoutEmbedder().fit(pages.thumbs, cfg.dim)
        return emb, emb.transform(pages.thumbs)
    if cfg.embedding == "features":
        emb = FeatureEmbedder().fit(pages.features[:, :n_in], pages.texts)
        return emb, emb.transform(pages.features[:, :n_in], pages.texts)
    v = pages.vision
    return None, v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def modes_from_errors(path: str | None) -> list[dict]:
    """The failure modes of an errors report, or the weak labels as modes when there is none."""
    if path and not Path(path).exists():
        log.warning("train: no errors report at %s; training the weak labels as modes", path)
    elif path:
        try:
            report = json.loads(Path(path).read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{path} is not JSON: {exc}") from None
        modes = report.get("failure_modes") if isinstance(report, dict) else None
        if not isinstance(report, dict) or not isinstance(modes or [], list) or \
                not all(isinstance(m, dict) and isinstance(m.get("name"), str) for m in modes or []):
            raise InputError(f"{path}: failure_modes must be a list of objects with a name "
                             "(python -m model.errors writes it)")
        if modes:
            # failing_ids (model.errors: every failing page of the mode, up to its bound) with the example ids
            # (all a report had before it, or all a hand-written one may name), each id once, in report order
            return [{"name": m["name"], "test_type": m.get("test_type", ""), "domain": m.get("domain", ""),
                     "failing_ids": list(dict.fromkeys([*(m.get("example_ids") or []),
                                                        *(m.get("failing_ids") or [])]))}
                    for m in modes]
        log.warning("train: %s names no failure modes; training the weak labels as modes", path)
    return [{"name": f"weak:{w}", "test_type": "", "domain": "", "weak": w, "failing_ids": []} for w in WEAK_LABELS]


def mode_targets(mode: dict, pages: CorpusPages) -> tuple[np.ndarray, str]:
    """(bool target per page, the rule in words) for one mode."""
    label_idx = {n: len(INPUT_FEATURES) + i for i, n in enumerate(LABEL_FEATURES)}
    failing = set(mode["failing_ids"])
    y = np.array([i in failing for i in pages.ids])
    weak = mode.get("weak") or TYPE_WEAK_LABELS.get(mode["test_type"])
    rules = [f"{len(failing & set(pages.ids))} failing pages"] if failing else []
    if weak or mode["domain"].startswith("historical"):
        for k, (fvec, dom) in enumerate(zip(pages.features, pages.domains)):
            fd = {n: float(fvec[j]) for n, j in label_idx.items()}
            fd["columns"] = float(fvec[INPUT_FEATURES.index("columns")])
            wl = weak_labels(fd, dom)
            if (weak and wl[weak]) or (mode["domain"].startswith("historical") and wl["historical"]):
                y[k] = True
        rules += [f"weak label {weak}"] if weak else []
        rules += ["historical domain"] if mode["domain"].startswith("historical") else []
    elif mode["domain"]:
        y |= np.array([d == mode["domain"] for d in pages.domains])
        rules.append(f"domain {mode['domain']}")
    return y, " + ".join(rules)


def make_model(kind: str, cfg: TrainConfig, n_pos: int, n_features: int = len(INPUT_FEATURES)):
    """A calibrated classifier over ``[handcrafted features | embedding]``. The linear one standardises only the
    handcrafted columns: the unit-norm embedding passes as it is, since standardising a direction the training
    pages barely vary along would blow up any page that does."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    cv = max(2, min(3, n_pos))
    if kind == "linear":
        scale = ColumnTransformer([("features", StandardScaler(), list(range(n_features)))], remainder="passthrough")
        base = make_pipeline(scale, LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000))
    else:
        base = HistGradientBoostingClassifier(max_iter=cfg.boosted_iter, learning_rate=0.1, random_state=cfg.seed,
                                              class_weight="balanced")
    return CalibratedClassifierCV(base, method="sigmoid", cv=cv)


def cross_validate(kind: str, cfg: TrainConfig, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import average_precision_score, precision_score, recall_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    n_pos, n_neg = int(y.sum()), int((~y).sum())
    folds = max(2, min(cfg.folds, n_pos, n_neg))
    skf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=cfg.seed)
    fewest = n_pos - -(-n_pos // folds)  # positives in the smallest training fold (the largest test fold left out)
    proba = cross_val_predict(make_model(kind, cfg, fewest), x, y, cv=skf, method="predict_proba")[:, 1]
    pred = proba >= 0.5
    return {"folds": folds, "precision": float(precision_score(y, pred, zero_division=0)),
            "recall": float(recall_score(y, pred, zero_division=0)),
            "average_precision": float(average_precision_score(y, proba))}


def fit_head(x_emb: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """A linear model on the embedding alone: its weight vector is the index query for this mode."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=10.0, class_weight="balanced", max_iter=2000, random_state=seed).fit(x_emb, y)
    return lr.coef_[0].astype(np.float32), float(lr.intercept_[0])


def train(cfg: TrainConfig) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # OMP_NUM_THREADS=1: on a busy 2-core box OpenMP threads only contend
        return _train(cfg)


def _train(cfg: TrainConfig) -> dict[str, Any]:
    from model.records import shard_files

    t0 = time.perf_counter()
    modes = modes_from_errors(cfg.errors)
    shard_files(cfg.corpus)  # inputs checked before the output folder is made
    shard_files(cfg.mix_corpus)
    pages = read_corpus(cfg, {i for m in modes for i in m["failing_ids"]})
    mix = training_mix(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(mix, out / "training_mix.parquet")
    embedder, emb = fit_embedder(cfg, pages)
    if embedder is not None:
        embedder.save(out / "embedder.npz")
    x = np.hstack([pages.features[:, :len(INPUT_FEATURES)], emb])
    feature_names = list(INPUT_FEATURES) + [f"emb_{i}" for i in range(emb.shape[1])]
    results = []
    for mode in modes:
        y, rule = mode_targets(mode, pages)
        slug = mode_slug(mode["name"])
        n_pos, n_neg = int(y.sum()), int((~y).sum())
        entry: dict[str, Any] = {"name": mode["name"], "folder": slug, "positives": n_pos, "negatives": n_neg,
                                 "rule": rule}
        if n_pos < cfg.min_positives or n_neg < cfg.min_positives:
            entry["skipped"] = f"{n_pos} positives / {n_neg} negatives < min_positives {cfg.min_positives}"
            log.warning("train: %s skipped: %s", mode["name"], entry["skipped"])
            results.append(entry)
            continue
        cv = {kind: cross_validate(kind, cfg, x, y) for kind in MODEL_KINDS}
        best = max(MODEL_KINDS, key=lambda k: (cv[k]["average_precision"], k == "linear"))
        model = make_model(best, cfg, n_pos).fit(x, y)
        folder = out / slug
        save_model(model, folder / "model.skops")
        w, b = fit_head(emb, y, cfg.seed)
        np.savez(folder / "head.npz", weight=w, bias=np.float32(b))
        pos = {i: k for k, i in enumerate(pages.ids)}
        seed_ids = [i for i in mode["failing_ids"] if i in pos]
        write_embeddings(folder / "seeds.parquet", seed_ids,
                         emb[[pos[i] for i in seed_ids]] if seed_ids else np.zeros((0, emb.shape[1]), np.float32))
        (folder / "training_ids.txt").write_text("".join(f"{i}\t{int(t)}\n" for i, t in zip(pages.ids, y)))
        card = {**entry, "mode": mode, "model": best, "cv": cv, "features": feature_names,
                "embedding": cfg.embedding, "seeds": len(seed_ids), "training_pages": len(pages.ids),
                "calibration": "sigmoid (CalibratedClassifierCV)", "config": asdict(cfg)}
        (folder / "card.json").write_text(json.dumps(card, indent=1))
        entry.update({"model": best, "cv": cv[best], "seeds": len(seed_ids)})
        results.append(entry)
        print(f"{mode['name']}: {n_pos} positives ({rule}); {best} kept; CV precision {cv[best]['precision']:.2f} "
              f"recall {cv[best]['recall']:.2f} AP {cv[best]['average_precision']:.2f} "
              f"(other: {cv[[k for k in MODEL_KINDS if k != best][0]]['average_precision']:.2f})", flush=True)
    manifest = {"embedding": cfg.embedding, "checkpoint": cfg.checkpoint, "dim": int(emb.shape[1]),
                "embedder": "embedder.npz" if embedder is not None else None, "input_features": list(INPUT_FEATURES),
                "all_features": list(ALL_FEATURES), "training_pages": len(pages.ids),
                "training_mix": {"corpus": cfg.mix_corpus, "pages": mix.num_rows}, "modes": results,
                "seconds": round(time.perf_counter() - t0, 1)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> None:
    from schemas.config import parse_sets

    ap = argparse.ArgumentParser(
        prog="python -m classifiers.train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train one calibrated classifier per failure mode of errors.json on the corpus's pages.",
        epilog="config keys (--set KEY=VALUE):\n  " + "\n  ".join(describe(TrainConfig)))
    ap.add_argument("--corpus")
    ap.add_argument("--errors")
    ap.add_argument("--failing-corpus", dest="failing_corpus")
    ap.add_argument("--training-corpus", dest="training_corpus")
    ap.add_argument("--out")
    ap.add_argument("--embedding")
    ap.add_argument("--checkpoint")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    given = {k: v for k in ("corpus", "errors", "failing_corpus", "training_corpus", "out", "embedding",
                            "checkpoint")
             if (v := getattr(args, k)) is not None}
    try:
        raw = parse_sets(args.set)  # (a bad --set: one line, exit 2)
        raw.update(given)
        cfg = load(TrainConfig, raw, "train")
        manifest = train(cfg)
    except (ConfigError, FileNotFoundError, InputError) as exc:  # a bad key, a missing or unusable input
        print(f"classifiers.train: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{sum('skipped' not in m for m in manifest['modes'])} classifiers -> {cfg.out}")


if __name__ == "__main__":
    main()
