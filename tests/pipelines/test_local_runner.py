"""The local runner never starts Beam's Prism runner (which downloads a binary from GitHub on every run),
where Beam's own DirectRunner does; other runners named by ``--runner`` are left to Beam.

PrismRunner.run_pipeline is replaced by a recorder: the real one would try the download, which cannot
run here (no network), so whether it is called is the behaviour under test."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.testing.util import assert_that, equal_to

from pipelines.local_runner import CachedViewOptions, LocalRunner, pipeline_runner
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
    for name in ("apache_beam.runners.dask.dask_runner.DaskRunner", "DataflowRunner", "FlinkRunner", "PrismRunner"):
        assert pipeline_runner(PipelineOptions([f"--runner={name}"])) is None


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
