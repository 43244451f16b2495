"""The corpus DAG on Beam's DaskRunner against one long-lived ``dask.distributed`` LocalCluster on 127.0.0.1
(one worker process, so that what a worker keeps between runs is always what the next run meets): batched
stages lose nothing, a refresh reads the inputs that changed since the cluster's last run, ``s3://``
inputs and outputs reach the workers with the run's ``--s3_*`` options, and a scheduler that does not
answer leaves a finished run as it was. (``tests/pipelines/test_corpus.py`` compares a whole sample run
on Dask with the DirectRunner's.)"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines import corpus, io, refresh
from pipelines.accounting import Envelope, Kind
from pipelines.config import load_config
from pipelines.local_runner import DASK_RUNNER, new_pipeline
from pipelines.transforms import Batches
from tests.helpers import IN_MEMORY, small_corpus_config
from tests.object_stores import assert_same_rows, free_port, s3_server
from tests.pipelines.test_corpus import shard_digests
from tests.relabel.scripted_server import MODELS, ScriptedServer, completion


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import LocalCluster

    with pytest.MonkeyPatch.context() as env:
        # a worker without the run's S3 options fails at once, instead of asking a metadata server for credentials
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as running:
            yield running


def on_dask(cluster) -> list[str]:
    return [f"--runner={DASK_RUNNER}", f"--dask_client_address={cluster.scheduler_address}", "--dask_npartitions=4"]


def run_to_end(p: beam.Pipeline) -> None:
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        if getattr(result, "client", None) is not None:
            result.client.close()


# --- batched stages --------------------------------------------------------------------------------


def _records_per_batch(batch: list[Envelope]) -> tuple[int, int]:
    return sum(e.kind == Kind.ITEM for e in batch), len(batch)


@pytest.mark.parametrize("runner", ["local", "dask"])
def test_batches_hold_every_envelope_once_and_at_most_size_records(runner, cluster, tmp_path):
    """The relabel stages' batching: each record with the three count events that follow it, in batches of
    at most 4 records. On Dask ``beam.BatchElements`` lost each bundle's last batch (emitted from
    ``finish_bundle``, which the DaskRunner drops); events count for nothing, so a batch holds 4 records
    however many events travel with them."""
    envelopes = [Envelope(kind, n) for n in range(26) for kind in (Kind.ITEM, Kind.EVENT, Kind.EVENT, Kind.EVENT)]
    out = tmp_path / "batches.json"
    p = new_pipeline(IN_MEMORY if runner == "local" else on_dask(cluster))
    (p | beam.Create(envelopes) | Batches(4) | beam.Map(_records_per_batch) | beam.combiners.ToList()
     | beam.Map(lambda sizes, path: Path(path).write_text(json.dumps(sizes)), str(out)))
    run_to_end(p)
    sizes = json.loads(out.read_text())
    assert sum(records for records, _ in sizes) == 26 and sum(n for _, n in sizes) == 104
    assert max(records for records, _ in sizes) == 4
    if runner == "local":  # one bundle: full batches but the last
        assert sorted(records for records, _ in sizes) == [2, 4, 4, 4, 4, 4, 4]


def fake_model(exchange) -> None:
    """An OpenAI-compatible endpoint with model ``m``: a score for a judge's request, else a transcription,
    each decided by the request's bytes (the same request, the same answer, on any runner)."""
    if exchange.method == "GET":
        exchange.json(MODELS)
        return
    digest = hashlib.sha256(exchange.body).hexdigest()
    text = ('{"score": %d, "reason": "fake"}' % (int(digest[:2], 16) % 5 + 1) if b"score" in exchange.body
            else f"Fake transcription {digest[:16]}")
    exchange.json(completion(text))


def with_relabel_stages(base_url: str):
    client = {"base_url": base_url, "model": "m", "concurrency": 2}  # batches of 4 records: several per bundle

    def edit(raw):
        stages = raw["clean"]["stages"]
        at = [s["name"] for s in stages].index("instruct")
        raw["clean"]["stages"] = stages[:at] + [
            {"name": "relabel", "mode": "compare", "tasks": [], "max_tokens": 32, "client": client,
             "sources": ["europeana-newspapers"]},
            {"name": "audit", "action": "flag", "unparseable": "flag", "max_tokens": 16, "client": client,
             "sources": ["europeana-newspapers"]},
        ] + stages[at:]

    return edit


def test_relabel_and_audit_stages_on_dask_write_what_the_direct_runner_writes(cluster, subset_samples, tmp_path):
    server = ScriptedServer(fake_model)
    try:
        direct_cfg = load_config(small_corpus_config(subset_samples, tmp_path / "direct", with_relabel_stages(
            server.base_url)))
        direct = corpus.run(direct_cfg, IN_MEMORY)
        dask_cfg = load_config(small_corpus_config(subset_samples, tmp_path / "dask", with_relabel_stages(
            server.base_url)))
        dask = corpus.run(dask_cfg, on_dask(cluster))
    finally:
        server.close()
    assert direct.imbalances() == [] and server.requests("POST")
    assert dask.imbalances() == []
    assert dask.records_written == direct.records_written
    assert shard_digests(Path(dask_cfg.run.output)) == shard_digests(Path(direct_cfg.run.output))


# --- a refresh on a cluster that ran before --------------------------------------------------------


def test_a_refresh_on_the_cluster_of_the_previous_run_reads_the_input_that_changed(cluster, subset_samples,
                                                                                     tmp_path):
    """The worker that described the first run's inputs describes the refresh's: it must not take a file
    for what it was then (content ids and folder listings were cached per process, for good)."""
    samples = tmp_path / "samples"
    shutil.copytree(subset_samples, samples)
    first_cfg = load_config(small_corpus_config(samples, tmp_path / "first"))
    assert corpus.run(first_cfg, on_dask(cluster)).imbalances() == []
    report = samples / "local" / "report.md"
    report.write_text(report.read_text() + "\n\nA paragraph added after the first run.\n")
    (samples / "local" / "unlabelled.md").write_text("A label written after the first run.\n")

    cfg = load_config(small_corpus_config(samples, tmp_path / "refresh"))
    manifest = corpus.run(cfg, on_dask(cluster), previous=first_cfg.run.output, fast=False)
    assert manifest.imbalances() == []
    assert manifest.run["refresh"]["processed_by_reason"] == {"content changed": 2}  # the report, the unlabelled page
    responses = [row["response"] for row in pq.read_table(Path(cfg.run.output) / "data").to_pylist()
                 if row["source"] == "local-pdfs"]
    assert any("added after the first run" in r for r in responses)


# --- object stores -----------------------------------------------------------------------------------


def _worker_s3_endpoint(path: Path) -> None:
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    given = FileSystems._pipeline_options or PipelineOptions([])  # what Beam's S3 filesystem and io._s3io read
    path.write_text(json.dumps(given.view_as(S3Options).s3_endpoint_url))


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("s3") / "server.log") as store:
        yield store


def test_s3_inputs_and_outputs_reach_the_dask_workers_with_the_runs_options(cluster, s3, subset_samples,
                                                                              subset_run, tmp_path):
    """The ``--s3_*`` options reach Beam's filesystems in the launcher and in Beam's SDK workers; a Dask
    worker gets them only from the runner (they were missing there: 'Unable to locate credentials', after
    Beam's S3 client had retried each read for minutes)."""
    seen = tmp_path / "seen.json"  # first what a worker's filesystems were given: without it, fail at once
    p = new_pipeline([*on_dask(cluster), *s3.options])
    p | beam.Create([seen]) | beam.Map(_worker_s3_endpoint)
    run_to_end(p)
    assert json.loads(seen.read_text()) == s3.endpoint

    local, local_out = subset_run
    assert s3.upload_tree(subset_samples, "samples") > 5
    config = small_corpus_config(subset_samples, tmp_path)
    raw = yaml.safe_load(config.read_text().replace(f"{subset_samples}/", s3.uri("samples/")))
    raw["run"]["output"] = s3.uri("run")
    config.write_text(yaml.safe_dump(raw))
    cfg = load_config(config)
    assert [p for s in cfg.sources for p in s.paths if p.startswith("s3://")]

    manifest = corpus.run(cfg, [*on_dask(cluster), *s3.options])
    assert manifest.imbalances() == []
    assert manifest.records_written == local.records_written
    assert "run/manifest.json" in s3.keys("run/") and not [k for k in s3.keys("run/") if k.startswith("run/_tmp/")]
    (tmp_path / "got" / "data").mkdir(parents=True)
    for key in s3.keys("run/data/"):
        (tmp_path / "got" / "data" / key.rsplit("/", 1)[-1]).write_bytes(s3.get(key))
    assert_same_rows(tmp_path / "got" / "data", local_out / "data")


def test_a_store_files_id_is_asked_again_by_each_runs_planning(s3, tmp_path, monkeypatch):
    """A store's content id (size and time) is cached while one run plans, not past it: a long-lived
    worker planning the next run asks the store again."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    monkeypatch.setattr(FileSystems, "_pipeline_options", PipelineOptions(s3.options))
    local = tmp_path / "a.txt"
    local.write_bytes(b"one")
    s3.put(local, "ids/a.txt")
    uri = s3.uri("ids/a.txt")
    refresh.describing("run-1")
    first = io.content_id(uri)
    local.write_bytes(b"three")
    s3.put(local, "ids/a.txt")
    refresh.describing("run-1")  # the same run: its planning asked once
    assert io.content_id(uri) == first
    refresh.describing("run-2")
    assert io.content_id(uri) != first and io.content_id(uri).startswith("5:")


# --- a runner that does not start --------------------------------------------------------------------


def test_a_scheduler_that_does_not_answer_leaves_the_finished_run_as_it_was(subset_samples, subset_run, tmp_path,
                                                                            capsys):
    _, finished = subset_run
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    code = corpus.main(["--config", str(small_corpus_config(subset_samples, tmp_path)), "--output", str(out),
                        f"--runner={DASK_RUNNER}", f"--dask_client_address={address}", "--dask_connection_timeout=2"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("pipelines.corpus: the runner did not start the run") and address in err
    assert "Traceback" not in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
