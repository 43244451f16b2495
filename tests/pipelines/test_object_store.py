"""The corpus DAG reading its inputs from, and writing its outputs to, object stores (``s3://``, ``gs://``).

No real object store can run here, so each store is a fake of its HTTP API on 127.0.0.1 (moto's S3
server, gcp-storage-emulator for GCS: ``tests/object_stores.py``); everything between the pipeline
and it is real: Beam's S3 and GCS filesystems, boto3 and google-cloud-storage in the launcher and in
the multi-processing SDK workers, over HTTP. Every sample source is read from the bucket (parquet
files, tarballs, WARC files, image mirrors, a training folder), spills and shards are written there,
and the shards must hold the same rows as a run on local paths.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from pipelines import corpus
from pipelines.config import load_config
from tests.helpers import IN_MEMORY, sample_config, small_corpus_config
from tests.object_stores import SERVERS, Store, assert_same_rows


@pytest.fixture(scope="module", params=sorted(SERVERS))
def store(request, tmp_path_factory) -> Store:
    """A bucket on a local S3 or GCS API server, with the samples uploaded under ``samples/``."""
    with SERVERS[request.param](tmp_path_factory.mktemp(request.param) / "server.log") as found:
        yield found


@pytest.fixture
def remote(store: Store, samples_root: Path, monkeypatch) -> Store:
    """The store with the samples uploaded and its environment set for this test's pipelines."""
    if not store.keys("samples/"):
        assert store.upload_tree(samples_root, "samples") > 20
    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    return store


def remote_config(store: Store, local_config: Path, tmp_path: Path, samples_root: Path, output: str) -> Path:
    """The local sample config with every sample path (inputs and options) moved into the bucket."""
    text = local_config.read_text().replace(f"{samples_root}/", store.uri("samples/"))
    raw = yaml.safe_load(text)
    raw["run"]["output"] = output
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def download_shards(store: Store, prefix: str, dest: Path) -> Path:
    (dest / "data").mkdir(parents=True)
    for key in store.keys(f"{prefix}/data/"):
        (dest / "data" / key.rsplit("/", 1)[-1]).write_bytes(store.get(key))
    return dest


def test_sources_and_outputs_on_a_store_match_a_local_run(remote, samples_root, tmp_path):
    (tmp_path / "local").mkdir()
    local_cfg = load_config(sample_config(samples_root, tmp_path / "local"))
    local = corpus.run(local_cfg, IN_MEMORY)

    config = remote_config(remote, tmp_path / "local" / "corpus.yaml", tmp_path, samples_root, remote.uri("run"))
    cfg = load_config(config)
    assert all(p.startswith(remote.uri()) for s in cfg.sources if s.kind != "jinaocrsynth" for p in s.paths)
    run = corpus.run(cfg, ["--direct_running_mode=multi_processing", "--direct_num_workers=2", *remote.options])

    assert run.imbalances() == []
    assert run.records_in == local.records_in and run.records_written == local.records_written
    listed = remote.keys("run/")
    assert not [k for k in listed if k.startswith("run/_tmp/") or k.endswith(".tmp")], "spills or temp names left"
    manifest = json.loads(remote.get("run/manifest.json"))
    assert manifest["balanced"] is True
    assert {f"run/{d}" for d in manifest["dead_letter_files"]} <= set(listed)
    assert_same_rows(download_shards(remote, "run", tmp_path / "remote") / "data", Path(local_cfg.run.output) / "data")


@pytest.mark.slow  # two more full runs against each store
def test_rerun_on_a_store_replaces_stale_shards(remote, samples_root, tmp_path):
    (tmp_path / "local").mkdir()
    local_config = sample_config(samples_root, tmp_path / "local")
    config = remote_config(remote, local_config, tmp_path, samples_root, remote.uri("rerun"))
    first = corpus.run(load_config(config), [*IN_MEMORY, *remote.options])
    assert remote.keys("rerun/data/") == ["rerun/data/train-00000-of-00001.parquet"]

    raw = yaml.safe_load(config.read_text())
    raw["write"].update(shard_bytes=400_000, row_group_bytes=100_000)
    config.write_text(yaml.safe_dump(raw))
    second = corpus.run(load_config(config), [*IN_MEMORY, *remote.options])
    names = [k.rsplit("/", 1)[-1] for k in remote.keys("rerun/data/")]
    n = len(names)
    assert n > 1 and names == [f"train-{i:05d}-of-{n:05d}.parquet" for i in range(n)]  # the old shard is gone
    assert second.records_written == first.records_written
    digests = {hashlib.sha256(remote.get(f"rerun/data/{name}")).hexdigest() for name in names}
    assert len(digests) == n


def test_an_unchanged_refresh_copies_the_previous_run_within_the_store(remote, subset_samples, subset_run, tmp_path):
    """The refresh fast path with its previous run and its output in the bucket: the files are copied
    store-side (Beam's filesystems, S3 through boto3), byte for byte, and the manifest is written there."""
    manifest, out = subset_run
    remote.upload_tree(out, "previous")
    cfg = load_config(small_corpus_config(subset_samples, tmp_path), {"run": {"output": remote.uri("copied")}})
    again = corpus.run(cfg, [*IN_MEMORY, *remote.options], previous=remote.uri("previous"))
    assert again.run["refresh"]["fast_path"] is True and again.imbalances() == []
    files = [s["file"] for s in manifest.shards] + manifest.dead_letter_files + manifest.dropped_sample_files
    for name in files + ["refresh/units.parquet"]:
        assert remote.get(f"copied/{name}") == (out / name).read_bytes(), name
    assert json.loads(remote.get("copied/manifest.json"))["run"]["refresh"]["units_processed"] == 0


def test_s3_calls_share_one_client_and_interleaved_reads_stay_apart(tmp_path):
    """``pipelines.io`` keeps one boto3 client per process for s3:// (Beam's filesystem makes one per
    call, ~0.2 s of CPU), and files open at once over it still read, write and rename correctly."""
    import os

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import io
    from tests.object_stores import s3_server

    with s3_server(tmp_path / "server.log") as store:
        FileSystems.set_options(PipelineOptions(store.options))
        blobs = {}
        for name in ("a", "b"):
            blobs[name] = os.urandom(17 << 20)  # past one read buffer (16 MiB): reads go back to the store
            (tmp_path / name).write_bytes(blobs[name])
            store.put(tmp_path / name, f"ops/{name}")
        io._s3_clients.clear()
        a, b = io.open_read(store.uri("ops/a")), io.open_read(store.uri("ops/b"))
        got = {"a": b"", "b": b""}
        offsets = (17 << 20) - 5000, 10, 100_000, (16 << 20) + 7
        for offset in offsets:
            for name, fh in (("a", a), ("b", b)):
                fh.seek(offset)
                got[name] += fh.read(1000)
        assert got["a"] == b"".join(blobs["a"][o:o + 1000] for o in offsets)
        assert got["b"] == b"".join(blobs["b"][o:o + 1000] for o in offsets)
        assert io.exists(store.uri("ops/a")) and not io.exists(store.uri("ops/missing"))
        with io.open_write(store.uri("ops/c")) as fh:
            fh.write(b"written")
        io.rename(store.uri("ops/c"), store.uri("ops/d"))
        assert store.get("ops/d") == b"written" and "ops/c" not in store.keys("ops/")
        assert len(io._s3_clients) == 1
