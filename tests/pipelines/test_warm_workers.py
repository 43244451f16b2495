"""Multi-processing runs on warm SDK workers (``pipelines.warm_workers``): started before the graph is built,
forked from a launcher that has not used gRPC, fresh interpreters otherwise, and Beam's own worker when none
is waiting. Every run here is a real FnApiRunner run with real worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines import warm_workers
from pipelines.local_runner import new_pipeline
from pipelines.warm_workers import WARM_ENV, WarmWorkers

REPO = Path(__file__).resolve().parents[2]
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def _run_who(p: beam.Pipeline, n: int = 40) -> list[tuple]:
    """Run ``p`` over ``n`` elements; per element, the warm slot and pid of the worker that saw it, and whether
    that worker was forked from the launcher (it then has the launcher's module state, which a fresh
    interpreter does not)."""

    def who(x: int) -> tuple[int, str | None, int, bool]:  # nested: pickled by value (pytest's module names)
        return x, os.environ.get(WARM_ENV), os.getpid(), getattr(warm_workers, "launcher_mark", None) == "set"

    out = p | beam.Create(range(n)) | beam.Map(who)
    assert_that(out | beam.Map(lambda row: row[0]), equal_to(list(range(n))))
    path = Path(os.environ["WHO_OUT"])
    out | beam.combiners.ToList() | beam.Map(lambda rows: path.write_text(json.dumps(rows)))
    p.run().wait_until_finish()
    return [tuple(row) for row in json.loads(path.read_text())]


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_fresh_launcher_forks_its_workers_and_later_runs_spawn_them(tmp_path: Path) -> None:
    """In a fresh process the first run's workers are forks of the launcher; after that run the process holds
    gRPC threads, so the next run's workers are fresh interpreters. Both are warm, both compute the same
    result, and every worker process is reaped when its run ends."""
    script = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pipelines import warm_workers
        from pipelines.local_runner import new_pipeline
        from tests.pipelines.test_warm_workers import MULTI, _reaped, _run_who
        warm_workers.launcher_mark = "set"
        report = []
        for run in range(2):
            os.environ["WHO_OUT"] = os.path.join({str(tmp_path)!r}, f"who{{run}}.json")
            p = new_pipeline(MULTI)
            pool = p.runner.warm
            pids = pool.pids
            seen = _run_who(p)
            report.append({{"pids": pids, "seen": seen, "reaped": [_reaped(pid) for pid in pids],
                            "folder_left": pool.folder.exists(), "runner_pool": p.runner.warm is not None}})
        print(json.dumps(report))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    for run, forked in ((first, True), (second, False)):
        assert len(run["pids"]) == 2
        assert sorted(x for x, *_ in run["seen"]) == list(range(40))
        assert {pid for _, _, pid, _ in run["seen"]} <= set(run["pids"])  # every element ran on a pool worker
        assert {slot for _, slot, _, _ in run["seen"]} <= {"0", "1"}
        assert {was_forked for *_, was_forked in run["seen"]} == {forked}
        assert run["reaped"] == [True, True]
        assert not run["folder_left"] and not run["runner_pool"]


def test_a_runner_wanting_more_workers_than_wait_gets_beams_own(tmp_path: Path, monkeypatch) -> None:
    """One waiting worker for a two-worker run: one attach gets it, the other becomes Beam's worker; and a
    waiting worker that died before the run is passed over the same way."""
    monkeypatch.setenv("WHO_OUT", str(tmp_path / "who.json"))
    original = WarmWorkers.start
    monkeypatch.setattr(WarmWorkers, "start", classmethod(lambda cls, count, modules=(), fork=False:
                                                          original.__func__(cls, 1, modules, fork=False)))
    p = new_pipeline(MULTI)
    seen = _run_who(p)
    assert sorted(x for x, *_ in seen) == list(range(40))
    slots = {slot for _, slot, _, _ in seen}
    assert slots <= {"0", None}
    assert len({pid for _, _, pid, _ in seen}) <= 2

    monkeypatch.setattr(WarmWorkers, "start", original)
    p = new_pipeline(MULTI)
    pool = p.runner.warm
    deadline = time.monotonic() + 30
    while not (pool.folder / "0.sock").exists() and time.monotonic() < deadline:  # listening, then killed
        time.sleep(0.01)
    pool.processes[0].kill()
    pool.processes[0].wait()
    seen = _run_who(p)
    assert sorted(x for x, *_ in seen) == list(range(40))
    assert "0" not in {slot for _, slot, _, _ in seen}  # the dead worker served nothing


def test_a_failed_run_leaves_no_worker_behind(tmp_path: Path) -> None:
    """A stage raises on a forked worker: the run fails with the stage's error, and every worker of the pool
    has exited and been reaped by the time the failure reaches the caller."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO)!r})
        import apache_beam as beam
        from pipelines.local_runner import new_pipeline
        from tests.pipelines.test_warm_workers import MULTI, _reaped

        def fail(x):
            raise ValueError(f"no good: {{x}}")

        p = new_pipeline(MULTI)
        pids = p.runner.warm.pids
        p | beam.Create(range(4)) | beam.Map(fail)
        try:
            p.run().wait_until_finish()
            error = ""
        except Exception as exc:
            error = str(exc)
        print(json.dumps({{"error": error, "reaped": [_reaped(pid) for pid in pids]}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "no good" in report["error"]
    assert report["reaped"] == [True, True]


def test_close_stops_the_workers_no_runner_claimed(tmp_path: Path) -> None:
    pool = WarmWorkers.start(2, fork=False)
    pids = pool.pids
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    pool.close()
    assert all(_reaped(pid) for pid in pids)
    assert not pool.folder.exists()


def test_a_waiting_worker_whose_launcher_is_gone_exits(tmp_path: Path) -> None:
    """The launcher is killed with its workers waiting (no exit handler runs): they notice, remove the
    pool's folder (its sockets) that the launcher can no longer remove, and exit."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pipelines.warm_workers import WarmWorkers
        pool = WarmWorkers.start(2, fork=True)
        print(pool.folder, *pool.pids, flush=True)
        time.sleep(60)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    folder, *pids = launcher.stdout.readline().split()
    pids = [int(pid) for pid in pids]
    assert len(pids) == 2 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    assert Path(folder).is_dir()
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)
    assert not Path(folder).exists()


def _alive(pid: int) -> bool:
    """Running (not gone, and not a zombie waiting for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_attach_without_a_pool_folder_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "pipelines.warm_workers"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "usage" in done.stderr


def test_fork_is_refused_while_another_python_thread_runs() -> None:
    import threading

    stop = threading.Event()
    busy = threading.Thread(target=stop.wait, name="some-server")
    busy.start()
    try:
        assert warm_workers.can_fork() is False
    finally:
        stop.set()
        busy.join()


@pytest.mark.parametrize("names, safe", [(["python", "jemalloc_bg_thd"], True),
                                         (["python", "grpc_global_tim"], False),
                                         (["python", "event_engine"], False)])
def test_fork_is_refused_while_grpc_threads_run(monkeypatch, names: list[str], safe: bool) -> None:
    import threading

    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread()])  # earlier runs' threads aside
    monkeypatch.setattr(warm_workers.os, "listdir", lambda path: [str(i) for i in range(len(names))])
    monkeypatch.setattr(warm_workers.Path, "read_text", lambda self: names[int(self.parent.name)] + "\n")
    assert warm_workers.can_fork() is safe
