"""Incremental refresh: wall time of an unchanged rerun (its fast path, and through the Beam DAG with
``--no-fast-path``) and of a run with one new input unit, against the full run (goal: unchanged rerun
<= 10% of the full run).

    python benchmarks/refresh.py [--pages 600] [--per-tar 100] [--workers 2 (1: in-process)]

Builds an olmOCR-mix-1025-layout input of ``--pages`` distinct single-page text PDFs in tarballs of
``--per-tar`` pages (one unit per tarball), runs the corpus DAG
(configs/corpus.yaml's render, clean stages but the relabel ones, and dedup; DirectRunner, ``--workers`` processes) in
full, then again with ``--previous`` on the unchanged input (the fast path: no Beam; then the same through
the DAG), then after adding one tarball of
``--per-tar`` new pages (and their parquet rows); each run is its own ``python -m pipelines.corpus``
process, as a scheduler would start it. Prints each wall time, the seconds spent inside ``corpus.run``
(the manifest's ``run.seconds``; the rest is the interpreter and imports, Beam's ~1.6 s among them), the
units read and reused, the ratios, the time of planning and describing (hashing) the units in-process
(the fast path's own work besides copying), and the load average while it ran (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from samples.make.olmocr import write_tar  # noqa: E402
from samples.make.pdfs import paragraphs, text_pdf  # noqa: E402
from schemas.manifest import RunManifest  # noqa: E402


def build_input(root: Path, first: int, pages: int, per_tar: int) -> None:
    """Pages ``first .. first + pages - 1`` (each its own PDF and label) in tarballs of ``per_tar``;
    their rows are appended to ``mix/00_documents_train.parquet``."""
    rows, members = [], []
    for i in range(first, first + pages):
        rng = random.Random(i)
        paras = paragraphs(rng, rng.randint(4, 8), (40, 90))
        doc_id = f"bench/{i:07d}"
        tar_name = f"00_documents_train_{i // per_tar:05d}.tar.gz"
        members.append((f"{doc_id}.pdf", text_pdf([paras])))
        rows.append({"id": doc_id, "url": f"https://example.org/{i}", "page_number": 1,
                     "pdf_relpath": f"pdf_tarballs/{tar_name}:{doc_id}.pdf", "primary_language": "en",
                     "is_rotation_valid": True, "rotation_correction": 0, "is_table": False,
                     "is_diagram": False, "natural_text": "\n\n".join(paras), "extras": None})
        if len(members) == per_tar or i == first + pages - 1:
            write_tar(root / "mix" / "pdf_tarballs" / tar_name, members)
            members = []
    path = root / "mix" / "00_documents_train.parquet"
    frame = pd.DataFrame(rows).set_index("id")
    if path.exists():
        frame = pd.concat([pd.read_parquet(path), frame])
    frame.to_parquet(path, row_group_size=1000)


def config(root: Path, out: Path) -> Path:
    raw = yaml.safe_load((REPO / "configs" / "corpus.yaml").read_text().replace("assets/", f"{REPO}/assets/"))
    raw["run"]["output"] = str(out)
    raw["run"]["progress_every"] = 0
    # the relabel stages need a server and touch only the historical sources, not this one
    raw["clean"]["stages"] = [s for s in raw["clean"]["stages"] if s["name"] not in ("relabel", "audit", "preference")]
    raw["sources"] = [{"name": "bench-mix", "kind": "olmocr_mix", "paths": [str(root / "mix" / "*.parquet")],
                       "license": "odc-by"}]
    from pipelines.config import drop_missing_source_names

    drop_missing_source_names(raw)
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def planning_seconds(root: Path, out: Path) -> float:
    """Planning and describing every unit in this process, as the fast path does (file hashes uncached)."""
    from pipelines.config import load_config
    from pipelines.corpus import plan_in_process

    cfg = load_config(config(root, out))
    started = time.perf_counter()
    plan_in_process(cfg)
    return time.perf_counter() - started


def timed_run(root: Path, out: Path, workers: int, previous: Path | None = None,
              extra: tuple[str, ...] = ()) -> tuple[float, dict]:
    """One ``python -m pipelines.corpus`` process (cold, as a scheduler runs it): wall seconds and the
    manifest's refresh summary."""
    beam = (["--direct_running_mode=in_memory", "--direct_num_workers=1"] if workers == 1 else
            ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])
    command = [sys.executable, "-m", "pipelines.corpus", "--config", str(config(root, out)), *beam, *extra]
    if previous is not None:
        command += ["--previous", str(previous)]
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    manifest = RunManifest.from_json((out / "manifest.json").read_text())
    assert manifest.imbalances() == [], manifest.imbalances()
    return seconds, {**manifest.run["refresh"], "written": manifest.records_written, "inside": manifest.run["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--per-tar", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2, help="DirectRunner processes; 1: in-process (in_memory)")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "input"
        build_input(root, 0, args.pages, args.per_tar)
        full_s, full = timed_run(root, Path(tmp) / "full", args.workers)
        load.append(os.getloadavg()[0])
        same_s, same = timed_run(root, Path(tmp) / "same", args.workers, previous=Path(tmp) / "full")
        load.append(os.getloadavg()[0])
        dag_s, dag = timed_run(root, Path(tmp) / "dag", args.workers, previous=Path(tmp) / "full",
                               extra=("--no-fast-path",))
        load.append(os.getloadavg()[0])
        plan_s = planning_seconds(root, Path(tmp) / "plan")
        build_input(root, args.pages, args.per_tar, args.per_tar)  # one more tarball and its rows
        one_s, one = timed_run(root, Path(tmp) / "one", args.workers, previous=Path(tmp) / "same")
        load.append(os.getloadavg()[0])
    print(f"input: {args.pages} pages in {args.pages // args.per_tar} tarballs (+1 tarball of {args.per_tar});"
          f" {args.workers} workers; {os.cpu_count()} CPUs; 1-min load average at start/after each run: "
          + " / ".join(f"{x:.1f}" for x in load))
    print(f"{'run':<28}{'wall s':>9}{'in run() s':>12}{'units read':>12}{'reused':>8}{'pages written':>15}"
          f"{'vs full':>9}")
    for name, seconds, info in (("full", full_s, full), ("unchanged rerun (fast path)", same_s, same),
                                ("unchanged rerun (DAG)", dag_s, dag), ("1 new tarball", one_s, one)):
        print(f"{name:<28}{seconds:>9.1f}{info['inside']:>12.2f}{info['units_processed']:>12}{info['units_reused']:>8}"
              f"{info['written']:>15}{seconds / full_s:>8.0%}")
    assert same.get("fast_path") and not dag.get("fast_path") and not one.get("fast_path")
    print(f"planning and describing the units in-process: {plan_s:.2f} s")
    print(f"unchanged rerun / full run: {same_s / full_s:.1%} (goal <= 10%)")


if __name__ == "__main__":
    main()
