"""Per-page extraction, the stage logic the Beam job wraps: a corpus row -> a feature row, streamed by shard.

A feature row holds what retrieval needs of a page without its image: ``id``, ``source``, ``domain``,
``split``, ``image_sha256``, ``features`` (``ALL_FEATURES``: image, text-layer and label features),
``thumb`` (the layout thumbnail of ``classifiers.embed``), ``text_layer``. One decode per page
(straight to a grey page ``WORK_WIDTH`` px wide) feeds the features and the thumbnail. A page whose image
cannot be decoded becomes a dead-letter dict ``{id, reason, message}`` instead; every input is one or
the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from classifiers.embed import THUMB_SHAPE, layout_thumbnail
from classifiers.features import (
    INPUT_FEATURES,
    LABEL_FEATURES,
    decode_grey,
    image_features,
    label_features,
    text_layer_features,
)

ALL_FEATURES: tuple[str, ...] = INPUT_FEATURES + LABEL_FEATURES
# task, response_format, metadata: whether the label is one formula (``features.formula_label``)
READ_COLUMNS = ["id", "source", "domain", "split", "image", "image_sha256", "response", "text_layer", "task",
                "response_format", "metadata"]
FEATURE_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("domain", pa.string()), ("split", pa.string()),
    ("image_sha256", pa.string()),
    ("features", pa.list_(pa.float32(), len(ALL_FEATURES))),
    ("thumb", pa.list_(pa.float32(), THUMB_SHAPE[0] * THUMB_SHAPE[1])),
    ("text_layer", pa.string()),
])


def extract_row(row: dict[str, Any]) -> dict[str, Any]:
    """A corpus row (``READ_COLUMNS``) -> a feature row; raises ``ValueError`` on an undecodable image."""
    image = row.get("image")
    if isinstance(image, dict):
        image = image.get("bytes")
    if image is None or len(image) == 0:
        raise ValueError("record has no image bytes")
    grey, colour, shape = decode_grey(image)
    f = image_features(grey, colour, shape)
    f.update(text_layer_features(row.get("text_layer")))
    f.update(label_features(row.get("response"), row.get("task"), row.get("response_format"), row.get("metadata")))
    return {"id": row["id"], "source": row.get("source") or "", "domain": row.get("domain") or "",
            "split": row.get("split") or "train", "image_sha256": row.get("image_sha256") or "",
            "features": np.array([f[n] for n in ALL_FEATURES], np.float32), "thumb": layout_thumbnail(grey),
            "text_layer": row.get("text_layer")}


def feature_table(rows: list[dict[str, Any]], schema: pa.Schema = FEATURE_SCHEMA) -> pa.Table:
    """Feature rows (``extract_row``'s dicts) as an Arrow table of ``schema``, the vectors column-wise from numpy
    (building the lists element by element was a tenth of the job's time)."""
    arrays = []
    for field in schema:
        if pa.types.is_string(field.type):
            arrays.append(pa.array([r[field.name] for r in rows], pa.string()))
            continue
        values = np.stack([np.asarray(r[field.name], np.float32) for r in rows]) if rows \
            else np.zeros((0, 0), np.float32)
        flat = pa.array(values.reshape(-1), pa.float32())
        if pa.types.is_fixed_size_list(field.type):
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
        else:
            offsets = pa.array(np.arange(len(rows) + 1, dtype=np.int32) * (values.shape[1] if rows else 0))
            arrays.append(pa.ListArray.from_arrays(offsets, flat))
    return pa.Table.from_arrays(arrays, schema=schema)


def iter_rows(path: str, batch_size: int = 64) -> Iterator[dict[str, Any]]:
    """The ``READ_COLUMNS`` of a page shard, a row group at a time (columns it lacks come back as None); the
    image is a zero-copy view of the row group's buffer (``memoryview``), never a Python bytes copy.

    Row group by row group (``read_row_group``), not ``ParquetFile.iter_batches``: with pyarrow 25,
    iter_batches held on to memory across row groups (reading the images of 240 vs 3,840 pages in 64-row
    groups: peak RSS 186 vs 688 MB; by row group 182 vs 224 MB), so the job's peak grew with the shard.
    Peak memory is bounded by the largest row group (the corpus writes ~64 MB ones)."""
    pf = pq.ParquetFile(path)
    cols = [c for c in READ_COLUMNS if c in pf.schema_arrow.names]
    rest = [c for c in cols if c != "image"]
    for g in range(pf.metadata.num_row_groups):
        table = pf.read_row_group(g, columns=cols, use_threads=False)
        for batch in table.to_batches(max_chunksize=batch_size):
            images = batch.column("image") if "image" in cols else None
            if images is not None and pa.types.is_struct(images.type):
                images = images.field("bytes")
            for i, row in enumerate(batch.select(rest).to_pylist()):
                buf = images[i].as_buffer() if images is not None and images[i].is_valid else None
                row["image"] = memoryview(buf) if buf is not None else None
                yield row
        del table


def extract_shard(path: str, out_path: str, batch_size: int = 256, vision: Any = None) -> dict[str, Any]:
    """Every page of shard ``path`` -> feature rows in ``out_path`` (written in row groups as it goes).

    ``vision``: a ``classifiers.embed.VisionEmbedder``; its pooled embedding goes in column ``vision``.
    Returns ``{input, out, dead: [{id, reason, message}], path}``: ``input == out + len(dead)``."""
    schema = FEATURE_SCHEMA.append(pa.field("vision", pa.list_(pa.float32()))) if vision is not None \
        else FEATURE_SCHEMA
    out_path = str(out_path)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path + ".tmp"
    n_in = n_out = 0
    dead: list[dict] = []
    buf: list[dict] = []
    with pq.ParquetWriter(tmp, schema) as writer:
        for row in iter_rows(path):
            n_in += 1
            try:
                out = extract_row(row)
                if vision is not None:
                    image = row["image"]["bytes"] if isinstance(row["image"], dict) else row["image"]
                    out["vision"] = vision.embed_images([bytes(image)])[0]
                buf.append(out)
            except Exception as exc:  # one bad page never stops the shard; it is accounted as dead
                dead.append({"id": str(row.get("id")), "reason": f"extract_{type(exc).__name__}",
                             "message": str(exc)[:300]})
                continue
            if len(buf) >= batch_size:
                writer.write_table(feature_table(buf, schema))
                n_out += len(buf)
                buf = []
        if buf:
            writer.write_table(feature_table(buf, schema))
            n_out += len(buf)
    Path(tmp).replace(out_path)
    return {"input": n_in, "out": n_out, "dead": dead, "path": out_path}


def read_feature_rows(paths: list[str], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """Feature shards a row group at a time."""
    for p in paths:
        pf = pq.ParquetFile(p)
        for rg in range(pf.metadata.num_row_groups):
            yield pf.read_row_group(rg, columns=columns)


def matrix(table: pa.Table, column: str) -> np.ndarray:
    """A list column (fixed or equal-length lists) as a float32 matrix."""
    col = table.column(column).combine_chunks()
    values = col.values.to_numpy(zero_copy_only=False).astype(np.float32)
    return values.reshape(len(table), -1) if len(table) else values.reshape(0, 0)
