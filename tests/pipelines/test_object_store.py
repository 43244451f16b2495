"""The corpus DAG reading its inputs from, and writing its outputs to, an object store (``s3://``).

No real object store can run here, so the store is moto's S3 server (a fake of S3's HTTP API) on
127.0.0.1; everything between the pipeline and it is real: Beam's S3 filesystem and boto3 in the
launcher and in the multi-processing SDK workers, over HTTP. Every sample source is read from the
bucket (parquet files, tarballs, WARC files, image mirrors, a training folder), spills and shards
are written there, and the shards must hold the same rows as a run on local paths.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import botocore.exceptions
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import corpus
from pipelines.config import load_config
from tests.pipelines.test_corpus import IN_MEMORY, sample_config

BUCKET = "pagemill-test"
CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def s3_server(log_path: Path) -> Iterator[tuple[object, list[str]]]:
    """An S3 API server (moto) on 127.0.0.1 in its own process, with bucket ``BUCKET``: yields a
    boto3 client for it and the Beam options that point the pipeline at it. Its own process: in the
    caller's it would share the GIL with an in-process pipeline and slow every request."""
    import boto3

    endpoint = f"http://127.0.0.1:{free_port()}"
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                   "-p", endpoint.rsplit(":", 1)[1]], stdout=log, stderr=subprocess.STDOUT)
        client = boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)
        try:
            for _ in range(200):
                try:
                    client.create_bucket(Bucket=BUCKET)
                    break
                except botocore.exceptions.EndpointConnectionError:
                    assert server.poll() is None, f"the S3 server exited; see {log_path}"
                    time.sleep(0.05)
            else:
                raise AssertionError(f"no S3 server at {endpoint}")
            yield client, [f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=test",
                           "--s3_secret_access_key=test", "--s3_region_name=us-east-1"]
        finally:
            server.terminate()
            server.wait(10)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(boto3 client, Beam options) for a bucket on an S3 API server on 127.0.0.1."""
    with s3_server(tmp_path_factory.mktemp("s3") / "server.log") as found:
        yield found


def upload_tree(client, root: Path, prefix: str) -> int:
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    for path in files:
        client.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(root).as_posix()}")
    return len(files)


def keys(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))


def s3_config(local_config: Path, tmp_path: Path, samples_root: Path, output: str) -> Path:
    """The local sample config with every sample path (inputs and options) moved into the bucket."""
    text = local_config.read_text().replace(f"{samples_root}/", f"s3://{BUCKET}/samples/")
    raw = yaml.safe_load(text)
    raw["run"]["output"] = output
    path = tmp_path / "s3.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def download_shards(client, prefix: str, dest: Path) -> Path:
    (dest / "data").mkdir(parents=True)
    for key in keys(client, f"{prefix}/data/"):
        client.download_file(BUCKET, key, str(dest / "data" / key.rsplit("/", 1)[-1]))
    return dest


def test_sources_and_outputs_on_s3_match_a_local_run(store, samples_root, tmp_path):
    client, options = store
    assert upload_tree(client, samples_root, "samples") > 20
    (tmp_path / "local").mkdir()
    local_cfg = load_config(sample_config(samples_root, tmp_path / "local"))
    local = corpus.run(local_cfg, IN_MEMORY)

    config = s3_config(tmp_path / "local" / "corpus.yaml", tmp_path, samples_root, f"s3://{BUCKET}/run")
    cfg = load_config(config)
    assert all(p.startswith("s3://") for s in cfg.sources if s.kind != "jinaocrsynth" for p in s.paths)
    remote = corpus.run(cfg, ["--direct_running_mode=multi_processing", "--direct_num_workers=2", *options])

    assert remote.imbalances() == []
    assert remote.records_in == local.records_in and remote.records_written == local.records_written
    listed = keys(client, "run/")
    assert not [k for k in listed if k.startswith("run/_tmp/") or k.endswith(".tmp")], "spills or temp names left"
    manifest = json.loads(client.get_object(Bucket=BUCKET, Key="run/manifest.json")["Body"].read())
    assert manifest["balanced"] is True
    assert {f"run/{d}" for d in manifest["dead_letter_files"]} <= set(listed)
    remote_rows = pq.read_table(download_shards(client, "run", tmp_path / "remote") / "data").to_pylist()
    local_rows = pq.read_table(Path(local_cfg.run.output) / "data").to_pylist()
    assert [r["id"] for r in remote_rows] == [r["id"] for r in local_rows]
    for got, want in zip(remote_rows, local_rows):
        # Provenance hashes each stage's parameters, and a source's options name its (other) folders.
        assert [s["stage"] for s in got.pop("provenance")] == [s["stage"] for s in want.pop("provenance")]
        assert got == want


@pytest.mark.slow  # two more runs against the store: ~70 s, as Beam makes a boto3 client per file call
def test_rerun_on_s3_replaces_stale_shards(store, samples_root, tmp_path):
    client, options = store
    if not keys(client, "samples/"):
        upload_tree(client, samples_root, "samples")
    (tmp_path / "local").mkdir()
    local_config = sample_config(samples_root, tmp_path / "local")
    config = s3_config(local_config, tmp_path, samples_root, f"s3://{BUCKET}/rerun")
    first = corpus.run(load_config(config), [*IN_MEMORY, *options])
    assert keys(client, "rerun/data/") == ["rerun/data/train-00000-of-00001.parquet"]

    raw = yaml.safe_load(config.read_text())
    raw["write"].update(shard_bytes=400_000, row_group_bytes=100_000)
    config.write_text(yaml.safe_dump(raw))
    second = corpus.run(load_config(config), [*IN_MEMORY, *options])
    names = [k.rsplit("/", 1)[-1] for k in keys(client, "rerun/data/")]
    n = len(names)
    assert n > 1 and names == [f"train-{i:05d}-of-{n:05d}.parquet" for i in range(n)]  # the old shard is gone
    assert second.records_written == first.records_written
    digests = {hashlib.sha256(client.get_object(Bucket=BUCKET, Key=f"rerun/data/{name}")["Body"].read()).hexdigest()
               for name in names}
    assert len(digests) == n
