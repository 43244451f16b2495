"""FinePDFs reader: the ``max_pdf_bytes`` cap on a WARC record's payload (a gzip member can inflate to GBs)."""

from __future__ import annotations

import io
import pathlib
import zlib

import pytest

from pipelines.sources.base import Row
from pipelines.sources.finepdfs import DEFAULT_MAX_PDF_BYTES, FinePdfsSource, _read_one_record
from samples.make.pdfs import text_pdf
from schemas.config import ConfigError
from schemas.deadletter import RecordError
from tests.pipelines.sources.test_finepdfs import _craft as craft
from tests.pipelines.sources.test_finepdfs import _settings


def _craft(tmp_path: pathlib.Path, payloads: list[tuple[bytes, list[str]]], **options) -> list[Row]:
    """One WARC record and one parquet row per (payload, page labels), read with ``options``."""
    return craft(tmp_path, [(payload, labels, {}) for payload, labels in payloads], **options)


def test_default_cap_matches_the_tarball_member_cap() -> None:
    from pipelines.sources.olmocr_mix import MAX_MEMBER_BYTES

    assert DEFAULT_MAX_PDF_BYTES == MAX_MEMBER_BYTES
    assert FinePdfsSource.Options(warc_root="/x").max_pdf_bytes == DEFAULT_MAX_PDF_BYTES


def test_pdf_over_max_pdf_bytes_is_dead_lettered_and_the_run_goes_on(tmp_path: pathlib.Path) -> None:
    good = text_pdf([["Page one."], ["Page two."]])
    # A "PDF" that inflates far past the cap: the WARC file is gzip, so it is small on disk.
    bomb = b"%PDF-1.4\n" + b"\0" * (4 << 20)
    limit = len(good)
    rows = _craft(tmp_path, [(good, ["Page one.", "Page two."]), (bomb, ["x"]), (good, ["Page one.", "Page two."])],
                  max_pdf_bytes=limit)
    assert [r.error.reason if r.error else None for r in rows] == [None, "pdf_too_large", None]
    err = rows[1].error
    assert isinstance(err, RecordError)
    assert rows[1].source_id in str(err) and f"max_pdf_bytes={limit}" in str(err)
    # a PDF of exactly the cap is read whole
    assert [p.response for p in rows[0].pages] == ["Page one.", "Page two."]
    assert rows[0].pages[0].payload == good


def test_one_byte_over_the_cap_is_too_large(tmp_path: pathlib.Path) -> None:
    good = text_pdf([["Only page."]])
    rows = _craft(tmp_path, [(good, ["Only page."])], max_pdf_bytes=len(good) - 1)
    assert rows[0].error is not None and rows[0].error.reason == "pdf_too_large"


@pytest.mark.parametrize("bad", [0, -1])
def test_max_pdf_bytes_must_be_positive(tmp_path: pathlib.Path, bad: int) -> None:
    with pytest.raises((ValueError, ConfigError), match="max_pdf_bytes"):
        FinePdfsSource(_settings(tmp_path, max_pdf_bytes=bad))


class _EndlessGzipRecord(io.RawIOBase):
    """One gzip member holding a WARC response record that declares 64 GiB of payload and inflates
    without end: serves at most ``budget`` inflated bytes and then fails the test (so a reader that
    ignores the cap fails here instead of eating the machine's memory)."""

    def __init__(self, budget: int, endless_header: bool = False):
        self.budget, self.served = budget, 0
        payload_len = 64 << 30
        http = b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nContent-Length: %d\r\n\r\n" % payload_len
        head = (b"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000001>"
                b"\r\nWARC-Date: 2024-02-23T01:23:45Z\r\nWARC-Target-URI: https://example.com/bomb.pdf\r\n"
                b"Content-Type: application/http; msgtype=response\r\nContent-Length: %d\r\n\r\n"
                % (len(http) + payload_len))
        self._z = zlib.compressobj(9, zlib.DEFLATED, 31)
        if endless_header:  # a header line that never ends: warcio reads header lines with readline()
            head, http, filler = b"WARC/1.0\r\nWARC-Type: response\r\nX-Long: ", b"", b"A"
        else:
            filler = b"\0"
        self._pending = self._z.compress(head + http + (b"" if endless_header else b"%PDF-1.4\n"))
        self._pending += self._z.flush(zlib.Z_SYNC_FLUSH)
        self._zeros = self._z.compress(filler * (1 << 20)) + self._z.flush(zlib.Z_SYNC_FLUSH)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if not self._pending:
            self.served += 1 << 20
            if self.served > self.budget:
                raise AssertionError(f"the reader inflated more than {self.budget} bytes of one record")
            self._pending = self._zeros
        n = min(len(buf), len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def test_reader_stops_inflating_at_the_cap() -> None:
    stream = _EndlessGzipRecord(budget=64 << 20)
    with pytest.raises(RecordError) as info:
        _read_one_record(io.BufferedReader(stream), "row r1: bomb.warc.gz at offset 0", max_bytes=1 << 20)
    assert info.value.reason == "pdf_too_large"
    assert "row r1" in str(info.value) and "max_pdf_bytes=1048576" in str(info.value)
    # the cap plus warcio's read-ahead (one 16 KiB compressed block: at most ~16 MiB inflated)
    assert stream.served <= (1 << 20) + (17 << 20)


def test_a_header_line_without_end_stops_at_the_cap() -> None:
    """The record's inflated bytes are capped (payload cap + 1 MiB of headers) before warcio reads its
    header lines, which it does with an unbounded readline: a 1 MB .warc.gz took 3.4 GB of memory."""
    stream = _EndlessGzipRecord(budget=64 << 20, endless_header=True)
    with pytest.raises(RecordError) as info:
        _read_one_record(io.BufferedReader(stream), "row r1: bomb.warc.gz at offset 0", max_bytes=1 << 20)
    assert info.value.reason == "warc_unreadable" and "row r1" in str(info.value)
    assert stream.served <= (2 << 20) + (17 << 20)


def test_the_reader_keeps_a_bounded_number_of_warc_files_open(tmp_path: pathlib.Path) -> None:
    """Rows point into many WARC files: one open handle each ran out of file descriptors (every row
    past the limit was warc_unreadable). The least recently used are closed, and reopened when needed."""
    from pipelines.sources import finepdfs
    from samples.make import finepdfs as sample

    OPEN_HANDLES = getattr(finepdfs, "OPEN_HANDLES", 16)

    pdf = text_pdf([["Hello page."]])
    where = []
    for i in range(OPEN_HANDLES + 8):
        rel = f"crawl-data/s/warc/f{i:03d}.warc.gz"
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(tmp_path / rel, "wb") as fh:
            offset, _ = sample.WarcBuilder(fh, seed=i).response(f"https://e.com/{i}.pdf", pdf)
        where.append((rel, offset))
    fetcher = finepdfs.WarcFetcher(str(tmp_path))
    for rel, offset in where + where[:3]:  # the first files again, after they were closed
        assert fetcher.fetch(rel, offset) == pdf
        assert len(fetcher._handles) <= OPEN_HANDLES
    fetcher.close()


def test_rows_of_an_oversized_row_group_are_each_their_own_letter(tmp_path: pathlib.Path, monkeypatch) -> None:
    """A row group over the cap is never read; each of its rows is a letter named by its position (reading
    the row's id raised outside the row's own error handling, which lost the rest of the file)."""
    from pipelines.sources import parquet_rows

    monkeypatch.setattr(parquet_rows, "MAX_ROW_GROUP_BYTES", 1)
    pdf = text_pdf([["Only page."]])
    rows = craft(tmp_path, [(pdf, ["Only page."], {}), (pdf, ["Only page."], {})])
    assert [r.error.reason if r.error else "ok" for r in rows] == ["row_group_too_large"] * 2
    assert [r.source_id.rsplit("#", 1)[-1] for r in rows] == ["0", "1"]
