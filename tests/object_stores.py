"""Object-store servers on 127.0.0.1 for tests and benchmarks: S3 (moto) and GCS (gcp-storage-emulator).

No real object store can be reached here, so each server is a fake of one store's HTTP API, run in
its own process (in the caller's it would share the GIL with an in-process pipeline and slow every
request). Everything between a pipeline and the server is real: Beam's S3 and GCS filesystems,
boto3 and google-cloud-storage, over HTTP. ``s3_server`` and ``gcs_server`` yield a ``Store``: the
Beam options and environment that point a pipeline at the server, and a client-side view (upload,
list, read) that goes through the store's own client library, not through Beam.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

BUCKET = "pagemill-test"
S3_CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Store:
    """A bucket on a local object-store server, and how a pipeline reaches it."""

    scheme: str  # "s3" | "gs"
    options: list[str]  # Beam pipeline options for the launcher and its workers
    env: dict[str, str]  # environment the pipeline's processes need (set it before the run)
    put: Callable[[Path, str], None]  # (local file, key)
    keys: Callable[[str], list[str]]  # sorted keys under a prefix
    get: Callable[[str], bytes]
    bucket: str = BUCKET
    endpoint: str = field(default="")

    def uri(self, key: str = "") -> str:
        return f"{self.scheme}://{self.bucket}/{key}"

    def upload_tree(self, root: Path, prefix: str) -> int:
        files = [p for p in sorted(root.rglob("*")) if p.is_file()]
        for path in files:
            self.put(path, f"{prefix}/{path.relative_to(root).as_posix()}")
        return len(files)


def _wait_for(server: subprocess.Popen, log_path: Path, ready: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        try:
            if ready():
                return
        except Exception:
            pass
        assert server.poll() is None, f"the {what} server exited; see {log_path}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} server came up; see {log_path}")


@contextlib.contextmanager
def _process(cmd: list[str], log_path: Path) -> Iterator[subprocess.Popen]:
    with log_path.open("w") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield server
        finally:
            server.terminate()
            server.wait(10)


@contextlib.contextmanager
def s3_server(log_path: Path) -> Iterator[Store]:
    """moto's S3 API server with bucket ``BUCKET``; Beam reaches it through its ``--s3_*`` options."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with _process([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], log_path) as server:
        client = boto3.client("s3", endpoint_url=endpoint, **S3_CREDENTIALS)
        _wait_for(server, log_path, lambda: bool(client.create_bucket(Bucket=BUCKET)), "S3")

        def keys(prefix: str) -> list[str]:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

        yield Store(
            scheme="s3",
            options=[f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=test", "--s3_secret_access_key=test",
                     "--s3_region_name=us-east-1"],
            env={},
            put=lambda path, key: client.upload_file(str(path), BUCKET, key),
            keys=keys,
            get=lambda key: client.get_object(Bucket=BUCKET, Key=key)["Body"].read(),
            endpoint=endpoint,
        )


@contextlib.contextmanager
def gcs_server(log_path: Path) -> Iterator[Store]:
    """gcp-storage-emulator (the GCS JSON API) with bucket ``BUCKET``. Beam's GCS filesystem has no
    endpoint option; google-cloud-storage reads ``STORAGE_EMULATOR_HOST`` (in ``Store.env``) in
    every process, and Beam connects anonymously when it finds no credentials (``--no_auth`` makes
    sure it never asks a metadata server for them)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host=127.0.0.1", f"--port={port}",
           "--in-memory", f"--default-bucket={BUCKET}"]
    with _process(cmd, log_path) as server:
        client = storage.Client(project="test", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": endpoint})
        _wait_for(server, log_path, lambda: client.bucket(BUCKET).exists(), "GCS")
        bucket = client.bucket(BUCKET)
        yield Store(
            scheme="gs",
            options=["--no_auth"],
            env={"STORAGE_EMULATOR_HOST": endpoint},
            put=lambda path, key: bucket.blob(key).upload_from_filename(str(path)),
            keys=lambda prefix: sorted(b.name for b in client.list_blobs(BUCKET, prefix=prefix)),
            get=lambda key: bucket.blob(key).download_as_bytes(),
            endpoint=endpoint,
        )


SERVERS = {"s3": s3_server, "gs": gcs_server}


def assert_same_rows(data_dir: Path, local_data_dir: Path) -> None:
    """The shards under ``data_dir`` hold the rows of a local run's shards, in order. Provenance is
    compared by stage only: it hashes each stage's parameters, and a source's options name folders. The
    refresh unit key in ``metadata`` is left out: it hashes each input's content id, which is the file's
    sha256 locally and the store's own id (LFS sha256, etag or size and mtime) on a store."""
    import json

    import pyarrow.parquet as pq

    got_rows, want_rows = pq.read_table(data_dir).to_pylist(), pq.read_table(local_data_dir).to_pylist()
    assert [r["id"] for r in got_rows] == [r["id"] for r in want_rows]
    for got, want in zip(got_rows, want_rows):
        assert [s["stage"] for s in got.pop("provenance")] == [s["stage"] for s in want.pop("provenance")]
        for row in (got, want):
            row["metadata"] = {k: v for k, v in json.loads(row["metadata"]).items() if k != "refresh_unit"}
        assert got == want, {k: (str(got[k])[:200], str(want[k])[:200]) for k in want if got.get(k) != want[k]}
