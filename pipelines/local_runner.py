"""The local runner: Beam's DirectRunner without its first try, the Prism runner.

For a batch pipeline Beam's ``DirectRunner`` (2.6x and later) first starts the Prism runner, which
downloads a Go binary from GitHub on every run. Offline the download fails at once and the
DirectRunner falls back to its ``FnApiRunner`` (what every test and benchmark here ran on); online it
would fetch and run an unpinned binary and run the pipeline on Prism instead, which ignores
``--direct_running_mode`` and ``--direct_num_workers``. ``LocalRunner`` is the DirectRunner's
``FnApiRunner`` path, chosen directly: no network, the same runner everywhere. A ``--runner`` option
naming anything else (DaskRunner, Dataflow, Flink, Spark, Prism itself) is left to Beam.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
from apache_beam.runners.runner import PipelineResult, PipelineRunner

# --runner values that mean Beam's DirectRunner (its default when none is given), as Beam reads them: the
# class name, any case, "Runner" optional, or its full dotted path.
DIRECT_RUNNER_NAMES = frozenset({"direct", "switchingdirect"})


class LocalRunner(SwitchingDirectRunner):
    """``DirectRunner`` on its ``FnApiRunner`` path (pipeline options passed on to the SDK workers, as
    the DirectRunner does), never the Prism runner."""

    def is_fnapi_compatible(self) -> bool:
        # True for the FnApiRunner: Pipeline.run then skips its runner-API round trip (another to_runner_api
        # and from_runner_api of the whole graph, ~1 s for the corpus DAG), as it does for Beam's own
        # DirectRunner, whose class it recognises by name.
        return True

    def run_pipeline(self, pipeline, options: PipelineOptions) -> PipelineResult:
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return fn_runner.FnApiRunner(provision_info=info).run_pipeline(pipeline, options)


def pipeline_runner(options: PipelineOptions) -> PipelineRunner | None:
    """``LocalRunner`` where ``options`` name no runner or the DirectRunner; None (Beam creates the
    runner the options name) otherwise."""
    name = options.view_as(StandardOptions).runner
    if name is None:
        return LocalRunner()
    short = name.rsplit(".", 1)[-1].lower()
    return LocalRunner() if short.removesuffix("runner") in DIRECT_RUNNER_NAMES else None


def new_pipeline(args: list[str]) -> beam.Pipeline:
    """A ``beam.Pipeline`` over ``args`` on the runner ``pipeline_runner`` picks."""
    options = PipelineOptions(args)
    return beam.Pipeline(runner=pipeline_runner(options), options=options)


__all__ = ["DIRECT_RUNNER_NAMES", "LocalRunner", "new_pipeline", "pipeline_runner"]
