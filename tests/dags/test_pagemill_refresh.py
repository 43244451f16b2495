"""The Airflow refresh DAG (``dags/pagemill_refresh.py``) in a real Airflow 3: a ``DagBag`` import
with no errors, its shape (task order, one active run, no catchup, retries with backoff, params), and
``dag.test()`` of the whole DAG on the bundled samples, pushing to ``tests/hub_server.py``.

Airflow lives in its own venv (``.venv-airflow``, made by ``scripts/install_airflow.sh`` on first use:
about 1-2 minutes with network to the package registry), not in pagemill's: the DAG's tasks call
pagemill's CLIs with pagemill's interpreter (``PAGEMILL_PYTHON``). Every Airflow process runs with
``AIRFLOW_HOME`` in a temporary folder (``airflow db migrate`` first) in its own process group,
SIGKILLed as a group at its time limit: ``dag.test()`` has been seen to ignore SIGTERM while looping.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipelines.release import card_metadata_of
from schemas.manifest import RunManifest
from tests.helpers import REPO
from tests.hub_server import hub_server
from tests.object_stores import free_port

AIRFLOW_VENV = REPO / ".venv-airflow"
CHECK = REPO / "tests" / "dags" / "airflow_check.py"
REPO_ID = "pagemill/refresh"


def run_hard(command: list[str], env: dict[str, str], limit: float) -> subprocess.CompletedProcess:
    """``command`` in its own process group, the whole group SIGKILLed after ``limit`` seconds."""
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{command[:3]} killed after {limit} s:\n{out[-5000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, "")


@dataclass(frozen=True)
class Airflow:
    python: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def airflow(tmp_path_factory) -> Airflow:
    """Airflow installed (first use) and a migrated metadata DB in a temporary ``AIRFLOW_HOME``."""
    install = run_hard(["bash", str(REPO / "scripts" / "install_airflow.sh"), str(AIRFLOW_VENV)], dict(os.environ),
                       900)
    assert install.returncode == 0, install.stdout[-5000:]
    home = tmp_path_factory.mktemp("airflow_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "HF_"))}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "PAGEMILL_HOME": str(REPO),
            "PAGEMILL_PYTHON": sys.executable}
    migrate = run_hard([str(AIRFLOW_VENV / "bin" / "airflow"), "db", "migrate"], env, 300)
    assert migrate.returncode == 0, migrate.stdout[-5000:]
    return Airflow(str(AIRFLOW_VENV / "bin" / "python"), env)


def check(airflow: Airflow, *args: str, env: dict[str, str] | None = None, limit: float = 120) -> dict:
    run = run_hard([airflow.python, str(CHECK), "--dags", str(REPO / "dags"), *args], env or airflow.env, limit)
    assert run.returncode == 0, run.stdout[-8000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_dag_imports_with_its_shape(airflow):
    found = check(airflow)
    assert found["import_errors"] == {} and found["dag_ids"] == ["pagemill_refresh"]
    assert found["order"] == ["corpus", "release", "push", "train"]
    assert found["upstream"] == {"corpus": [], "release": ["corpus"], "push": ["release"],
                                 "train": ["push", "release"]}
    assert found["max_active_runs"] == 1 and found["catchup"] is False
    assert set(found["retries"].values()) == {2} and all(found["backoff"].values())
    assert found["params"] == ["config", "previous", "release_repo", "runner_args", "train", "work_root"]
    plain, incremental = found["corpus_commands"]
    assert "--previous" not in plain and incremental[-2:] == ["--previous", "P"]
    # every run is a version under work_root/releases, refreshed from its LATEST
    assert plain[plain.index("--releases") + 1:][:2] == ["/w/releases", "--version=R"]
    assert incremental[-4:-2] == ["--a=1", "--b"]  # runner options pass through to Beam
    assert found["work_dir"] == "/w/manual__2026-01-05T00_00_00_00_00"
    # the folder the release and train tasks read is the version the corpus job writes
    from pipelines.refresh import version_name

    assert all(version_name(key) == key and not key.startswith("-") for key in found["run_keys"].values())
    # a run id of dots would name work_root's parent (or work_root itself) as the run's folders
    assert all(v.startswith("ValueError") for v in found["dot_run_keys"].values()), found["dot_run_keys"]


def samples_config(tmp_path: Path) -> Path:
    """configs/corpus.yaml on the bundled samples/, 3 pages per synth source (synth/ has its own tests)."""
    text = (REPO / "configs" / "corpus.yaml").read_text()
    raw = yaml.safe_load(text.replace("samples/", f"{REPO}/samples/").replace("assets/", f"{REPO}/assets/"))
    # the relabel stages need a server (python -m relabel.serve); tests/relabel runs them against one
    raw["clean"]["stages"] = [s for s in raw["clean"]["stages"] if s["name"] not in ("relabel", "audit", "preference")]
    for source in raw["sources"]:
        if source["kind"] == "jinaocrsynth":
            source["options"].update(pages=3, pages_per_unit=3)
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_dag_test_refreshes_the_samples_and_pushes_the_release(airflow, tmp_path):
    work = tmp_path / "work"
    log = tmp_path / "hub.log"
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token") as endpoint:
        env = airflow.env | {"HF_ENDPOINT": endpoint, "HF_TOKEN": "write-token", "HF_HOME": str(tmp_path / "hf"),
                             "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        conf = {"config": str(samples_config(tmp_path)), "work_root": str(work), "release_repo": REPO_ID,
                "runner_args": "--direct_running_mode=multi_processing --direct_num_workers=2"}
        found = check(airflow, "--test", "--conf", json.dumps(conf), env=env, limit=900)
    assert found["states"] == {"corpus": "success", "release": "success", "push": "success", "train": "skipped"}
    assert found["run_state"] == "success"
    [run] = [p for p in work.iterdir() if p.name != "releases"]  # one folder, named for the run id
    assert (work / "releases" / "LATEST").read_text().strip() == run.name  # the corpus is the latest version
    manifest = RunManifest.from_json((work / "releases" / run.name / "manifest.json").read_text())
    assert manifest.imbalances() == [] and manifest.records_written > 0
    card = card_metadata_of((run / "release" / "README.md").read_text())
    assert sum(s["num_examples"] for s in card["dataset_info"]["splits"]) == manifest.records_written
    pushed = {p.relative_to(tmp_path / "hub").as_posix(): p.read_bytes() for p in (tmp_path / "hub").rglob("*")
              if p.is_file()}
    local = {p.relative_to(run / "release").as_posix(): p.read_bytes() for p in (run / "release").rglob("*")
             if p.is_file()}
    assert pushed == local
