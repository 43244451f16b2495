"""Corpus shards as plain rows: where the Parquet files are, which split a row trains in, streaming them.

``iter_records`` streams PageRecord rows from Parquet shards with pyarrow, batch by batch (the
corpus is never held in memory), and assigns the held-out split: a "train" row becomes "eval" when
a hash of its id falls under ``eval_fraction`` (``assigned_split``), so every run, worker and shard
layout agrees on it. Local folders, single files, globs and ``gs://``/``s3://``/``hf://`` URIs (through
the pipelines' URI layer) all work. The command lines that read a corpus's eval split (``model.eval``,
``model.speculate``, ``model.mtp --bench``) hold out train rows only when the corpus has no rows written as
"eval" (``cli_eval_fraction``), unless ``--eval-fraction`` says otherwise.
"""

from __future__ import annotations

import glob
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from schemas.config import bounded_arg

SPLIT_SALT = "pagemill:eval-split"
# What a Sample needs; the sampler reads only these columns (provenance, text layer etc. stay on disk).
RECORD_COLUMNS = ("id", "source", "domain", "language", "task", "image", "instruction", "response",
                  "unit_tests", "split", "metadata")
INDEX_COLUMNS = ["id", "domain", "source", "split"]


def assigned_split(record_id: str, split: str, eval_fraction: float) -> str:
    """The split a row trains in: "train" rows whose id hashes under ``eval_fraction`` become "eval"."""
    if split != "train":
        return split
    digest = hashlib.sha256(f"{SPLIT_SALT}\x1f{record_id}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction else "train"


# The command lines' hold-out on a corpus that has only "train" rows (DataConfig.eval_fraction's default).
HOLDOUT_FRACTION = 0.1


def has_eval_rows(path: str | Path) -> bool:
    """Whether any row of the corpus was written with split "eval" (reads only the ``split`` column)."""
    import pyarrow.compute as pc

    for uri in shard_files(path):
        pf = open_parquet(uri)
        if "split" not in pf.schema_arrow.names:
            continue
        for g in range(pf.metadata.num_row_groups):
            column = pf.read_row_group(g, columns=["split"], use_threads=False).column("split")
            if pc.any(pc.equal(column, "eval")).as_py():
                return True
    return False


def cli_eval_fraction(path: str | Path, given: float | None = None) -> float:
    """The ``eval_fraction`` a command line (``model.eval``, ``model.speculate``, ``model.mtp``) reads ``path``
    with: ``given`` when set; else 0 when the corpus has its own eval split (rows written as "eval": its
    train rows stay train), and `HOLDOUT_FRACTION` of the train rows when it has only train."""
    if given is not None:
        if not 0.0 <= given <= 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1], got {given}")
        return given
    return 0.0 if has_eval_rows(path) else HOLDOUT_FRACTION


EVAL_FRACTION_HELP = ("share of the corpus's 'train' rows held out as eval by id hash (default: 0 when the corpus "
                      "has rows written as split 'eval', else 0.1; pass a make train run's eval_fraction to read "
                      "the eval pages it did)")


fraction_arg = bounded_arg(float, 0.0, 1.0, "a number in [0, 1]")  # argparse type of --eval-fraction


def shard_files(path: str | Path) -> list[str]:
    """Parquet files of a corpus folder (``data/*.parquet``), a single file, or a glob; sorted."""
    path = str(path)
    if "://" in path:  # gs://, s3://, hf://: the pipelines' URI layer (imports Beam, so only here)
        from pipelines import io

        pattern = path if path.endswith(".parquet") or any(c in path for c in "*?[") \
            else io.join(path, "data/*.parquet")
        found = io.match(pattern)
    elif Path(path).is_dir():
        found = sorted(glob.glob(str(Path(path) / "data" / "*.parquet"))) or \
            sorted(glob.glob(str(Path(path) / "*.parquet")))
    elif Path(path).is_file():
        found = [path]
    else:
        found = sorted(p for p in glob.glob(path, recursive=True) if Path(p).is_file())
    if not found:
        raise FileNotFoundError(f"data: no parquet shards at {path!r}")
    return found


def open_parquet(uri: str) -> pq.ParquetFile:
    if "://" in uri:
        from pipelines import io

        return pq.ParquetFile(io.open_read(uri))
    return pq.ParquetFile(uri)


def plain_row(row: dict[str, Any]) -> dict[str, Any]:
    """Arrow row -> plain dict with the image as bytes (the HF Image struct is {bytes, path})."""
    image = row.get("image")
    if isinstance(image, dict):
        row["image"] = image.get("bytes")
    return row


def _batches(pf: pq.ParquetFile, columns: list[str] | None, batch_size: int) -> Iterator:
    """Record batches of ``pf``, a row group at a time (``read_row_group``), not ``ParquetFile.iter_batches``:
    with pyarrow 25, iter_batches held on to memory across row groups, so a reader's peak RSS grew with the
    shard (images of 250 / 500 / 1,000 / 2,000 pages: 230 / 325 / 399 / 646 MB; by row group it stays at the
    largest row group's size, and the corpus writes ~64 MB ones)."""
    for g in range(pf.metadata.num_row_groups):
        table = pf.read_row_group(g, columns=columns, use_threads=False)
        yield from table.to_batches(max_chunksize=batch_size)
        del table


def iter_records(path: str | Path, split: str | None = None, columns: Iterable[str] | None = None,
                 eval_fraction: float = 0.1, batch_size: int = 32) -> Iterator[dict]:
    """Rows of the corpus in file order, streamed ``batch_size`` rows at a time.

    ``split``: keep only rows whose ``assigned_split`` is this (None: all rows). Each dict's
    ``split`` is the assigned one. ``columns``: the keys to yield (None: every column).
    """
    wanted = list(columns) if columns is not None else None
    for uri in shard_files(path):
        pf = open_parquet(uri)
        names = pf.schema_arrow.names
        read = None if wanted is None else [c for c in names if c in set(wanted) | {"id", "split"}]
        for batch in _batches(pf, read, batch_size):
            for row in batch.to_pylist():
                row["split"] = assigned_split(row["id"], row.get("split") or "train", eval_fraction)
                if split is not None and row["split"] != split:
                    continue
                row = plain_row(row)
                yield row if wanted is None else {k: row[k] for k in wanted if k in row}


PREFERENCE_COLUMNS = ("id", "source", "image", "instruction", "response", "rejected", "chosen_score",
                      "rejected_score", "task", "split")


def iter_preference_pairs(path: str | Path, split: str | None = None, eval_fraction: float = 0.1,
                          batch_size: int = 32) -> Iterator[dict]:
    """DPO-style pairs from the corpus: rows of task ``preference`` (made by relabel's preference stage) as
    ``{id, source, image, prompt, chosen, rejected, chosen_score, rejected_score, split}``, streamed like
    ``iter_records``. Shards written before the preference fields existed yield nothing."""
    for row in iter_records(path, split, PREFERENCE_COLUMNS, eval_fraction, batch_size):
        if row.get("task") != "preference" or not row.get("rejected"):
            continue
        yield {"id": row["id"], "source": row["source"], "image": row["image"], "prompt": row["instruction"],
               "chosen": row["response"], "rejected": row["rejected"], "chosen_score": row.get("chosen_score"),
               "rejected_score": row.get("rejected_score"), "split": row["split"]}


def uniform_sample(items: Iterable[Any], k: int, seed: int) -> list[Any]:
    """``k`` of ``items`` drawn uniformly at random (seeded reservoir sampling: one pass, ``k`` held),
    in their input order; all of them when there are at most ``k``."""
    import random

    rng = random.Random(seed)
    kept: list[tuple[int, Any]] = []
    for n, item in enumerate(items):
        if n < k:
            kept.append((n, item))
        else:
            j = rng.randint(0, n)
            if j < k:
                kept[j] = (n, item)
    return [item for _, item in sorted(kept, key=lambda pair: pair[0])]
