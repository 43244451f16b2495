"""The local runner: Beam's DirectRunner without its first try, the Prism runner.

For a batch pipeline Beam's ``DirectRunner`` (2.6x and later) first starts the Prism runner, which
downloads a Go binary from GitHub on every run. Offline the download fails at once and the
DirectRunner falls back to its ``FnApiRunner`` (what every test and benchmark here ran on); online it
would fetch and run an unpinned binary and run the pipeline on Prism instead, which ignores
``--direct_running_mode`` and ``--direct_num_workers``. ``LocalRunner`` is the DirectRunner's
``FnApiRunner`` path, chosen directly: no network, the same runner everywhere. A ``--runner`` option
naming anything else (DaskRunner, Dataflow, Flink, Spark, Prism itself) is left to Beam.

In the ``multi_processing`` mode ``new_pipeline`` starts the SDK worker processes before the graph is
built (``pipelines.warm_workers``): the runner attaches to them instead of starting its own at the first
stage, so their imports overlap the launcher's graph building.
"""

from __future__ import annotations

import os
import shutil

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner

from pipelines.warm_workers import BEAM_WORKER_COMMAND, WarmWorkers, can_fork

# --runner values that mean Beam's DirectRunner (its default when none is given), as Beam reads them: the
# class name, any case, "Runner" optional, or its full dotted path.
DIRECT_RUNNER_NAMES = frozenset({"direct", "switchingdirect"})
_GRPC_USED = False  # whether this process has run a pipeline (and so started gRPC servers and channels)


class LocalRunner(SwitchingDirectRunner):
    """``DirectRunner`` on its ``FnApiRunner`` path (pipeline options passed on to the SDK workers, as
    the DirectRunner does), never the Prism runner. With ``warm``, its multi-processing workers are that
    pool's (closed when the run ends)."""

    def __init__(self, warm: WarmWorkers | None = None):
        super().__init__()
        self.warm = warm

    def is_fnapi_compatible(self) -> bool:
        # True for the FnApiRunner: Pipeline.run then skips its runner-API round trip (another to_runner_api
        # and from_runner_api of the whole graph, ~1 s for the corpus DAG), as it does for Beam's own
        # DirectRunner, whose class it recognises by name.
        return True

    def run_pipeline(self, pipeline, options: PipelineOptions) -> PipelineResult:
        global _GRPC_USED
        _GRPC_USED = True  # from now on this process holds gRPC state: no more forked workers (warm_workers)
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        if self.warm is None:
            return fn_runner.FnApiRunner(provision_info=info).run_pipeline(pipeline, options)
        warm, self.warm = self.warm, None
        try:
            return _WarmFnApiRunner(warm.command(), provision_info=info).run_pipeline(pipeline, options)
        finally:
            warm.close()


def pipeline_runner(options: PipelineOptions) -> PipelineRunner | None:
    """``LocalRunner`` where ``options`` name no runner or the DirectRunner; None (Beam creates the
    runner the options name) otherwise."""
    name = options.view_as(StandardOptions).runner
    if name is None:
        return LocalRunner()
    short = name.rsplit(".", 1)[-1].lower()
    return LocalRunner() if short.removesuffix("runner") in DIRECT_RUNNER_NAMES else None


def _worker_command_replaced(pipeline_proto, command: str) -> None:
    """Point the subprocess environments that run Beam's own worker command at ``command``."""
    for environment in pipeline_proto.components.environments.values():
        # Beam's SubprocessSDKEnvironment: the payload is the command line, UTF-8
        if environment.urn == python_urns.SUBPROCESS_SDK and environment.payload == BEAM_WORKER_COMMAND.encode():
            environment.payload = command.encode()


class _WarmFnApiRunner(fn_runner.FnApiRunner):
    """The FnApiRunner, its multi-processing workers started by ``command`` (a ``WarmWorkers`` pool's)."""

    def __init__(self, command: str, **kwargs):
        super().__init__(**kwargs)
        self.worker_command = command

    def run_via_runner_api(self, pipeline_proto, options):
        _worker_command_replaced(pipeline_proto, self.worker_command)
        return super().run_via_runner_api(pipeline_proto, options)


def worker_count(options: PipelineOptions) -> int:
    """How many SDK workers the FnApiRunner starts for these options (its own rule)."""
    count = options.view_as(DirectOptions).direct_num_workers
    return (os.cpu_count() or 1) if count == 0 else (count or 1)


class CachedViewOptions(PipelineOptions):
    """``PipelineOptions`` whose ``view_as`` makes each class's view once.

    Beam builds a fresh view (an argparse parse of every flag, ~0.6 ms) on each call, and graph
    construction calls it per transform for type checks: ~940 views, 0.3 s of the corpus DAG's 0.5 s
    build. A view holds no state of its own (every value lives in the ``_all_options`` dict that all
    views share), so one view per class reads and writes the same values as fresh ones would.
    """

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views", {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]


def new_pipeline(args: list[str], worker_modules: tuple[str, ...] = ()) -> beam.Pipeline:
    """A ``beam.Pipeline`` over ``args`` on the runner ``pipeline_runner`` picks. On ``LocalRunner`` in the
    ``multi_processing`` mode its worker processes start now and import ``worker_modules`` while the
    caller builds the graph (``pipelines.warm_workers``)."""
    options = CachedViewOptions(args)
    runner = pipeline_runner(options)
    if isinstance(runner, LocalRunner) and options.view_as(DirectOptions).direct_running_mode == "multi_processing":
        fork = not _GRPC_USED and can_fork()
        runner.warm = WarmWorkers.start(worker_count(options), worker_modules, fork=fork)
    return beam.Pipeline(runner=runner, options=options)


def discard(pipeline: beam.Pipeline) -> None:
    """A pipeline built but never run (its graph failed to build): close its warm workers and remove the
    temporary folder every ``beam.Pipeline`` makes, which Beam removes only in ``run()``."""
    runner = pipeline.runner
    if isinstance(runner, LocalRunner) and runner.warm is not None:
        warm, runner.warm = runner.warm, None
        warm.close()
    shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


__all__ = ["CachedViewOptions", "DIRECT_RUNNER_NAMES", "LocalRunner", "discard", "new_pipeline", "pipeline_runner",
           "worker_count"]
