"""Airflow 3 DAG: a scheduled pagemill refresh. corpus -> release -> push -> train (optional).

Each task runs one of pagemill's own command lines in a subprocess, with pagemill's interpreter
(``PAGEMILL_PYTHON``, default ``<project>/.venv/bin/python``) in the project folder
(``PAGEMILL_HOME``, default the folder above this file's ``dags/``). Airflow never imports pagemill
or Beam, so it can live in its own venv (``scripts/install_airflow.sh``: ``.venv-airflow``) and the
DAG parses in milliseconds. Beam's own Airflow operator is not used: it needs the Google provider at
parse time even for the DirectRunner.

- ``corpus``: ``python -m pipelines.corpus --config CONFIG --releases ROOT/releases --version RUN
  [RUNNER ARGS] [--previous PREVIOUS]``: the whole corpus DAG as one Beam job: ingest (read, render,
  validate), clean (conventions, repeats, short, decontam, and relabel/audit when the config lists
  them), synth (the ``jinaocrsynth`` sources), write and dedup, then the manifest check (balance,
  dead-letter rate). It stays one job on purpose: Beam fuses the stages (no corpus written to
  storage between them), dedup groups across every source, and the manifest's accounting (in == out
  + dropped + dead per stage and source) is checked over the whole chain; on Dataflow, Flink, Spark
  or Dask, the runner retries failed bundles inside the job. Split into Airflow tasks, each stage
  would be a separate job that writes and re-reads the corpus. Every run is an incremental refresh:
  versions sit side by side under ``ROOT/releases/<run>``, and the job carries over the input units
  that are unchanged since the version ``ROOT/releases/LATEST`` names (docs/refresh.md), then points
  ``LATEST`` at the new one once it balances. ``previous`` (another run's folder or releases root)
  overrides where it refreshes from.
- ``release``: ``python -m pipelines.release --corpus ROOT/releases/RUN --out WORK/release [--repo-id
  REPO]``: Hub-ready shards and dataset card, checked (``datasets`` loads the folder).
- ``push``: ``python -m pipelines.release --out WORK/release --skip-build --repo-id REPO --push``
  when ``release_repo`` is set (``HF_TOKEN`` in the worker's environment), else skipped. A retry
  resumes: files already on the Hub are skipped. Refusals (401/403, storage limits) exit 3.
- ``train``: ``python -m model.train --corpus ROOT/releases/RUN --out WORK/train`` (what ``make train``
  runs) when ``train`` is true, else skipped.

``ROOT`` is ``work_root``, ``WORK`` is ``ROOT/<run_id>`` and ``RUN`` the run id made safe for paths:
manual Airflow 3 runs have no logical date, so folders are keyed on the run id. Params (``airflow
dags trigger pagemill_refresh -c '{...}'``): ``config``, ``runner_args`` (Beam options, e.g.
``--runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp``), ``work_root`` (local
or ``gs://``/``s3://`` for the corpus; the release folder must be local), ``release_repo``,
``previous``, ``train``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, task
from airflow.sdk.exceptions import AirflowSkipException

PROJECT = Path(os.environ.get("PAGEMILL_HOME") or Path(__file__).resolve().parent.parent)
DEFAULT_RETRIES = 2


def pagemill_python() -> str:
    """pagemill's interpreter: ``PAGEMILL_PYTHON``, else the project's ``.venv``, else this one."""
    venv = PROJECT / ".venv" / "bin" / "python"
    return os.environ.get("PAGEMILL_PYTHON") or (str(venv) if venv.exists() else sys.executable)


def run_key(run_id: str) -> str:
    """The run id made safe for paths, object keys and a command line: what the corpus job keeps as its
    ``--version`` unchanged (``pipelines.refresh.version_name`` also strips ``-`` from the ends; a leading
    ``-`` would read as an option). ValueError for a run id made only of dots: ``..`` would put the work
    folder and the corpus version in ``work_root``'s parent (path separators already become ``_``)."""
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("-") or "v"
    if set(key) == {"."}:
        raise ValueError(f"run id {run_id!r}: made only of dots, it names no folder of its own")
    return key


def work_dir(work_root: str, run_id: str) -> str:
    """The run's work folder: ``work_root/<run_key(run_id)>``."""
    base = work_root if "://" in work_root or Path(work_root).is_absolute() else str(PROJECT / work_root)
    return f"{base.rstrip('/')}/{run_key(run_id)}"


def run_cli(args: list[str]) -> None:
    """One pagemill command in the project folder; its output goes to the task log; a non-zero exit fails the task."""
    command = [pagemill_python(), *args]
    print("running:", shlex.join(command), flush=True)
    subprocess.run(command, cwd=PROJECT, check=True)


def corpus_dir(work_root: str, run_id: str) -> str:
    """The run's corpus: version ``<run_id>`` under ``work_root/releases`` (the corpus job's ``--releases``)."""
    root, key = work_dir(work_root, run_id).rsplit("/", 1)
    return f"{root}/releases/{key}"


def corpus_command(params: dict, run_id: str) -> list[str]:
    releases, version = corpus_dir(params["work_root"], run_id).rsplit("/", 1)
    command = ["-m", "pipelines.corpus", "--config", params["config"], "--releases", releases, f"--version={version}"]
    command += shlex.split(params.get("runner_args") or "")
    if params.get("previous"):  # refresh from this run instead of the releases root's LATEST
        command += ["--previous", params["previous"]]
    return command


def release_command(params: dict, work: str, corpus: str) -> list[str]:
    command = ["-m", "pipelines.release", "--corpus", corpus, "--out", f"{work}/release"]
    return command + (["--repo-id", params["release_repo"]] if params.get("release_repo") else [])


with DAG(
    dag_id="pagemill_refresh",
    description="pagemill: rebuild the corpus, cut and check a Hub release, push it, optionally train",
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": DEFAULT_RETRIES, "retry_delay": timedelta(minutes=5), "retry_exponential_backoff": True,
                  "max_retry_delay": timedelta(hours=1)},
    params={
        "config": Param("configs/corpus.yaml", type="string", description="corpus config (relative: the project's)"),
        "runner_args": Param("", type="string", description="Beam options for the corpus job, e.g. "
                             "--runner=DataflowRunner --project=P --region=R --temp_location=gs://B/tmp"),
        "work_root": Param("out/airflow", type="string", description="runs write under work_root/<run_id>"),
        "release_repo": Param("", type="string", description="Hub dataset ORG/NAME to push to (empty: no push)"),
        "previous": Param("", type="string", description="refresh from this run folder or releases root instead "
                          "of work_root/releases/LATEST"),
        "train": Param(False, type="boolean", description="run model.train on the new corpus"),
    },
    tags=["pagemill"],
    doc_md=__doc__,
) as dag:

    @task(execution_timeout=timedelta(hours=24))
    def corpus(params=None, run_id=None) -> str:
        run_cli(corpus_command(params, run_id))
        return work_dir(params["work_root"], run_id)

    @task(execution_timeout=timedelta(hours=6))
    def release(work: str, params=None, run_id=None) -> str:
        run_cli(release_command(params, work, corpus_dir(params["work_root"], run_id)))
        return work

    @task(execution_timeout=timedelta(hours=12))
    def push(work: str, params=None) -> str:
        if not params.get("release_repo"):
            raise AirflowSkipException("no release_repo: nothing to push")
        run_cli(["-m", "pipelines.release", "--out", f"{work}/release", "--skip-build",
                 "--repo-id", params["release_repo"], "--push"])
        return work

    @task(execution_timeout=timedelta(hours=48), trigger_rule="none_failed")
    def train(work: str, params=None, run_id=None) -> None:
        if not params.get("train"):
            raise AirflowSkipException("train is false")
        run_cli(["-m", "model.train", "--corpus", corpus_dir(params["work_root"], run_id), "--out", f"{work}/train"])

    built = release(corpus())
    push(built) >> train(built)  # train waits for the push (skipped or done), not for its result
