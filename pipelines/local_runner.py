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

``--runner=apache_beam.runners.dask.dask_runner.DaskRunner`` gets Beam's DaskRunner with one addition
(``dask_runner``): its workers' filesystems get the pipeline's options (``--s3_*``, ...), as Beam's SDK
workers' do. ``unknown_options`` names the options no Beam class defines (the CLI's typo check).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import shutil
from typing import Iterable

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineResult, PipelineRunner, create_runner

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
    """``LocalRunner`` where ``options`` name no runner or the DirectRunner; Beam's DaskRunner whose
    workers' filesystems get the pipeline's options (``dask_runner``) where they name that; None (Beam
    creates the runner the options name) otherwise."""
    name = options.view_as(StandardOptions).runner
    if name is None:
        return LocalRunner()
    if name == DASK_RUNNER:
        return dask_runner()
    short = name.rsplit(".", 1)[-1].lower()
    return LocalRunner() if short.removesuffix("runner") in DIRECT_RUNNER_NAMES else None


def unknown_options(args: list[str], known: Iterable[str] = ()) -> list[str]:
    """The options in ``args`` that no Beam options class defines (nor ``known``, the caller's own), each
    as ``--name`` or ``--name (did you mean --other?)``. The runner ``args`` names is imported first, so
    its own options class counts (``--dask_*``: Beam's DaskRunner module defines them; they count only when
    ``args`` name that runner, whatever this process imported before). Beam itself only
    logs these at ``run()`` (a WARNING, which quiet runs do not show) and drops them, but for the runners
    that hand what they do not know on to a service or job server (Dataflow; Flink and Spark with an
    uber jar; Prism). Empty when Beam's option parser cannot be had (a Beam without its private API)."""
    try:
        from apache_beam.options.pipeline_options import _BeamArgumentParser

        name = PipelineOptions(args).view_as(StandardOptions).runner
        if name and "." in name:
            try:
                importlib.import_module(name.rsplit(".", 1)[0])  # defines the runner's options class
            except ImportError:  # Beam reports an unknown runner when the pipeline is made
                pass
        parser = _BeamArgumentParser(allow_abbrev=False)
        for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():  # as Beam's own check
            if cls.__module__.startswith("apache_beam.runners.dask.") and name != DASK_RUNNER:
                continue  # defined once anything imported Beam's DaskRunner, read only by it
            cls._add_argparse_args(parser)
        _, unknown = parser.parse_known_args(args)
    except Exception:  # noqa: BLE001 - a check for the user's benefit; Beam still parses the options itself
        return []
    candidates = [flag for action in parser._actions for flag in action.option_strings] + list(known)
    found = []
    for arg in unknown:
        if not arg.startswith("--"):  # the value of an unknown "--name value"
            continue
        flag = arg.split("=", 1)[0]
        close = difflib.get_close_matches(flag, candidates, n=1, cutoff=0.8)
        if close:
            found.append(f"{flag} (did you mean {close[0]}?)")
        elif flag.startswith("--dask_") and name != DASK_RUNNER:
            found.append(f"{flag} (an option of Beam's DaskRunner, which takes --runner={DASK_RUNNER})")
        else:
            found.append(flag)
    return found


def check_runner(args: list[str]) -> None:
    """``ValueError`` (Beam's message) when ``args`` name a runner Beam cannot make (``--runner=DaskRunnr``),
    ``ImportError`` when its module is not installed; nothing is started."""
    options = PipelineOptions(args)
    name = options.view_as(StandardOptions).runner
    if name and pipeline_runner(options) is None:
        create_runner(name)


def ignores_unknown_options(args: list[str]) -> bool:
    """Whether the runner ``args`` name drops the options it does not know (``LocalRunner``, Beam's
    DaskRunner): there an unknown option is a mistake, never something a service reads."""
    name = PipelineOptions(args).view_as(StandardOptions).runner
    if name is None or name == DASK_RUNNER:
        return True
    return name.rsplit(".", 1)[-1].lower().removesuffix("runner") in DIRECT_RUNNER_NAMES


class RunnerUnavailable(ConnectionError):
    """The runner the options name could not start the run (a Dask scheduler that does not answer, a job
    service that refuses): nothing ran."""


DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"  # the one name Beam knows it by
DASK_PLUGIN = "pagemill-filesystem-options"  # each run's replaces the one an earlier run left on a cluster


def dask_runner() -> PipelineRunner:
    """Beam's DaskRunner, but the cluster's workers get the pipeline's filesystem options.

    Beam's SDK workers call ``FileSystems.set_options`` with the pipeline's options before they run
    anything; a Dask worker never does, so every ``s3://`` access there would go without the run's
    ``--s3_endpoint_url``/``--s3_access_key_id``/... (and ``gs://`` without ``--no_auth``/``--project``).
    This runner registers a worker plugin on the cluster, before it submits the graph, that sets them in
    every worker process, those that join later too. The options are process-wide in a worker (as
    Beam's filesystems keep them): runs at the same time on one cluster must agree on them."""
    return _dask_classes()[0]()


@functools.cache
def _dask_classes() -> tuple[type, type]:
    """(the runner, the worker plugin): made on first use, as importing Beam's DaskRunner imports dask."""
    import dask
    import dask.distributed as ddist
    from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunner, DaskRunnerResult
    from apache_beam.runners.dask.overrides import dask_overrides

    class FileSystemOptions(ddist.WorkerPlugin):
        """Sets ``FileSystems``' options in each worker process (``options``: a dict of flags)."""

        def __init__(self, options: dict):
            self.options = options

        def setup(self, worker) -> None:
            from apache_beam.io.filesystems import FileSystems

            FileSystems.set_options(PipelineOptions.from_dictionary(self.options))

    class FileSystemOptionsDaskRunner(DaskRunner):
        __doc__ = dask_runner.__doc__

        def run_pipeline(self, pipeline, options):
            # Beam 2.77's DaskRunner.run_pipeline, with the plugin registered between connecting and submitting
            dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
            bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
            client = ddist.Client(**dask_options)
            try:
                client.register_plugin(FileSystemOptions(filesystem_options(options)), name=DASK_PLUGIN)
                pipeline.replace_all(dask_overrides())
                visitor = self.to_dask_bag_visitor(bag_kwargs)
                pipeline.visit(visitor)
                graph = dask.optimize(list(visitor.bags.values())[-1])
                return DaskRunnerResult(client, client.compute(graph))
            except BaseException:
                client.close()
                raise

    return FileSystemOptionsDaskRunner, FileSystemOptions


def filesystem_options(options: PipelineOptions) -> dict:
    """What Beam's filesystems read of ``options`` (S3, GCS, Azure, HDFS), as a dict of the flags set."""
    from apache_beam.options.pipeline_options import (
        AzureOptions,
        GoogleCloudOptions,
        HadoopFileSystemOptions,
        S3Options,
    )

    found: dict = {}
    for cls in (S3Options, GoogleCloudOptions, AzureOptions, HadoopFileSystemOptions):
        found.update(options.view_as(cls).get_all_options(drop_default=True, current_only=True))
    return found


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


__all__ = ["CachedViewOptions", "DASK_RUNNER", "DIRECT_RUNNER_NAMES", "LocalRunner", "RunnerUnavailable",
           "check_runner", "dask_runner", "discard", "filesystem_options", "ignores_unknown_options", "new_pipeline",
           "pipeline_runner", "unknown_options", "worker_count"]
