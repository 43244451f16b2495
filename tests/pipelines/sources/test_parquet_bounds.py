"""Parquet readers stay bounded however far a file's cells inflate (a zstd file of zero cells).

A row group is read only when its footer sizes are under the cap, in batches, and an embedded binary cell over
the per-cell cap is dead-lettered, never handed out (``pipelines.sources.parquet_rows``)."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.sources import parquet_rows
from pipelines.sources.base import SourceSettings
from pipelines.sources.historical import MappedHistoricalSource
from pipelines.sources.olmocr_mix import OlmOcrMixSource
from tests.pipelines.sources.test_olmocr_mix_hostile import mix_rows, outcomes, read_all, write_mix

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("image", pa.binary())])


def _write(path, cells: list[bytes], per_group: int = 1) -> str:
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        for start in range(0, len(cells), per_group):
            part = cells[start:start + per_group]
            writer.write_table(pa.table({"id": [f"r{start + i}" for i in range(len(part))],
                                         "text": ["hello"] * len(part), "image": part}, schema=SCHEMA))
    return str(path)


def _historical(path: str, **options):
    return MappedHistoricalSource(SourceSettings(name="h", kind="historical", paths=(path,), instruction="t", options={
        "columns": {"id": "id", "text": "text", "image_bytes": "image"}, **options}))


def test_an_oversized_cell_is_payload_too_large_and_never_copied(tmp_path):
    path = _write(tmp_path / "b.parquet", [b"\x89PNG" + b"\0" * 5000, b"\x89PNG" + b"\0" * 10, b"\0" * 1001])
    rows = list(_historical(path, max_bytes=1000).read(path))  # embedded bytes are capped as fetched ones
    assert [r.source_id for r in rows] == ["r0", "r1", "r2"]
    assert rows[0].error.reason == "payload_too_large" and "5004 bytes" in str(rows[0].error)
    assert rows[2].error.reason == "payload_too_large"
    assert rows[1].error is None and len(rows[1].pages[0].payload) == 14


def test_an_oversized_row_group_is_never_read_and_each_row_is_lettered(tmp_path, monkeypatch):
    asked: list = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        asked.append(kwargs.get("row_groups"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    monkeypatch.setattr(parquet_rows, "MAX_ROW_GROUP_BYTES", 100_000, raising=False)
    # row group 0: 3 rows of 50 KB zeros (150 KB inflated, a few hundred bytes on disk); group 1: small
    path = _write(tmp_path / "g.parquet", [bytes([i]) * 50_000 for i in range(3)] + [b"\x89PNG ok"], per_group=3)
    rows = list(_historical(path).read(path))
    assert len(rows) == 4  # one outcome per row, the manifest balanced
    reasons = Counter(r.error.reason if r.error else "ok" for r in rows)
    assert reasons == {"row_group_too_large": 3, "ok": 1}
    assert [r.source_id for r in rows[:3]] == [f"{path}#{i}" for i in range(3)]  # named by their place
    assert rows[3].source_id == "r3"
    assert asked == [[1]]  # pyarrow never asked for the oversized group


def batch_sizes(monkeypatch) -> list[int]:
    """The batch sizes ``stream_rows`` asks pyarrow for, as it asks."""
    sizes: list[int] = []
    real = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        sizes.append(kwargs["batch_size"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    return sizes


def test_a_row_group_is_read_in_batches_bounded_by_bytes(tmp_path, monkeypatch):
    sizes = batch_sizes(monkeypatch)
    path = _write(tmp_path / "m.parquet", [bytes([i]) * 10_000 for i in range(8)], per_group=8)
    rows = list(parquet_rows.stream_rows(path, None, lambda s: "", 64, max_batch_bytes=20_000))
    assert len(rows) == 8 and sizes and max(sizes) <= 2


@pytest.mark.parametrize("value", [b"\7" * 100_000, os.urandom(100_000)], ids=["compressible", "random"])
def test_a_dictionary_encoded_cell_repeated_on_every_row_is_read_a_row_at_a_time(tmp_path, monkeypatch, value):
    """One 100 KB value on 50 rows is ~100 KB in the footer but 5 MB decoded: batches count it whole, whether
    the value compresses or not (a random one slipped past a compression-ratio rule)."""
    sizes = batch_sizes(monkeypatch)
    path = _write(tmp_path / "d.parquet", [value] * 50, per_group=50)
    rows = list(parquet_rows.stream_rows(path, None, lambda s: "", 64, max_batch_bytes=150_000))
    assert len(rows) == 50 and sizes == [1]


def test_distinct_values_are_read_in_batches_by_their_mean_size(tmp_path):
    """pyarrow writes a dictionary page for every column, also one of distinct values that fell back to plain
    pages: counting such a column whole read real files a row at a time."""
    path = _write(tmp_path / "d.parquet", [os.urandom(10_000) for _ in range(2000)], per_group=2000)  # 20 MB
    texts = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [f"text {i} " * 50 for i in range(2000)]}), texts)
    for file in (path, texts):
        parquet = pq.ParquetFile(file)
        assert parquet_rows.batch_rows(parquet, 0, None, 64, 64 << 20) == 64


def test_olmocr_mix_row_group_over_the_cap_is_lettered_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr("pipelines.sources.olmocr_mix.MAX_ROW_GROUP_BYTES", 10_000)
    read_groups: list = []
    real = pq.ParquetFile.read_row_group

    def spy(self, i, *args, **kwargs):
        read_groups.append(i)
        return real(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    rows = mix_rows(3, natural_text=["x" * 50_000, "y" * 50_000, "z" * 50_000])
    uri = write_mix(tmp_path, rows)
    src = OlmOcrMixSource(SourceSettings(name="m", kind="olmocr_mix", paths=(uri,)))
    got = outcomes(read_all(src, uri))
    assert sorted(got.values()) == ["row_group_too_large"] * 3, got
    assert len(got) == 3


@pytest.mark.parametrize("link", ["file", "folder"])
def test_olmocr_mix_tarball_symlinked_outside_the_root_is_unsafe_path(tmp_path, monkeypatch, link):
    outside = tmp_path / "outside"
    root = tmp_path / "dataset"
    rows = mix_rows(1)
    write_mix(outside, rows)  # outside/pdf_tarballs/<TAR>: a real tarball holding doc0.pdf
    (root / "pdf_tarballs").mkdir(parents=True)
    tar = "x_train_00000.tar.gz"
    if link == "file":
        (root / "pdf_tarballs" / tar).symlink_to(outside / "pdf_tarballs" / tar)
    else:
        (root / "linked").symlink_to(outside / "pdf_tarballs")
        rows[0]["pdf_relpath"] = f"linked/{tar}:doc0.pdf"
    uri = str(root / "x_train.parquet")
    pq.write_table(pa.Table.from_pylist(rows), uri)
    opened: list[str] = []
    from pipelines import io as pio
    real = pio.open_read

    def spy(u, *a, **k):
        opened.append(str(u))
        return real(u, *a, **k)

    monkeypatch.setattr(pio, "open_read", spy)
    src = OlmOcrMixSource(SourceSettings(name="m", kind="olmocr_mix", paths=(uri,)))
    got = outcomes(read_all(src, uri))
    assert got == {"doc0": "unsafe_path"}
    assert not [u for u in opened if u.endswith(".tar.gz")]  # the tarball was never opened
    assert src.unit_digest(next(iter(src.plan(uri))))  # the digest routes it the same way, without reading it
