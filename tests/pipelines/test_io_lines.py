"""``pipelines.io.iter_lines``: linear in a line's length, and a cap that skips an over-long line."""

from __future__ import annotations

import io as _io

from pipelines import io


def test_a_long_line_is_joined_once_not_once_per_chunk(monkeypatch):
    """A line of n chunks used to be rebuilt (``rest + data``) per chunk: n^2/2 chunk copies. Counted, not
    timed: the bytes scanned (``split``) and copied by ``+`` on what the stream returned stay linear."""
    scanned = 0
    real_split = bytes.split

    class Chunk(bytes):
        def split(self, *args):  # what iter_lines scans for newlines
            nonlocal scanned
            scanned += len(self)
            return real_split(self, *args)

        def __radd__(self, other):  # rest + data: the unfinished line copied with the new chunk
            nonlocal scanned
            scanned += len(other) + len(self)
            return Chunk(bytes(other) + bytes(self))

    class Stream:
        def __init__(self, total: int, chunk: int):
            self.left, self.chunk = total, chunk

        def read(self, n: int) -> bytes:
            take = min(n, self.left)
            self.left -= take
            return Chunk(b"x" * take)

    lines = list(io.iter_lines(Stream(200 * 1024, 1024), 1024))
    assert lines == [b"x" * 200 * 1024]
    assert scanned <= 2 * 200 * 1024  # the old code scanned ~100 x that (every chunk re-split the whole line)


def test_lines_match_split_at_every_chunk_size():
    data = b"a\n\nbb\nccc\n" + b"d" * 50 + b"\ne"
    for chunk in range(1, 12):
        expected = [line + b"\n" for line in data.split(b"\n")[:-1]] + [b"e"]
        assert list(io.iter_lines(_io.BytesIO(data), chunk)) == expected


def test_a_line_over_max_line_is_skipped_and_reading_goes_on():
    data = b"ok\n" + b"y" * 100 + b"\nafter\n" + b"z" * 40
    for chunk in (1, 7, 64, 1000):
        got = list(io.iter_lines(_io.BytesIO(data), chunk, max_line=30))
        assert got[0] == b"ok\n" and got[2] == b"after\n"
        assert isinstance(got[1], io.LineTooLong) and got[1].size == 100
        assert isinstance(got[3], io.LineTooLong) and got[3].size == 40
