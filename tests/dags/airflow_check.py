"""Run with the Airflow venv's Python by ``tests/dags/test_pagemill_refresh.py`` (pagemill's own venv
has no Airflow): parses ``dags/`` with a ``DagBag`` and reports the refresh DAG's shape, the corpus
command its params give, and with ``--test`` runs it once with ``dag.test()`` (task retries set to
0: with retries, a failing task makes ``dag.test()`` wait for the retry instead of ending). Prints
one JSON line last."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", required=True, help="the DAG folder")
    parser.add_argument("--test", action="store_true", help="run the DAG once with dag.test()")
    parser.add_argument("--conf", default="{}", help="run conf (params) for dag.test(), JSON")
    args = parser.parse_args()

    from airflow.models import DagBag

    bag = DagBag(dag_folder=args.dags)
    out: dict = {"import_errors": {Path(k).name: str(v) for k, v in bag.import_errors.items()},
                 "dag_ids": sorted(bag.dag_ids)}
    dag = bag.dags["pagemill_refresh"]
    out.update(
        order=[t.task_id for t in dag.topological_sort()],
        upstream={t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks},
        max_active_runs=dag.max_active_runs, catchup=dag.catchup, schedule=str(dag.schedule),
        retries={t.task_id: t.retries for t in dag.tasks},
        backoff={t.task_id: t.retry_exponential_backoff for t in dag.tasks},
        params=sorted(dag.params.keys()),
    )
    spec = importlib.util.spec_from_file_location("refresh", Path(args.dags) / "pagemill_refresh.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = {k: dag.params[k] for k in dag.params.keys()}
    base["work_root"] = "/w"
    out["corpus_commands"] = [module.corpus_command(base, "R"),
                              module.corpus_command(base | {"previous": "P", "runner_args": "--a=1 --b"}, "R")]
    out["work_dir"] = module.work_dir("/w", "manual__2026-01-05T00:00:00+00:00")
    out["run_keys"] = {run_id: module.run_key(run_id) for run_id in ("weekly-", "-rerun", "a:b+c", "--")}
    refused = {}
    for run_id in ("..", ".", "-..-"):  # made only of dots: the work folder's parent
        try:
            refused[run_id] = module.run_key(run_id)
        except ValueError as exc:
            refused[run_id] = f"ValueError: {exc}"
    out["dot_run_keys"] = refused
    if args.test:
        for t in dag.tasks:
            t.retries = 0
        run = dag.test(run_conf=json.loads(args.conf))
        out["run_state"] = str(run.state)
        out["states"] = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
