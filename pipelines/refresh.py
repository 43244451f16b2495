"""Incremental refresh: which input units a run can carry over from a previous run, and how.

A source plans its inputs into *units* (a parquet file joined with a tarball, a FinePDFs parquet
file, a local file or page range, a block of synthetic pages). Each unit gets a ``UnitInfo``:

- ``name``: what the unit is, portably (source name, unit kind, paths relative to the source's own
  paths, page ranges): the same in a moved checkout;
- ``content``: sha256 of the bytes it reads (each file and its same-stem siblings, e.g. a PDF's
  ``.md`` label; for object stores the store's own id: Hub blob/LFS sha, else size and mtime);
- ``config``: a hash of the code versions and portable configs of every stage its records pass
  before writing (the source's reader, render, validate, each clean stage in order);
- ``key``: hash of the three; pages carry it in ``metadata["refresh_unit"]``.

Given the previous run's ``refresh/units.parquet`` (one row per unit: its info and its per-stage
counts), ``decide`` sorts the current units: same key -> *reused* (its pages, dead letters, counts
and dropped samples are carried over from the previous run's files), else
*processed* with a reason (``added``, ``content changed``, ``config changed: <stages>``, ``no
previous run``), and previous units not planned now are *removed*. One more rule keeps dedup
exact: a reused unit whose pages lost a dedup comparison to a page of a unit that is not reused
is processed again (``kept duplicate gone``), since its losers may now be kept. Dedup, write and
the manifest always run over everything, so the run's shards and counts equal a full run's.

Nothing here gathers per-record data: dead letters name their unit in a column of the dead-letter
shards and are carried by filtering those shards a row group at a time (``carried_letters``), like
pages; the dedup check reads the duplicates shards' ``unit`` and ``kept_unit`` columns into a set of
unit pairs (``_lost_to``). Runs written before those columns existed are read their old way
(``legacy_carried_letters``, ``_legacy_lost_to``).

Plain Python, no Beam import: ``pipelines/corpus.py`` wraps it in the ``ReuseUnchanged`` step.
Path options that name folders (``mirror``, ``warc_root``, ``root``, ``cache_dir``) are taken
as stores of immutable objects: their contents are not hashed, their location is made relative.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import io
from pipelines.io import content_id as file_digest
from pipelines.sources.base import input_bases, relative_to_inputs
from pipelines.write import SHARD_FOLDERS, half_written, shard_problems
from schemas.deadletter import DeadLetter
from schemas.manifest import RunManifest
from schemas.page import PAGE_SCHEMA

UNIT_FIELD = "refresh_unit"  # the key of a page's unit, in PageRecord.metadata
UNITS_FILE = "refresh/units.parquet"
LOSER_PAGES_FOLDER = "refresh/dedup_losers"  # full records of dedup's losers (data/ holds the kept ones)
LATEST = "LATEST"  # a releases root's pointer file: the name of the newest version folder
FORMAT = "1"  # of the unit table and the keys; a change reprocesses everything
REPO = Path(__file__).resolve().parent.parent
# extra code versions a source kind's pages depend on (its own module's VERSION is always taken)
KIND_MODULES = {"jinaocrsynth": ("synth.pages", "synth.render_html", "synth.render_latex")}
# One row per unit: its info and its per-stage counts (dead-letter counts by stage and reason among them).
# The letters themselves are in the dead-letter shards, which name their unit.
UNITS_SCHEMA = pa.schema([(n, pa.string()) for n in ("key", "name", "source", "content", "config", "stages",
                                                     "counts")])
LEGACY_LETTERS = "dead_letters"  # a units table written before dead letters named their unit held them here
# The content of a unit none of whose named files could be found: never reused (``decide``, ``carry_whole``)
UNHASHED = "unhashed:"


class PreviousRunError(ValueError):
    """The previous run's folder is not one finished run: no manifest (an interrupted run), or shards that
    are not the ones its manifest lists (rows, bytes, sha256)."""


class UnitInfo(NamedTuple):
    key: str
    name: str
    source: str
    content: str
    config: str
    stages: str  # JSON {stage: fingerprint}: says which stage's change made a unit's config differ


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


# --- portable configs and stage fingerprints --------------------------------------------------


def portable(value: Any) -> Any:
    """``value`` with local absolute paths made location-free: a file by its content hash, a folder
    by its path relative to the repository (or its name when outside it). Object-store URIs stay."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value) and "://" not in value:
        if os.path.isfile(value):
            return f"sha256:{file_digest(value)}"
        try:
            return "repo:" + Path(value).resolve().relative_to(REPO).as_posix()
        except ValueError:
            return "dir:" + os.path.basename(value.rstrip("/"))
    return value


def folder_digest(path: str) -> str:
    """What a local file or folder holds: sha256 over its files' relative paths and content ids (sorted);
    ``missing`` when there is none."""
    root = Path(path)
    if root.is_file():
        return file_digest(str(root))
    if not root.is_dir():
        return "missing"
    digest = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{f.relative_to(root).as_posix()}:{file_digest(str(f))}\n".encode())
    return digest.hexdigest()


def _version(module_name: str) -> str:
    __import__(module_name)
    return str(getattr(sys.modules[module_name], "VERSION", "0"))


def _class_version(cls: type) -> str:
    """A reader's code version: the class's own ``VERSION`` when it has one (a module may hold several
    readers, each versioned on its own), else its module's."""
    own = getattr(cls, "VERSION", None)
    return str(own) if own is not None else _version(cls.__module__)


def stage_fingerprints(cfg) -> dict[str, dict[str, str]]:
    """source name -> {stage: fingerprint} for the stages a source's records pass before writing."""
    from pipelines.clean.registry import stage_class
    from pipelines.sources import source_class

    shared = {"render": _sha(["render", _version("pipelines.render"), portable(dataclasses.asdict(cfg.render))]),
              "validate": _sha(["validate", PAGE_SCHEMA.to_string()])}
    order: list[str] = []
    for spec in cfg.clean.stages:
        cls = stage_class(spec["name"])
        order.append(spec["name"])
        # a stage whose output depends on files its config names (decontam's benchmark folder) says which:
        # their content, not their name, goes in the fingerprint
        named = getattr(cls, "content_paths", None)
        contents = [folder_digest(p) for p in named(spec)] if named is not None else []
        # ... and one whose output depends on the run's environment (the relabel stages' endpoint and model,
        # taken from $OPENAI_BASE_URL / $PAGEMILL_RELABEL_MODEL when the config leaves them empty) says what
        resolved = getattr(cls, "resolved_inputs", None)
        contents += list(resolved(spec)) if resolved is not None else []
        # the stages before it too: a stage's counts (what it took and emitted) depend on what ran first
        shared[spec["name"]] = _sha([spec["name"], _class_version(cls), portable(dict(spec)), contents, order])
    out = {}
    for settings in cfg.sources:
        cls = source_class(settings.kind)
        versions = [_class_version(cls)] + [_version(m) for m in KIND_MODULES.get(settings.kind, ())]
        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name != "paths"}
        out[settings.name] = {"read": _sha(["read", settings.kind, versions, portable(fields)]), **shared}
    return out


# --- unit identity ------------------------------------------------------------------------------


def _siblings(path: str) -> list[str]:
    """A local file and the files beside it with the same stem (a PDF's ``.md``/``.txt`` label)."""
    folder, name = os.path.split(path)
    stem = name.split(".")[0]
    return [os.path.join(folder, n) for n in _listdir(folder or ".") if n.split(".")[0] == stem] or [path]


def _listdir(folder: str) -> tuple[str, ...]:
    """The files in a local folder, sorted; cached per process under the folder's modification and change
    times and inode (a file added or removed since is seen) until ``forget_files``."""
    try:
        found = os.stat(folder)
    except OSError:
        return ()
    return _listed(folder, (found.st_mtime_ns, found.st_ctime_ns, found.st_ino))


@functools.lru_cache(maxsize=256)
def _listed(folder: str, _stamp: tuple) -> tuple[str, ...]:
    # every entry but folders: a reader takes any other (a FIFO named like a label) as its unit's file and
    # dead-letters it, so adding one must change the unit's identity
    try:
        return tuple(sorted(n for n in os.listdir(folder) if not os.path.isdir(os.path.join(folder, n))))
    except OSError:
        return ()


_listdir.cache_clear = _listed.cache_clear  # type: ignore[attr-defined]
_described_plan: list[str] = [""]  # the plan this process last described units for (``describing``)


def forget_files() -> None:
    """Drop what this process cached about input files (content ids, folder listings): a new run's
    planning starts from the files as they are now."""
    file_digest.cache_clear()
    _listed.cache_clear()


def describing(plan: str) -> None:
    """Called before describing units for the run planning ``plan`` (an id new with each run): the first
    such call in a process forgets what it cached for an earlier run (``forget_files``), which a
    long-lived process (a Dask worker, a launcher running twice) would otherwise take for the
    inputs' state now; later calls of the same run keep the cache (one folder listed once, one
    store file's id asked once)."""
    if plan != _described_plan[0]:
        forget_files()
        _described_plan[0] = plan


def _is_file(path: str) -> bool:
    """A local file, by an absolute path or one relative to the working directory."""
    return "://" not in path and os.path.isfile(path)


def _files_and_shape(unit: Any) -> tuple[list[str], Any]:
    """The files a unit reads (to hash) and its shape with paths kept (to name). Local paths count
    whether absolute or relative (to the working directory: a config's relative paths once stayed so)."""
    if hasattr(unit, "_fields") and {"root", "rel"} <= set(unit._fields):  # local_folder's FolderFile
        return [io.join(unit.root, unit.rel)], {k: getattr(unit, k) for k in unit._fields}
    if isinstance(unit, tuple) and len(unit) == 2 and all(isinstance(x, str) for x in unit) \
            and unit[1].endswith(".md"):  # olmocr_train_dir: (root, X.md) -> X.md and X.pdf
        return [unit[1]], list(unit)
    if dataclasses.is_dataclass(unit):
        shape = {f.name: getattr(unit, f.name) for f in dataclasses.fields(unit)}
    elif hasattr(unit, "_fields"):
        shape = unit._asdict()
    else:
        shape = unit
    files = [x for x in _strings(shape) if ("://" in x and not x.startswith("synth://")) or _is_file(x)]
    return files, shape


def _strings(x: Any) -> Iterator[str]:
    """The strings in a unit's shape (nested dicts, lists and tuples), in order."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def _missing_paths(files: list[str], shape: Any) -> list[str]:
    """When none of the ``files`` a unit reads can be found: the local paths its ``shape`` names (strings with
    a path separator) that are neither a file nor a folder, and its own files that are missing
    (``_files_and_shape``). Its content is then unknown (a hash of nothing would match any previous run's).
    Empty when any file was found, or when the unit names no local path (a block of synthetic pages)."""
    if any("://" in f or os.path.isfile(f) for f in files):
        return []
    named = [x for x in _strings(shape) if "://" not in x and ("/" in x or os.sep in x)]
    missing = [x for x in named if not os.path.exists(x)]
    # a unit's own files that the reader would read (a FolderFile's root/rel, a training pair's .md)
    missing += [f for f in files if "://" not in f and not os.path.isfile(f)]
    return sorted(set(missing))


_sources: dict = {}


def _source(settings):
    from pipelines.sources import build_source

    key = repr(settings)  # settings hold a dict: not hashable
    if key not in _sources:
        _sources[key] = build_source(settings)
    return _sources[key]


def describe_unit(settings, unit: Any, fingerprints: dict[str, str]) -> UnitInfo:
    """The unit's portable name, content hash and config hash, and its key."""
    files, shape = _files_and_shape(unit)
    bases = input_bases(settings.paths)

    def name_of(x):
        if isinstance(x, str):
            return relative_to_inputs(x, bases)
        if isinstance(x, dict):
            return {k: name_of(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [name_of(v) for v in x]
        return x

    name = f"{settings.name}:{json.dumps(name_of(shape), sort_keys=True)}"
    own = getattr(_source(settings), "unit_digest", None)  # a reader that knows which bytes a unit reads
    try:
        content = own(unit) if own is not None else None
    except Exception:  # e.g. an unreadable parquet: hash its files; the reader dead-letters it
        content = None
    if content is None:
        missing = _missing_paths(files, shape)
        if missing:  # never a hash of nothing: a unit whose files cannot be found is read, not reused
            content = UNHASHED + _sha([relative_to_inputs(f, bases) for f in missing])
        else:
            hashed = sorted({s for f in files for s in (_siblings(f) if "://" not in f else [f])})
            content = _sha([[relative_to_inputs(f, bases), file_digest(f)] for f in hashed])
    config = _sha([FORMAT, fingerprints])
    return UnitInfo(_sha([name, content, config]), name, settings.name, content, config,
                    json.dumps(fingerprints, sort_keys=True))


# --- the previous run ---------------------------------------------------------------------------


def resolve_previous(uri: str) -> str:
    """A run folder (holds ``manifest.json``) or a releases root (its ``LATEST`` names the version)."""
    pointer = io.join(uri, LATEST)
    if io.exists(pointer):
        return io.join(uri, io.read_bytes(pointer).decode().strip())
    return uri


def check_previous(uri: str) -> str:
    """The previous run's folder (``resolve_previous``); ValueError when it holds no units table, so that
    ``--previous`` is checked before a run starts."""
    folder = resolve_previous(uri)
    if folder != uri and not io.exists(folder):
        raise PreviousRunError(f"{io.join(uri, LATEST)} names {folder.rsplit('/', 1)[-1]}, which does not exist: "
                               f"point {LATEST} at a finished version, or remove it to start afresh")
    started = any(io.exists(io.join(folder, part)) for part in ("data", "_tmp", "dead_letter", UNITS_FILE))
    if started and not io.exists(io.join(folder, "manifest.json")):  # a first run killed before its units table
        raise PreviousRunError(f"previous run {folder}: no manifest.json: a run into that folder did not finish "
                               f"(interrupted or failed), so its files are not one run's; rerun it, or refresh "
                               f"from another run")
    if not io.exists(io.join(folder, UNITS_FILE)):
        raise ValueError(f"previous run {folder}: no {UNITS_FILE} (a run from before incremental refresh, "
                         f"or not a corpus output); run without --previous once")
    if not io.exists(io.join(folder, "manifest.json")):
        raise PreviousRunError(f"previous run {folder}: no manifest.json: a run into that folder did not finish "
                               f"(interrupted or failed), so its files are not one run's; rerun it, or refresh "
                               f"from another run")
    return folder


def verify_run(folder: str, manifest: RunManifest | None = None) -> None:
    """``PreviousRunError`` unless the run folder's page shards are the ones its manifest lists."""
    manifest = manifest or io.read_run_manifest(folder)
    problems = shard_problems(folder, manifest.shards)
    if problems:
        raise PreviousRunError(f"run {folder}: its shards are not the ones its manifest.json lists "
                               f"({'; '.join(problems[:3])}{'; ...' if len(problems) > 3 else ''}): a later run "
                               f"into that folder was interrupted, or its files were changed; rerun it")


@dataclass
class PreviousRun:
    """What ``decide`` needs of the previous run: its units table, its manifest and where its files are.
    ``legacy_letters``: its units table holds every unit's dead letters (a run from before dead letters
    named their unit, whose dead-letter shards have no ``unit`` column): they are carried from there."""

    folder: str
    units: dict[str, dict]  # key -> row of UNITS_SCHEMA
    manifest: RunManifest
    legacy_letters: bool = False

    @classmethod
    def load(cls, uri: str | None) -> PreviousRun | None:
        """The units table's columns of ``UNITS_SCHEMA`` only (one row per unit: metadata), a batch at a
        time: an older table's ``dead_letters`` column, every dead letter of the run, is not read here."""
        if not uri:
            return None
        folder = check_previous(uri)
        units: dict[str, dict] = {}
        with io.open_read(io.join(folder, UNITS_FILE)) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            columns = [c for c in UNITS_SCHEMA.names if c in names]
            for batch in pf.iter_batches(batch_size=1024, columns=columns):
                units.update((row["key"], row) for row in batch.to_pylist())
        return cls(folder, units, io.read_run_manifest(folder), LEGACY_LETTERS in names)

    def files(self, pattern: str) -> list[str]:
        return io.match(io.join(self.folder, pattern))


def unit_keys(table: pa.Table) -> pa.Array:
    """The ``refresh_unit`` of every row of a page table (from its metadata JSON; "" when none)."""
    found = pc.extract_regex(table.column("metadata").combine_chunks().fill_null(""),
                             f'"{UNIT_FIELD}": "(?P<u>[0-9a-f]+)"')
    return pc.fill_null(pc.struct_field(found, [0]), "")


def _id_units(paths: Iterable[str], wanted: set[str] | None = None) -> dict[str, str]:
    """page id -> unit key of the pages in ``paths`` (only ids in ``wanted`` when given)."""
    out: dict[str, str] = {}
    for path in paths:
        with io.open_read(path) as f:
            pf = pq.ParquetFile(f)
            for batch in pf.iter_batches(columns=["id", "metadata"]):
                table = pa.Table.from_batches([batch])
                for page_id, unit in zip(table.column("id").to_pylist(), unit_keys(table).to_pylist()):
                    if wanted is None or page_id in wanted:
                        out[page_id] = unit
    return out


DUPLICATE_UNITS = ("unit", "kept_unit")  # columns of dropped/dedup-duplicates-*: the loser's unit, the kept page's


def _lost_to(previous: PreviousRun) -> dict[str, set[str]]:
    """unit key -> the unit keys of the pages its dedup losers lost to.

    Read from the ``unit`` and ``kept_unit`` columns of the duplicates shards, a row group at a time,
    each folded to its distinct pairs: memory is one row group plus the (loser unit, kept unit) pairs,
    however many pages dedup dropped. A previous run whose shards lack those columns (written before
    they existed) gets the old answer by joining ids (``_legacy_lost_to``), once: the run it feeds
    writes the columns."""
    paths = previous.files("dropped/dedup-duplicates-*.parquet")
    out: dict[str, set[str]] = {}
    for path in paths:
        with io.open_read(path) as f:
            pf = pq.ParquetFile(f)
            if not set(DUPLICATE_UNITS) <= set(pf.schema_arrow.names):
                return _legacy_lost_to(previous)
            for group in range(pf.num_row_groups):
                pairs = pf.read_row_group(group, columns=list(DUPLICATE_UNITS)).group_by(list(DUPLICATE_UNITS))
                found = pairs.aggregate([])
                for unit, kept in zip(found.column("unit").to_pylist(), found.column("kept_unit").to_pylist()):
                    out.setdefault(unit, set()).add(kept)
    return out


def _legacy_lost_to(previous: PreviousRun) -> dict[str, set[str]]:
    """``_lost_to`` for duplicates shards without unit columns: every dropped page's id and the id it kept,
    joined with the units of the pages in ``refresh/dedup_losers/`` and ``data/`` (memory grows with the
    drops: ~0.8 KB each)."""
    loser_units = _id_units(previous.files(f"{LOSER_PAGES_FOLDER}/*.parquet"))
    if not loser_units:
        return {}
    kept: dict[str, str] = {}
    for path in previous.files("dropped/dedup-duplicates-*.parquet"):
        with io.open_read(path) as f:
            for row in pq.read_table(f, columns=["id", "kept"]).to_pylist():
                kept[row["id"]] = row["kept"]
    kept_units = _id_units(previous.files("data/*.parquet"), set(kept.values()))
    kept_units.update({k: loser_units[k] for k in kept.values() if k in loser_units})
    out: dict[str, set[str]] = {}
    for loser, unit in loser_units.items():
        if loser in kept and kept[loser] in kept_units:
            out.setdefault(unit, set()).add(kept_units[kept[loser]])
    return out


# --- the decision ---------------------------------------------------------------------------------


@dataclass
class Decision:
    process: list[tuple[str, str]]  # (unit key, reason) to read
    reused: dict[str, dict]  # unit key -> previous units row
    removed: list[dict]  # previous units rows not planned now

    def summary(self, previous: str | None) -> dict:
        reasons: dict[str, int] = {}
        for _, reason in self.process:
            reasons[reason] = reasons.get(reason, 0) + 1

        def pages(row):
            return sum(int(c[3]) for c in json.loads(row["counts"]) if c[0] == READ_STAGE and c[1] == "emitted")

        return {
            "previous": previous,
            "units_reused": len(self.reused),
            "units_processed": len(self.process),
            "processed_by_reason": dict(sorted(reasons.items())),
            "units_removed": len(self.removed),
            "removed": sorted(({"unit": r["name"], "pages": pages(r)} for r in self.removed),
                              key=lambda r: r["unit"]),
            "pages_carried": sum(pages(r) for r in self.reused.values()),
        }


def _changed_stages(old: str, new: str) -> list[str]:
    a, b = json.loads(old), json.loads(new)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def decide(current: Iterable[UnitInfo], previous: PreviousRun | None) -> Decision:
    """Sort the current units into reused and processed (with a reason), and list the removed ones."""
    units = sorted(set(current))
    if previous is None:
        return Decision([(u.key, "no previous run") for u in units], {}, [])
    by_name = {row["name"]: row for row in previous.units.values()}
    reused, process = {}, []
    for u in units:
        if u.key in previous.units and not u.content.startswith(UNHASHED):
            reused[u.key] = previous.units[u.key]
            continue
        old = by_name.get(u.name)
        if u.content.startswith(UNHASHED):
            reason = "input files not found"
        elif old is None:
            reason = "added"
        elif old["content"] != u.content:
            reason = "content changed"
        else:
            reason = "config changed: " + ", ".join(_changed_stages(old["stages"], u.stages))
        process.append((u.key, reason))
    lost_to = _lost_to(previous) if reused else {}
    for key in sorted(reused):
        if lost_to.get(key, set()) - set(reused):
            del reused[key]
            process.append((key, "kept duplicate gone"))
    current_keys = {u.key for u in units}
    planned_names = {u.name for u in units}
    removed = [row for key, row in sorted(previous.units.items())
               if key not in current_keys and row["name"] not in planned_names]
    return Decision(sorted(process), reused, removed)


# --- carrying a reused unit over ------------------------------------------------------------------


def carried_rows(path: str, reused: frozenset[str] | set[str]) -> Iterator[dict]:
    """The rows of a previous page table (data/, refresh/dedup_losers/, dropped/) whose unit is reused."""
    with io.open_read(path) as f:
        pf = pq.ParquetFile(f)
        for group in range(pf.num_row_groups):
            table = pf.read_row_group(group)
            keep = pc.is_in(unit_keys(table), value_set=pa.array(sorted(reused), pa.string()))
            yield from table.filter(keep).to_pylist()


READ_STAGE = "read"  # the stage that reads units (``ReadUnits``): it counts each unit it finishes


def carried_events(row: dict) -> list[tuple[str, str, str, str, float]]:
    """(stage, source, kind, reason, value) of a reused unit, as its previous run counted them; a
    table written before units were counted gets the unit's one ``units`` count here."""
    counts = json.loads(row["counts"])
    if not any(kind == "units" for _, kind, _, _ in counts):
        counts.append([READ_STAGE, "units", "", 1])
    return [(stage, row["source"], kind, reason, value) for stage, kind, reason, value in counts]


def carried_letters(path: str, reused: frozenset[str] | set[str]) -> Iterator[DeadLetter]:
    """The dead letters of a previous run's dead-letter shard whose unit is reused, a row group at a time
    (only the ``unit`` column of a row group none of whose letters is carried is read)."""
    wanted = pa.array(sorted(reused), pa.string())
    fields = [f.name for f in dataclasses.fields(DeadLetter)]
    with io.open_read(path) as f:
        pf = pq.ParquetFile(f)
        if "unit" not in pf.schema_arrow.names:
            raise ValueError(f"{path}: a dead-letter shard without a unit column, beside a units table without "
                             f"dead letters: not one run's files")
        for group in range(pf.num_row_groups):
            keep = pc.is_in(pf.read_row_group(group, columns=["unit"]).column("unit"), value_set=wanted)
            if not pc.any(keep).as_py():
                continue
            for row in pf.read_row_group(group, columns=fields).filter(keep).to_pylist():
                yield DeadLetter(**row)


def legacy_carried_letters(path: str, reused: frozenset[str] | set[str]) -> Iterator[DeadLetter]:
    """The reused units' dead letters from an older units table's ``dead_letters`` column (``path``), a few
    units at a time; each letter gets its unit, so the run writes them in the new form."""
    with io.open_read(path) as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=16, columns=["key", LEGACY_LETTERS]):
            for key, letters in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                if key in reused:
                    yield from (DeadLetter(**{**d, "unit": key}) for d in json.loads(letters or "[]"))


def units_table(infos: Iterable[UnitInfo], counts: Iterable[tuple]) -> bytes:
    """``refresh/units.parquet``: one row per unit of this run (processed or reused), with its counts
    (``counts``: (unit, stage, kind, reason, value)), sorted by key. Its dead letters are not here: the
    dead-letter shards name their unit."""
    per_counts: dict[str, list] = {}
    for unit, stage, kind, reason, value in counts:
        per_counts.setdefault(unit, []).append([stage, kind, reason, value])
    rows = [{**u._asdict(), "counts": json.dumps(sorted(per_counts.get(u.key, [])))} for u in sorted(set(infos))]
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=UNITS_SCHEMA), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def version_name(text: str) -> str:
    """A folder-safe release version (Airflow run ids hold ':' and '+'). ValueError for a name with a path
    separator or made only of dots (``..`` would write into the releases root's parent, ``.`` into it)."""
    if "/" in text or "\\" in text:
        raise ValueError(f"version {text!r}: a version is one folder name, without / or \\")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "v"
    if set(name) == {"."}:
        raise ValueError(f"version {text!r}: a version made only of dots names no folder of its own")
    return name


# In this module, not in pipelines/corpus.py: run as ``python -m pipelines.corpus`` that is ``__main__``, and
# Beam's workers (multi_processing, Dask) cannot unpickle a cached function by reference to ``__main__``.
@functools.lru_cache(maxsize=4)
def reused_keys(path: str) -> frozenset[str]:
    """The keys of the units a run carries over, from the file ``ReuseUnchanged`` wrote (read once per worker)."""
    return frozenset(json.loads(io.read_bytes(path)))


# --- the fast path: nothing changed, so the previous run's files are this run's -------------------

# The code that turns carried pages into shards, dead letters, dropped samples and the manifest; hashed by
# source, so any edit (or another pyarrow, whose version the Parquet footer records) sends the next refresh
# through the Beam run, which rewrites everything.
WRITE_PATH_MODULES = ("pipelines.write", "pipelines.transforms", "pipelines.accounting", "pipelines.corpus",
                      "pipelines.refresh", "pipelines.clean.dedup", "pipelines.clean.dedup_stage",
                      "pipelines.clean.dedup_config", "pipelines.clean.image_hash", "pipelines.clean.minhash",
                      "schemas.page", "schemas.deadletter", "schemas.manifest")
FAST_PATH_MAX_INPUTS = 10_000  # inputs planned in the launcher at most; more are planned by the Beam step


def write_fingerprint(cfg, stages: list[str]) -> str:
    """What shapes a run's output but is not in any unit's key: the write and dedup settings, the
    dropped-sample count, the stage order, the write path's code and pyarrow's version."""
    import importlib.util

    code = []
    for name in WRITE_PATH_MODULES:
        spec = importlib.util.find_spec(name)
        code.append([name, file_digest(spec.origin) if spec and spec.origin else "missing"])
    return _sha([FORMAT, portable(dataclasses.asdict(cfg.write)), portable(dataclasses.asdict(cfg.clean.dedup)),
                 cfg.clean.save_dropped, stages, code, pa.__version__])


def _same_folder(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def carry_whole(infos: Iterable[UnitInfo], previous_uri: str, output: str, fingerprint: str,
                run: dict, started: float, verified: bool = False) -> RunManifest | None:
    """The fast path of an unchanged rerun. When the planned units are exactly the previous run's (same
    keys: every unit reused, none removed) and its ``write_fingerprint`` is ``fingerprint``, copy the
    files its manifest lists (shards, dedup losers, dead letters, dropped samples) and its units table
    to ``output``, and write a manifest with its counts (timings zeroed: no work was done), ``run``
    as run metadata (``seconds``: since ``started``) and a refresh summary saying every unit was reused.
    Returns that manifest, or None (nothing written) when anything differs or is missing: the caller runs the DAG.
    The previous run's page shards must be the ones its manifest lists (rows, bytes, sha256: ``verify_run``;
    ``verified``: the caller checked): ``PreviousRunError`` when they are not, since the DAG would carry
    pages from them too."""
    infos = set(infos)
    if any(u.content.startswith(UNHASHED) for u in infos):
        return None
    try:
        previous = PreviousRun.load(previous_uri)
        body = json.loads(io.read_bytes(io.join(previous.folder, "manifest.json")))
    except (ValueError, OSError, KeyError):
        return None
    summary = (body.get("run") or {}).get("refresh") or {}
    if (summary.get("write_fingerprint") != fingerprint or not body.get("balanced")
            or {u.key for u in infos} != set(previous.units) or _same_folder(previous.folder, output)):
        return None
    files = [s["file"] for s in body["shards"]] + [s["losers_file"] for s in body["shards"] if "losers_file" in s]
    files += list(body["dead_letter_files"]) + list(body.get("dropped_sample_files", [])) + [UNITS_FILE]
    if not all(io.exists(io.join(previous.folder, f)) for f in files):
        return None
    if not verified:
        verify_run(previous.folder, previous.manifest)
    stale = [p for folder in SHARD_FOLDERS for p in io.match(io.join(output, folder, "*.parquet"))
             if not any(p.replace("\\", "/").endswith("/" + f) for f in files)]
    io.delete(stale + half_written(output) + [io.join(output, "manifest.json")])
    for f in files:
        io.copy_file(io.join(previous.folder, f), io.join(output, f))
    manifest = RunManifest.from_json(json.dumps(body))
    for per_source in manifest.stages.values():
        for counts in per_source.values():
            counts.seconds = 0.0
    summary = {**Decision([], dict(previous.units), []).summary(previous.folder),
               "write_fingerprint": fingerprint, "fast_path": True}
    # every planned unit is one the previous, balanced run finished
    units = {"planned": len(infos), "finished": len(infos), "missing": []}
    manifest.run = {**run, "seconds": round(time.time() - started, 3), "units": units, "refresh": summary}
    io.write_bytes_atomic(io.join(output, "manifest.json"), manifest.to_json().encode("utf-8"))
    return manifest
