"""URI-level file access for every stage: local paths, ``gs://``, ``s3://`` (Beam filesystems) and
``hf://`` (Hugging Face Hub, read only, through ``huggingface_hub.HfFileSystem``).

Everything that touches input or output goes through here, so a pipeline runs unchanged on a
laptop and on a cluster whose workers share no disk.
"""

from __future__ import annotations

import copy
import functools
import glob as _glob
import hashlib
import os
import stat
import time
from typing import IO, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from schemas.manifest import ManifestError, RunManifest


def _is_hf(uri: str) -> bool:
    return uri.startswith("hf://")


def _hf_fs():
    from huggingface_hub import HfFileSystem

    return HfFileSystem()


def _hf_match(pattern: str) -> list[str]:
    fs = _hf_fs()
    path = pattern[len("hf://"):]
    if any(c in path for c in "*?["):
        # fsspec's glob also returns the folders it matches; every other filesystem here matches
        # files only (a folder source would otherwise list its subfolders as files).
        found = [p for p, info in fs.glob(path, detail=True).items() if info["type"] == "file"]
    else:
        found = [path] if fs.exists(path) else []
    return sorted("hf://" + f for f in found)


_S3_OPTIONS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token", "s3_endpoint_url", "s3_disable_ssl",
               "s3_region_name", "s3_api_version", "s3_verify")
_s3_clients: dict[tuple, object] = {}


def _s3io():
    """Beam's ``S3IO`` over one boto3 client per process and set of S3 options.

    Beam's S3 filesystem builds a boto3 session and client for every call (~0.2 s of CPU: botocore
    parses the S3 service model each time), so each remote mirror image cost ~0.4 s of CPU (an
    ``exists`` and an ``open``). A boto3 client is thread-safe and reusable, but Beam's wrapper
    around it keeps one open download stream (object and position): shared by two open files, each
    switch would close and reopen it, and two threads would read from each other's stream. So every
    call gets a shallow copy: its own stream over the shared client. The options are the ones Beam
    gives its filesystems (the pipeline's, in the launcher and in every SDK worker).
    """
    from apache_beam.io.aws import s3io
    from apache_beam.io.aws.clients.s3 import boto3_client
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    options = FileSystems._pipeline_options or PipelineOptions([])  # what Beam's S3FileSystem is given
    key = tuple(getattr(options.view_as(S3Options), name) for name in _S3_OPTIONS)
    if key not in _s3_clients:
        _s3_clients[key] = boto3_client.Client(options=options)
    return s3io.S3IO(client=copy.copy(_s3_clients[key]))


def _is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def match(pattern: str) -> list[str]:
    """Sorted URIs matching a glob (or the URI itself when it exists, file or folder, and has no
    wildcard).

    ``synth://...`` names generated input (``pipelines/sources/synth.py``) and matches itself.
    """
    if pattern.startswith("synth://"):
        return [pattern]
    if _is_hf(pattern):
        return _hf_match(pattern)
    if "://" not in pattern:
        if any(c in pattern for c in "*?["):
            return sorted(p for p in _glob.glob(pattern, recursive=True) if os.path.isfile(p))
        return [pattern] if os.path.exists(pattern) else []
    # Beam's "**" is any characters, "/" included, so its "a/**/*.md" needs at least one folder
    # between; Python's recursive glob (local paths, above) lets "**/" match none. Same meaning:
    found = sorted(m.path for m in FileSystems.match([pattern.replace("/**/", "/**")])[0].metadata_list)
    if not found and not any(c in pattern for c in "*?["):
        # An object store has no folders: a folder URI exists when some key lies under it.
        if FileSystems.match([pattern.rstrip("/") + "/**"], limits=[1])[0].metadata_list:
            return [pattern.rstrip("/")]
    return found


class NoInput(ValueError):
    """A source whose paths match no input (``pipelines.corpus.source_inputs``): a config error, reported
    before any work."""


class NotARegularFile(OSError):
    """A local path that is a FIFO, socket, device or folder: never read (opening a FIFO blocks until a
    writer comes, a device may never end). ``kind`` names what it is."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is not a regular file (a {kind}): not read")
        self.path, self.kind = path, kind


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return kind
    return "special file"


def _open_local(path: str) -> IO[bytes]:
    """A local regular file opened for reading; ``NotARegularFile`` for anything else, without blocking: it
    is checked before opening, opened non-blocking and checked again (in case it was swapped meanwhile)."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        handle = os.fdopen(fd, "rb")
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return handle
        handle.close()
    raise NotARegularFile(path, _file_kind(mode))


def open_read(uri: str) -> IO[bytes]:
    """A seekable binary stream; never decompresses (a ``.tar.gz`` stays gzip bytes). A local path must be a
    regular file (``NotARegularFile``, an ``OSError``, otherwise)."""
    if _is_hf(uri):
        return _hf_fs().open(uri[len("hf://"):], "rb")
    if "://" not in uri:
        return _open_local(uri)
    if _is_s3(uri):
        return _s3io().open(uri, "rb")
    return FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED)


def open_write(uri: str) -> IO[bytes]:
    if "://" not in uri:
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        return open(uri, "wb")
    if _is_s3(uri):
        return _s3io().open(uri, "wb")
    return FileSystems.create(uri, compression_type=CompressionTypes.UNCOMPRESSED)


def join(base: str, *parts: str) -> str:
    if "://" not in base:
        return os.path.join(base, *parts)
    if _is_hf(base):  # Beam has no hf:// filesystem; joined as Beam joins s3:// paths
        for part in parts:
            base = base.rstrip("/") + "/" + part.lstrip("/")
        return base
    return FileSystems.join(base, *parts)


def exists(uri: str) -> bool:
    if "://" not in uri:
        return os.path.exists(uri)
    if _is_hf(uri):
        return _hf_fs().exists(uri[len("hf://"):])
    if _is_s3(uri):
        return _s3io().exists(uri)
    return FileSystems.exists(uri)


def rename(src: str, dst: str) -> None:
    """Atomic on local disks (``os.replace``); copy-then-delete on object stores (the copy replaces
    an existing ``dst``)."""
    if "://" not in src:
        os.replace(src, dst)
        return
    if _is_s3(src) and _is_s3(dst):
        _s3io().rename(src, dst)
        return
    FileSystems.rename([src], [dst])


def copy_file(src: str, dst: str) -> None:
    """Copy one file: ``shutil.copyfile`` on local disks; a server-side copy within ``gs://`` or
    ``s3://`` (Beam's filesystems, S3 through ``_s3io``); else streamed through this process."""
    if "://" not in src and "://" not in dst:
        import shutil

        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        shutil.copyfile(src, dst)
    elif _is_s3(src) and _is_s3(dst):
        _s3io().copy(src, dst)
    elif "://" in src and src.split("://")[0] == dst.split("://")[0] and not _is_hf(src):
        FileSystems.copy([src], [dst])
    else:
        with open_read(src) as fin, open_write(dst) as fout:
            for block in iter(lambda: fin.read(1 << 24), b""):
                fout.write(block)


def delete(uris: list[str]) -> None:
    """Delete files; missing ones are fine. Folders: ``delete_tree``."""
    local = [u for u in uris if "://" not in u]
    for u in local:
        if os.path.exists(u):
            os.remove(u)
    remote = [u for u in uris if "://" in u]
    if remote:
        FileSystems.delete(remote)


def delete_tree(uri: str) -> None:
    """Delete a folder and everything under it; a missing folder is fine.

    Object stores have no folders, only key prefixes: Beam's ``gs://``/``s3://`` filesystems delete
    a prefix recursively only when the path ends in ``/`` (without it they delete the one key of
    that name, which does not exist, and report success).
    """
    if "://" not in uri:
        import shutil

        shutil.rmtree(uri, ignore_errors=True)
        return
    prefix = uri.rstrip("/") + "/"
    if FileSystems.match([prefix + "**"], limits=[1])[0].metadata_list:
        FileSystems.delete([prefix])


def read_bytes(uri: str) -> bytes:
    with open_read(uri) as fh:
        return fh.read()


def read_run_manifest(folder: str) -> RunManifest:
    """``<folder>/manifest.json`` as a ``RunManifest``; ``ManifestError`` (a ValueError) naming the file when
    it is missing (not a corpus run's output, or its run has not finished) or is not one."""
    path = join(folder, "manifest.json")
    if not exists(path):
        raise ManifestError(f"no run manifest at {path}: not a corpus run's output folder, or its run has not "
                            f"finished (make corpus writes out/corpus)")
    return RunManifest.from_json(read_bytes(path), where=path)


def write_bytes_atomic(uri: str, data: bytes) -> None:
    tmp = uri + ".tmp"
    with open_write(tmp) as fh:
        fh.write(data)
    rename(tmp, uri)


def content_id(uri: str) -> str:
    """What a file holds, as an id (incremental refresh, ``pipelines/refresh.py``): sha256 of a local
    file's bytes; for an object store its own content id, without downloading (Hub: the LFS sha256 or
    blob id; others: size and mtime); ``missing`` when there is no such file (the reader reports it).

    Cached per process: a local file's id under its path, size, modification and change times and
    inode, so a file written since is hashed again; a store's until ``content_id.cache_clear()``, which
    each run's planning does (``refresh.describing``): a long-lived process (a Dask worker, a launcher
    that runs twice) never describes a run's inputs by what an earlier run saw."""
    if "://" not in uri:
        try:
            found = os.stat(uri)
        except OSError:
            return "missing"
        return _content_id(uri, (found.st_size, found.st_mtime_ns, found.st_ctime_ns, found.st_ino))
    return _content_id(uri, None)


@functools.lru_cache(maxsize=4096)
def _content_id(uri: str, _stamp: tuple | None) -> str:
    try:
        return _digest(uri)
    except NotARegularFile as exc:  # never opened; the reader refuses it
        return f"not a regular file: {exc.kind}"
    except (FileNotFoundError, IndexError, OSError):
        return "missing"


content_id.cache_clear = _content_id.cache_clear  # type: ignore[attr-defined]


def sha256(uri: str) -> str:
    """sha256 of a file's bytes, read through in blocks (a store's file is downloaded); not cached."""
    digest = hashlib.sha256()
    with open_read(uri) as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(uri: str) -> str:
    if "://" not in uri:
        return sha256(uri)
    if uri.startswith("hf://"):
        info = _hf_fs().info(uri[len("hf://"):])
        lfs = info.get("lfs") or {}
        return str(lfs.get("sha256") or info.get("blob_id") or info.get("size"))
    meta = FileSystems.match([uri])[0].metadata_list[0]
    return f"{meta.size_in_bytes}:{meta.last_updated_in_seconds}"


class LineTooLong:
    """What ``iter_lines`` yields, in the line's place, for a line over its ``max_line`` bytes: the line was
    skipped, never held whole. ``size``: its length in bytes (without the ``\\n``)."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = size

    def __repr__(self) -> str:
        return f"LineTooLong({self.size})"


def iter_lines(handle: IO[bytes], chunk: int = 1 << 20, max_line: int | None = None) -> Iterator[bytes | LineTooLong]:
    """The lines of a binary stream (each with its ``\\n``), read in chunks: every backend's stream has
    ``read``, not all iterate by line. Linear in the stream's length however long a line is (an unfinished
    line is kept as a list of chunks, only the new chunk is searched). With ``max_line``, a line longer than
    that many bytes is not kept: a ``LineTooLong`` is yielded in its place and reading goes on after it."""
    pending: list[bytes] = []  # the unfinished line's pieces
    size = 0  # its length so far
    overlong = False  # over max_line: its pieces are dropped, only counted

    def finish(last: bytes, newline: bytes) -> bytes | LineTooLong:
        total = size + len(last)
        if overlong or (max_line is not None and total > max_line):
            return LineTooLong(total)
        return b"".join([*pending, last, newline]) if pending else last + newline

    while True:
        data = handle.read(chunk)
        if not data:
            break
        pieces = data.split(b"\n")
        if len(pieces) > 1:
            yield finish(pieces[0], b"\n")
            pending, size, overlong = [], 0, False
            for line in pieces[1:-1]:
                yield LineTooLong(len(line)) if max_line is not None and len(line) > max_line else line + b"\n"
        rest = pieces[-1]
        if rest:
            size += len(rest)
            if not overlong:
                if max_line is not None and size > max_line:
                    pending, overlong = [], True
                else:
                    pending.append(rest)
    if overlong:
        yield LineTooLong(size)
    elif pending:
        yield b"".join(pending)


def read_before(stream: IO[bytes], limit: int, deadline: float | None = None, chunk: int = 1 << 16) -> bytes:
    """At most ``limit + 1`` bytes of ``stream`` (more than ``limit`` tells the caller it is too large: a
    gzip bomb never inflates past the cap in memory), read as they arrive (``read1`` where the stream has it:
    a server dripping bytes cannot fill a whole ``read(n)`` slowly). With ``deadline``, ``TimeoutError`` once
    ``time.monotonic()`` passes it: a per-read socket timeout alone bounds each wait, not the whole response
    (an HTTP response's socket waits are also cut to the time left). Used by the image resolver and for a
    FinePDFs record's payload (no deadline there: its record stream checks one)."""
    read = getattr(stream, "read1", None) or stream.read
    sock = getattr(getattr(getattr(stream, "fp", None), "raw", None), "_sock", None)  # http.client's socket
    chunks, total = [], 0
    while total <= limit:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"response not complete by its deadline ({total} bytes read)")
            if sock is not None and hasattr(sock, "settimeout"):
                try:
                    sock.settimeout(left)
                except OSError:
                    pass
        data = read(min(chunk, limit + 1 - total))
        if not data:
            break
        chunks.append(data)
        total += len(data)
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"response not complete by its deadline ({total} bytes read)")
    return b"".join(chunks)
