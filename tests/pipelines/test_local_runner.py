"""The local runner never starts Beam's Prism runner (which downloads a binary from GitHub on every run),
where Beam's own DirectRunner does; Beam's DaskRunner is made with the filesystem options for its workers;
other runners named by ``--runner`` are left to Beam. Options that no Beam class defines are named.

PrismRunner.run_pipeline is replaced by a recorder: the real one would try the download, which cannot
run here (no network), so whether it is called is the behaviour under test."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines.local_runner import (
    DASK_RUNNER,
    CachedViewOptions,
    LocalRunner,
    filesystem_options,
    ignores_unknown_options,
    pipeline_runner,
    unknown_options,
)
from tests.helpers import IN_MEMORY


@pytest.fixture()
def prism_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def refuse(self, pipeline, options):
        calls.append("prism")
        raise RuntimeError("Prism is not to be started")  # the DirectRunner then falls back, as offline

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)
    return calls


def _squares(runner, args: list[str]) -> None:
    options = PipelineOptions(args)
    with beam.Pipeline(runner=runner, options=options) as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * x), equal_to([1, 4, 9]))


@pytest.mark.parametrize("args", [IN_MEMORY, IN_MEMORY + ["--runner=DirectRunner"],
                                  ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]])
def test_default_and_direct_runner_options_run_without_prism(prism_calls: list[str], args: list[str]) -> None:
    runner = pipeline_runner(PipelineOptions(args))
    assert isinstance(runner, LocalRunner)
    _squares(runner, args)
    assert prism_calls == []


def test_beams_own_direct_runner_tries_prism_first(prism_calls: list[str]) -> None:
    _squares(None, IN_MEMORY)  # Beam's default: the control that shows the recorder sees a Prism start
    assert prism_calls == ["prism"]


def test_other_runners_are_left_to_beam() -> None:
    for name in ("DataflowRunner", "FlinkRunner", "SparkRunner", "PrismRunner"):
        assert pipeline_runner(PipelineOptions([f"--runner={name}"])) is None


def test_the_dask_runner_is_beams_with_the_filesystem_options_for_its_workers() -> None:
    """Beam's DaskRunner never hands the pipeline's options to Beam's filesystems in a Dask worker (its
    ``s3://`` calls went without the ``--s3_*`` options); the runner made for its name does, through a worker
    plugin carrying what the filesystems read (``tests/pipelines/test_dask_runner.py`` runs it on a cluster)."""
    from apache_beam.runners.dask.dask_runner import DaskRunner

    args = [f"--runner={DASK_RUNNER}", "--dask_client_address=tcp://scheduler:8786", "--s3_endpoint_url=http://s3:9000",
            "--s3_access_key_id=k", "--no_auth", "--direct_num_workers=2"]
    assert isinstance(pipeline_runner(PipelineOptions(args)), DaskRunner)
    assert filesystem_options(PipelineOptions(args)) == {"s3_endpoint_url": "http://s3:9000", "s3_access_key_id": "k",
                                                         "no_auth": True}


# The command lines of docs/sources.md: every option one that Beam (with the runner named) defines.
OTHER_RUNNERS = [
    ["--runner=DataflowRunner", "--project=P", "--region=R", "--temp_location=gs://bucket/tmp",
     "--extra_package=dist/pagemill-0.1.0.tar.gz", "--experiments=use_runner_v2", "--max_num_workers=8"],
    ["--runner", "DataflowRunner", "--project", "P", "--region", "R", "--temp_location", "gs://bucket/tmp"],
    ["--runner=FlinkRunner", "--flink_master=host:8081", "--environment_type=LOOPBACK", "--parallelism=4"],
    ["--runner=SparkRunner", "--spark_master_url=spark://host:7077", "--spark_submit_uber_jar"],
    [f"--runner={DASK_RUNNER}", "--dask_client_address=tcp://scheduler:8786", "--dask_npartitions=64"],
    ["--direct_running_mode=multi_processing", "--direct_num_workers=0", "--s3_endpoint_url=http://s3:9000"],
]


@pytest.mark.parametrize("args", OTHER_RUNNERS)
def test_every_runners_own_options_are_known(args: list[str]) -> None:
    assert unknown_options(args) == []


def test_an_option_no_beam_class_defines_is_named_with_the_nearest_one() -> None:
    args = [f"--runner={DASK_RUNNER}", "--dask_client_adress=tcp://scheduler:8786", "--bogus", "value", "--outptu=x"]
    assert unknown_options(args, ["--output"]) == ["--dask_client_adress (did you mean --dask_client_address?)",
                                                   "--bogus", "--outptu (did you mean --output?)"]
    assert unknown_options(["--dask_npartitions=4"]) == [  # Dask's options, without --runner naming it
        f"--dask_npartitions (an option of Beam's DaskRunner, which takes --runner={DASK_RUNNER})"]
    # the local runner and Dask drop what they do not know; Dataflow, Flink and Spark may pass it on
    assert ignores_unknown_options(args) and ignores_unknown_options(["--direct_num_workers=2"])
    assert not any(ignores_unknown_options(a) for a in OTHER_RUNNERS[:4])


def test_the_local_runner_runs_the_graph_without_a_runner_api_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipeline.run rebuilds the whole graph from its runner-API form first unless the runner runs on the
    Fn API (~1 s for the corpus DAG). The FnApiRunner serialises the graph itself, so the local runner
    skips that (Beam skips it for its own DirectRunner by class name). A spy counts the rebuilds."""
    rebuilds: list[int] = []
    original = beam.Pipeline.from_runner_api

    def counted(*args, **kwargs):
        rebuilds.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(beam.Pipeline, "from_runner_api", staticmethod(counted))
    _squares(LocalRunner(), IN_MEMORY)
    assert rebuilds == []
    _squares(_RoundTripping(), IN_MEMORY)  # a control: the spy sees Beam's rebuild where it happens
    assert rebuilds == [1]


class _RoundTripping(LocalRunner):
    """The local runner as it was before, for the control above: Beam rebuilds its graph."""

    def is_fnapi_compatible(self) -> bool:
        return False


def test_cached_option_views_read_and_write_what_fresh_views_do() -> None:
    """One view per options class, and every view still reads and writes the one shared store of values: what
    a value set through one view reads back as through another and in the options' dict, as with Beam's own."""
    import pickle

    from apache_beam.options.pipeline_options import DebugOptions, DirectOptions

    args = ["--direct_num_workers=3", "--experiments=a"]
    cached, plain = CachedViewOptions(args), PipelineOptions(args)
    assert cached.view_as(DirectOptions) is cached.view_as(DirectOptions)
    for options in (cached, plain):
        assert options.view_as(DirectOptions).direct_num_workers == 3
        options.view_as(DebugOptions).experiments = ["a", "b"]
        options.view_as(DirectOptions).direct_num_workers = 5
        assert options.view_as(DebugOptions).experiments == ["a", "b"]
        assert options.view_as(DirectOptions).direct_num_workers == 5
    assert cached.get_all_options() == plain.get_all_options()
    assert pickle.loads(pickle.dumps(cached)).get_all_options() == plain.get_all_options()
