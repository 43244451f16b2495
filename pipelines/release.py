"""A Hub-ready release of a corpus: shards the dataset viewer and ``datasets`` read, a generated
dataset card, and the push to the Hub.

    python -m pipelines.release --corpus out/corpus --out out/release [--repo-id ORG/NAME] [--push]

The release folder (``--out``):

- ``data/<split>-NNNNN-of-MMMMM.parquet``: the corpus pages per split, in id order, re-cut into
  shards of at most ``shard_bytes`` and row groups of at most ``row_group_bytes`` (uncompressed)
  and ``row_group_rows``, with a page index and content-defined chunking
  (``pipelines.write.parquet_writer``, the corpus writer's settings); ``PAGE_SCHEMA`` with its
  ``huggingface`` features metadata (``image`` is an ``Image``). The count per folder is checked
  against the Hub's 10,000 entries.
- ``README.md``: the dataset card. YAML: ``pretty_name``, ``license`` (one Hub id, or ``other``
  with a per-source table in the body when the sources' licences differ or are not Hub ids),
  ``task_categories: [image-to-text]``, ``language``, ``size_categories``, ``configs`` (``default``,
  ``data_files`` per split) and ``dataset_info`` (features, splits); the body is generated from the
  corpus manifest and the pages: sources with licences and links, counts per stage, drop and
  dead-letter reasons, the domain/task/language mix, unit-test types, the pipeline version and
  config hash, and how to load it.
- ``manifest.json``: the corpus run's manifest, as written; ``release.json``: what this step wrote
  (shards with rows, bytes, sha256 and row groups; version; config hash). It is removed when a build
  starts and written last, so a folder whose build failed or was killed has none and ``--skip-build``
  refuses it; ``--skip-build`` also checks each listed shard's size and sha256.

Shards are written streaming (record batches of the corpus shards, never the corpus in memory),
under temporary names until their count is known; a rerun on the same corpus writes byte-identical
files, and files of an earlier release that this one does not hold are removed (so ``--out`` must be
apart from ``--corpus``: the same folder or one inside the other is refused, exit 2, before either is
touched). The folder is
checked before it is called done (``check_release``): the card's YAML parses and has every key
above, and ``datasets.load_dataset(folder, streaming=True)`` gives each split with an ``Image``.

``--push`` (with ``--repo-id``) publishes the folder: ``create_repo(repo_type="dataset",
exist_ok=True)``, then one ``HfApi.upload_folder`` (deleting the repo's ``data/`` files this release
does not hold). With ``hf_xet`` installed (a dependency of
huggingface_hub), huggingface_hub 2.x streams it as several commits of a few hundred files and a
rerun of the same command resumes (files already on the Hub are skipped). The token comes from
``HF_TOKEN``; ``HF_ENDPOINT`` points at another Hub. Without ``--push`` it is a dry run: the files
that would be uploaded, with sizes. A 401, 403 (no write access, storage limit) or 413 stops the
push at once with what to do; 429 and 5xx are retried by huggingface_hub (``Retry-After`` honoured).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from pipelines import io
from pipelines.write import (
    PARQUET_CODECS,
    HashingWriter,
    RowGroupCuts,
    check_codec,
    parquet_writer,
    row_bytes,
    shard_problems,
)
from schemas.config import ConfigError, load, option, parse_sets
from schemas.manifest import ManifestError, RunManifest
from schemas.page import PAGE_SCHEMA, features

PROG = "python -m pipelines.release"
CARD_KEYS = ("license", "task_categories", "language", "size_categories", "pretty_name", "configs", "dataset_info")
MAX_FILES_PER_FOLDER = 10_000  # the Hub's limit per folder
# Hub licence ids a source's `license` may already be; anything else makes the card's licence `other`.
HUB_LICENSES = frozenset(
    "apache-2.0 mit cc0-1.0 cc-by-2.0 cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-4.0 cc-by-nc-sa-4.0 "
    "cc-by-nd-4.0 cc-by-nc-nd-4.0 cdla-permissive-1.0 cdla-permissive-2.0 cdla-sharing-1.0 odc-by odbl pddl "
    "unlicense etalab-2.0 gpl-3.0 agpl-3.0 lgpl-3.0 mpl-2.0 bsd-3-clause unknown".split())
# Where each corpus comes from, by source name or kind (a source read from hf:// links to its repo).
SOURCE_LINKS = {
    "olmocr_mix": "https://huggingface.co/datasets/allenai/olmOCR-mix-1025",
    "olmocr_mix_0225": "https://huggingface.co/datasets/allenai/olmOCR-mix-0225",
    "olmocr_train_dir": "https://github.com/allenai/olmocr",
    "finepdfs": "https://huggingface.co/datasets/HuggingFaceFW/finepdfs",
    "nara": "https://huggingface.co/datasets/RevolutionCrossroads/nara_revolutionary_war_pension_files",
    "loc": "https://huggingface.co/datasets/RevolutionCrossroads/loc_chronicling_america_1770-1810",
    "europeana-newspapers": "https://huggingface.co/datasets/biglam/europeana_newspapers",
    "ncse": "https://huggingface.co/datasets/davanstrien/ncse-v2",
    "jinaocrsynth": "synthetic: pagemill `synth/` (JinaOCRSynth), rendered in the run",
    "local_folder": "local files",
}
SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]


@dataclass(frozen=True)
class ReleaseConfig:
    """How a release is cut and described (``--set key=value``)."""

    shard_bytes: int = option(500_000_000, help="most uncompressed bytes per shard (the Hub suggests <= 500 MB)")
    row_group_bytes: int = option(64 * 1024 * 1024, help="most uncompressed bytes per row group (<= 100 MB: the "
                                                         "viewer reads at most 300 MB per request)")
    row_group_rows: int = option(1000, help="most rows per row group")
    compression: str = option("zstd", help=f"Parquet compression codec ({', '.join(PARQUET_CODECS)})")
    batch_rows: int = option(64, help="rows per record batch read from the corpus (pages carry their images)")
    pretty_name: str = option("pagemill OCR pages", help="the card's pretty_name and title")
    commit_message: str = option("", help="the push's commit message (default: 'pagemill release <version>')")
    private: bool = option(False, help="create the Hub repo private")

    def __post_init__(self):
        if min(self.shard_bytes, self.row_group_bytes, self.row_group_rows, self.batch_rows) <= 0:
            raise ValueError("shard_bytes, row_group_bytes, row_group_rows and batch_rows must be positive")
        check_codec(self.compression)  # the writer fails only after the previous release's release.json is gone


class ReleaseError(ValueError):
    """A corpus run that cannot be released, or a release folder that fails its checks: the CLI says it
    in one line (exit 2). Any other error is a bug and keeps its traceback."""


# --- the mix: small counters filled while the pages stream past ------------------------------------


@dataclass
class Mix:
    """Counts over the released pages, from their small columns only."""

    pages: collections.Counter = field(default_factory=collections.Counter)  # by split
    columns: dict[str, collections.Counter] = field(default_factory=dict)  # column -> value -> pages
    licences: dict[str, collections.Counter] = field(default_factory=dict)  # source -> licence -> pages
    test_types: collections.Counter = field(default_factory=collections.Counter)
    pages_with_tests: int = 0

    COLUMNS = ("source", "domain", "task", "language", "response_format")

    def add(self, split: str, batch: pa.RecordBatch) -> None:
        self.pages[split] += batch.num_rows
        for name in self.COLUMNS:
            counter = self.columns.setdefault(name, collections.Counter())
            for item in pc.value_counts(batch.column(name)).to_pylist():
                counter[item["values"]] += item["counts"]
        for source, licence in zip(batch.column("source").to_pylist(), batch.column("license").to_pylist()):
            self.licences.setdefault(source, collections.Counter())[licence] += 1
        for tests in batch.column("unit_tests").to_pylist():
            self.pages_with_tests += bool(tests)
            for line in tests or []:
                try:
                    self.test_types[str(json.loads(line).get("type", "?"))] += 1
                except (ValueError, AttributeError):
                    self.test_types["unparsable"] += 1


# --- shards ----------------------------------------------------------------------------------------


class SplitWriter:
    """One split's release shards, cut from record batches as they come: rows gather into a row
    group until the next would pass ``row_group_bytes`` or ``row_group_rows``; a shard is closed
    before a row group would take it past ``shard_bytes``. Shards get their final names
    (``-of-MMMMM``) in ``close``, once their count is known."""

    def __init__(self, out: str, split: str, cfg: ReleaseConfig):
        self.out, self.split, self.cfg = out, split, cfg
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = self.pending_rows = 0
        self.cuts = RowGroupCuts(min(cfg.row_group_bytes, cfg.shard_bytes), cfg.row_group_rows)
        self.writer: pq.ParquetWriter | None = None
        self.handle = self.sink = None
        self.shards: list[dict] = []

    def add(self, batch: pa.RecordBatch) -> None:
        sizes = row_bytes(batch).to_numpy().tolist()
        start = 0
        for cut in self.cuts.feed(sizes):
            self._hold(batch.slice(start, cut - start), sum(sizes[start:cut]))
            self._flush()
            start = cut
        self._hold(batch.slice(start), sum(sizes[start:]))

    def _hold(self, rows: pa.RecordBatch, nbytes: int) -> None:
        if rows.num_rows:
            self.pending.append(rows)
            self.pending_rows += rows.num_rows
            self.pending_bytes += nbytes

    def _flush(self) -> None:
        group = pa.Table.from_batches(self.pending, schema=PAGE_SCHEMA).combine_chunks()
        self.pending, self.pending_rows, nbytes, self.pending_bytes = [], 0, self.pending_bytes, 0
        if not group.num_rows:
            return
        shard = self.shards[-1] if self.writer is not None else None
        if shard is not None and shard["uncompressed_bytes"] + nbytes > self.cfg.shard_bytes:
            self._close_shard()
            shard = None
        if shard is None:
            path = io.join(self.out, "data", f"{self.split}-{len(self.shards):05d}.parquet.partial")
            self.handle = io.open_write(path)
            self.sink = HashingWriter(self.handle, hashlib.sha256())  # release.json's sha256, as the bytes go out
            self.writer = parquet_writer(self.sink, PAGE_SCHEMA, self.cfg.compression)
            shard = {"partial": path, "split": self.split, "rows": 0, "uncompressed_bytes": 0, "row_groups": 0,
                     "largest_row_group_bytes": 0}
            self.shards.append(shard)
        self.writer.write_table(group, row_group_size=group.num_rows)
        shard["rows"] += group.num_rows
        shard["uncompressed_bytes"] += nbytes
        shard["row_groups"] += 1
        shard["largest_row_group_bytes"] = max(shard["largest_row_group_bytes"], nbytes)

    def _close_shard(self) -> None:
        self.writer.close()
        self.handle.close()
        self.shards[-1]["sha256"] = self.sink.digest.hexdigest()
        self.writer = self.handle = self.sink = None

    def close(self) -> list[dict]:
        if self.pending_rows:
            self._flush()
        if self.writer is not None:
            self._close_shard()
        count = len(self.shards)
        for index, shard in enumerate(self.shards):
            name = f"data/{self.split}-{index:05d}-of-{count:05d}.parquet"
            final = io.join(self.out, *name.split("/"))
            io.rename(shard.pop("partial"), final)
            shard["file"] = name
            shard["bytes"] = _size(final)
        return [{"file": s["file"], **{k: v for k, v in s.items() if k != "file"}} for s in self.shards]


def _size(uri: str) -> int:
    if "://" not in uri:
        return os.path.getsize(uri)
    with io.open_read(uri) as fh:
        return fh.seek(0, 2)


# --- the release ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    folder: str
    shards: list[dict]
    pages: dict[str, int]
    version: str
    config_hash: str


def corpus_files(manifest: RunManifest) -> dict[str, list[str]]:
    """The corpus's page shards by split, from its manifest (the files it vouches for)."""
    files: dict[str, list[str]] = {}
    for shard in sorted(manifest.shards, key=lambda s: s["file"]):
        files.setdefault(shard["split"], []).append(shard["file"])
    return files


def _shard_batches(uri: str, name: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """A corpus shard's rows in batches, under ``PAGE_SCHEMA`` (its metadata too); a shard that cannot be
    read is a ``ReleaseError`` naming it (errors of the caller's own work on a batch are not caught here)."""
    try:
        # A local path is read by Arrow's own file reader: no Python file object for its threads to call into.
        with pq.ParquetFile(uri if "://" not in uri else io.open_read(uri)) as shard:
            for batch in shard.iter_batches(batch_size=batch_rows):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=PAGE_SCHEMA)
    except (OSError, pa.ArrowException) as exc:  # (Arrow's errors subclass these too)
        raise ReleaseError(f"corpus shard {name} cannot be read: {exc}") from exc


def overlap(corpus: str, out: str) -> str | None:
    """Why ``out`` cannot be a release folder for ``corpus``: it is the corpus folder, inside it, or holds it
    (a build would delete the corpus's shards as stale, a push would upload its dead letters and dedup
    losers). Local paths are compared resolved (symlinks, ``..``); a remote URI only with another, as a
    string. None when they are apart."""
    if ("://" in corpus) != ("://" in out):
        return None
    if "://" in corpus:
        a, b = corpus.rstrip("/") + "/", out.rstrip("/") + "/"
    else:
        a, b = os.path.join(os.path.realpath(corpus), ""), os.path.join(os.path.realpath(out), "")
    if a == b:
        return f"--out {out} is the corpus folder --corpus {corpus}"
    if b.startswith(a):
        return f"--out {out} is inside the corpus folder --corpus {corpus}"
    if a.startswith(b):
        return f"--out {out} holds the corpus folder --corpus {corpus}"
    return None


def build_release(corpus: str, out: str, cfg: ReleaseConfig = ReleaseConfig(), repo_id: str | None = None) -> Release:
    """Cut ``corpus`` (a corpus run's output folder) into a release under ``out``, card included
    (its load example names ``repo_id``). ``out`` must be apart from ``corpus`` (``overlap``)."""
    clash = overlap(corpus, out)
    if clash:  # checked before out is touched: a build would delete the corpus's shards as an old release's
        raise ReleaseError(f"{clash}: a release folder must be apart from its corpus; pick another --out")
    manifest = io.read_run_manifest(corpus)
    if manifest.imbalances():
        raise ReleaseError(f"{corpus}/manifest.json does not balance: {manifest.imbalances()[:3]}")
    if manifest.records_written == 0:  # checked before out is touched: an earlier release there stays whole
        raise ReleaseError(f"{corpus} holds no pages: nothing to release")
    problems = shard_problems(corpus, manifest.shards, hash_remote=True)
    if problems:  # e.g. an interrupted rerun into the corpus folder: checked before out is touched
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ReleaseError(f"corpus shard {problems[0]}{more}: {corpus} is not the run its manifest.json "
                           f"describes (a rerun into it failed or was stopped, or its files changed); rerun the corpus")
    # release.json is written last: until then the folder is no release (--skip-build refuses it), so a build
    # that fails or is killed midway never leaves new shards under the previous release's summary
    io.delete([io.join(out, "release.json")] if io.exists(io.join(out, "release.json")) else [])
    mix = Mix()
    shards: list[dict] = []
    for split, files in sorted(corpus_files(manifest).items()):
        writer = SplitWriter(out, split, cfg)
        for name in files:
            uri = io.join(corpus, name)
            for batch in _shard_batches(uri, name, cfg.batch_rows):
                mix.add(split, batch)
                writer.add(batch)
        shards.extend(writer.close())
        if len(shards) > MAX_FILES_PER_FOLDER:
            raise ReleaseError(f"{len(shards)} shards in data/: the Hub allows {MAX_FILES_PER_FOLDER} per folder; "
                             f"raise shard_bytes")
    if sum(mix.pages.values()) != manifest.records_written:
        raise ReleaseError(f"the corpus shards hold {sum(mix.pages.values())} pages, its manifest "
                         f"{manifest.records_written}")
    keep = {s["file"] for s in shards}
    io.delete([p for p in io.match(io.join(out, "data", "*.parquet*"))
               if "data/" + p.replace("\\", "/").rsplit("/", 1)[-1] not in keep])
    version, config_hash = pipeline_version(), manifest_config_hash(manifest)
    release = Release(out, shards, dict(mix.pages), version, config_hash)
    io.write_bytes_atomic(io.join(out, "README.md"), render_card(manifest, mix, release, cfg, repo_id or "ORG/NAME")
                       .encode("utf-8"))
    io.write_bytes_atomic(io.join(out, "manifest.json"), io.read_bytes(io.join(corpus, "manifest.json")))
    summary = {"version": version, "config_hash": config_hash, "corpus": corpus, "pages": dict(mix.pages),
               "shards": shards, "settings": dataclasses.asdict(cfg)}
    io.write_bytes_atomic(io.join(out, "release.json"), json.dumps(summary, indent=2).encode("utf-8"))
    return release


def pipeline_version() -> str:
    """pagemill's package version, and the git commit of its checkout when there is one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = version("pagemill")
    except PackageNotFoundError:
        text = "unknown"
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return f"{text}+g{head}" if head else text


def manifest_config_hash(manifest: RunManifest) -> str:
    """sha256 (16 hex digits) of the run's config as its manifest records it, keys sorted, without
    ``run.output``: where a run wrote is not what it made (each scheduled refresh writes a new folder)."""
    config = json.loads(json.dumps(manifest.run.get("config", {}), default=str))
    if isinstance(config.get("run"), dict):
        config["run"].pop("output", None)
    text = json.dumps(config, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# --- the card ------------------------------------------------------------------------------------


def size_category(n: int) -> str:
    return next((name for bound, name in SIZE_CATEGORIES if n < bound), "n>1B")


def card_languages(counts: collections.Counter) -> list[str]:
    """The pages' languages as the card lists them: primary subtags, ``und`` left out."""
    return sorted({str(lang).replace("_", "-").split("-")[0].lower() for lang in counts
                   if lang and str(lang).lower() != "und"})


def source_rows(manifest: RunManifest, mix: Mix) -> list[dict[str, Any]]:
    """One row per configured source: kind, licence(s), domain, pages released, link."""
    configured = {s["name"]: s for s in manifest.run.get("config", {}).get("sources", [])}
    names = sorted(set(configured) | set(mix.licences))
    rows = []
    for name in names:
        settings = configured.get(name, {})
        licences = sorted(mix.licences.get(name, {})) or [settings.get("license", "unknown")]
        paths = settings.get("paths", [])
        hub = next((p for p in paths if str(p).startswith("hf://datasets/")), None)
        link = SOURCE_LINKS.get(name) or SOURCE_LINKS.get(settings.get("kind", "")) or (
            "https://huggingface.co/datasets/" + "/".join(hub[len("hf://datasets/"):].split("/")[:2]) if hub else "")
        rows.append({"name": name, "kind": settings.get("kind", "?"), "licences": licences,
                     "domain": settings.get("domain", "?"), "pages": mix.columns.get("source", {}).get(name, 0),
                     "link": link})
    return rows


def card_metadata(manifest: RunManifest, mix: Mix, release: Release, cfg: ReleaseConfig) -> dict[str, Any]:
    sources = source_rows(manifest, mix)
    licences = sorted({lic for row in sources if row["pages"] for lic in row["licences"]})
    single = licences[0] if len(licences) == 1 and licences[0] in HUB_LICENSES else None
    meta: dict[str, Any] = {"pretty_name": cfg.pretty_name, "license": single or "other"}
    if single is None:
        meta["license_name"] = "pagemill-per-source"  # the body's "Licences" table gives each source's
    meta["task_categories"] = ["image-to-text"]
    meta["language"] = card_languages(mix.columns.get("language", collections.Counter()))
    meta["size_categories"] = [size_category(sum(mix.pages.values()))]
    meta["tags"] = ["ocr", "document-parsing", "pagemill"]
    splits = sorted(split for split, n in mix.pages.items() if n)  # a split with no pages has no files
    meta["configs"] = [{"config_name": "default", "default": True,
                        "data_files": [{"split": split, "path": f"data/{split}-*"} for split in splits]}]
    per_split = {split: [s for s in release.shards if s["split"] == split] for split in splits}
    meta["dataset_info"] = {
        "features": features()._to_yaml_list(),
        "splits": [{"name": split, "num_bytes": sum(s["uncompressed_bytes"] for s in per_split[split]),
                    "num_examples": mix.pages[split]} for split in splits],
        "download_size": sum(s["bytes"] for s in release.shards),
        "dataset_size": sum(s["uncompressed_bytes"] for s in release.shards),
    }
    return meta


def _table(header: list[str], rows: Iterable[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _mix_table(title: str, counter: collections.Counter, total: int) -> str:
    rows = [[f"`{value}`", n, f"{100 * n / total:.1f}%" if total else "-"] for value, n in counter.most_common()]
    return f"### {title}\n\n" + _table([title.lower(), "pages", "share"], rows)


def render_card(manifest: RunManifest, mix: Mix, release: Release, cfg: ReleaseConfig,
                repo_id: str = "ORG/NAME") -> str:
    """README.md: YAML front matter (``card_metadata``) and a body generated from the manifest and ``mix``."""
    meta = card_metadata(manifest, mix, release, cfg)
    total = sum(mix.pages.values())
    sources = source_rows(manifest, mix)
    parts = [f"# {cfg.pretty_name}", "",
             f"{total:,} page images with instruction-response labels for training document-OCR vision-language "
             f"models, from {sum(1 for s in sources if s['pages'])} sources, built by "
             f"pagemill {release.version} (config hash `{release.config_hash}`). "
             f"Splits: " + ", ".join(f"`{s}` {n:,}" for s, n in sorted(mix.pages.items())) + ".", "",
             "## How to load", "", "```python", "from datasets import load_dataset", "",
             f'ds = load_dataset("{repo_id}")                  # or a local copy: load_dataset("path/to/release")',
             f'stream = load_dataset("{repo_id}", split="train", streaming=True)',
             'page = ds["train"][0]   # page["image"] is a PIL image; page["response"] its label',
             "```", "",
             "Each row is one page: `image` (PNG/WebP bytes, an `Image` feature), `instruction`, `response` "
             "(`response_format`: markdown, html, latex, text or json), `unit_tests` (olmOCR-Bench JSON lines that "
             "check the label), `quality` and `metadata` (JSON strings), `provenance` (stage, version and params "
             "hash of every step), `source`, `source_id`, `page_number`, `domain`, `language`, `license`, `split`.", "",
             "## Sources", "",
             _table(["source", "kind", "licence", "domain", "pages", "link"],
                    [[s["name"], s["kind"], ", ".join(s["licences"]), s["domain"], s["pages"], s["link"] or "-"]
                     for s in sources]), ""]
    if meta["license"] == "other":
        parts += ["## Licences", "",
                  "The sources' licences differ (or are not Hub licence ids), so the card says `other`: each page "
                  "carries its own licence in the `license` column; the pages of each source are under:", "",
                  _table(["source", "licence", "pages"], [[src, lic, n] for src, per in sorted(mix.licences.items())
                                                           for lic, n in sorted(per.items())]),
                  ""]
    stage_rows = []
    for stage in manifest.stage_order:
        t = manifest.totals(stage)
        stage_rows.append([stage, t.inputs, t.out, t.emitted, t.n_dropped, t.n_dead])
    parts += ["## Counts per stage", "",
              "Every input is accounted for: per stage and source, in = out + dropped + dead-lettered "
              f"(the manifest {'balances' if not manifest.imbalances() else 'does NOT balance'}).", "",
              _table(["stage", "in", "out", "emitted", "dropped", "dead-lettered"], stage_rows), ""]
    reasons = collections.Counter()
    for stage in manifest.stage_order:
        t = manifest.totals(stage)
        for reason, n in t.dropped.items():
            reasons[(stage, "dropped", reason)] += n
        for reason, n in t.dead.items():
            reasons[(stage, "dead letter", reason)] += n
    parts += ["## Drops and dead letters by reason", "",
              _table(["stage", "outcome", "reason", "records"],
                     [[s, k, f"`{r}`", n] for (s, k, r), n in sorted(reasons.items())]) if reasons else "None.", ""]
    parts += ["## Mix", ""]
    for name, title in (("domain", "Domain"), ("task", "Task"), ("language", "Language"),
                        ("response_format", "Response format")):
        parts += [_mix_table(title, mix.columns.get(name, collections.Counter()), total), ""]
    parts += ["## Unit tests", "",
              f"{mix.pages_with_tests:,} of {total:,} pages carry unit tests ({sum(mix.test_types.values()):,} "
              "tests), checkable with `python -m schemas.bench`.", "",
              _table(["type", "tests"], [[f"`{t}`", n] for t, n in mix.test_types.most_common()])
              if mix.test_types else "", ""]
    parts += ["## Provenance", "",
              f"- pipeline version: `{release.version}`",
              f"- config hash: `{release.config_hash}` (sha256 of the run's config, in `manifest.json`)",
              f"- files: {len(release.shards)} Parquet shards under `data/` "
              f"({sum(s['bytes'] for s in release.shards):,} bytes), page index and content-defined chunking; "
              "`manifest.json` is the corpus run's manifest, `release.json` this release's shards", ""]
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{front}---\n\n" + "\n".join(parts)


# --- checks --------------------------------------------------------------------------------------


def card_metadata_of(text: str) -> dict[str, Any]:
    """The YAML front matter of a README (a mapping); ReleaseError when there is none or it does not parse."""
    match = re.match(r"^---[ \t]*\n(.*?)\n---[ \t]*(\n|$)", text, re.S)
    if match is None:
        raise ReleaseError("README.md has no YAML front matter between --- lines")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ReleaseError(f"README.md's YAML does not parse: {exc}") from exc
    if not isinstance(meta, dict):
        raise ReleaseError("README.md's YAML is not a mapping")
    return meta


def check_release(folder: str, load: bool = True) -> dict[str, Any]:
    """Problems raise ReleaseError: the card's YAML must parse and hold ``CARD_KEYS`` with an
    ``image`` feature; with ``load``, ``datasets.load_dataset(folder, streaming=True)`` must resolve
    every configured split with ``image`` as an ``Image``. No rows are read (the tests load the
    folder whole): a stream left open mid-file once made the CLI hang at exit in Arrow's thread-pool
    shutdown. Returns the card's metadata."""
    card = io.join(folder, "README.md")
    if not io.exists(card):
        raise ReleaseError(f"no release at {folder} (no README.md): build one first, without --skip-build")
    try:
        text = io.read_bytes(card).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReleaseError(f"{card} is not UTF-8: {exc}") from exc
    meta = card_metadata_of(text)
    missing = [k for k in CARD_KEYS if k not in meta]
    if missing:
        raise ReleaseError(f"README.md's YAML lacks {missing}")
    declared = {f.get("name"): f for f in meta["dataset_info"].get("features", [])}
    if declared.get("image", {}).get("dtype") != "image":
        raise ReleaseError("README.md's dataset_info.features does not declare image as an image")
    if not [f for c in meta["configs"] for f in c.get("data_files") or []]:
        raise ReleaseError("README.md's configs name no data files: nothing to publish")
    summary = io.join(folder, "release.json")
    if not io.exists(summary):  # written last by a build: none means the build failed or was stopped midway
        raise ReleaseError(f"no release.json in {folder}: its build did not finish (it failed or was stopped), so "
                           f"its shards and card may not match; rebuild the release")
    # its shards must all be there, as built: a push deletes the Hub's data/ first
    shards = json.loads(io.read_bytes(summary)).get("shards") or []
    problems = shard_problems(folder, shards)
    if not shards or problems:
        raise ReleaseError(f"release.json lists {len(shards)} shards, {len(problems)} of them missing or changed "
                           f"({'; '.join(problems[:3])}): rebuild the release")
    listed = {s["file"] for s in shards}
    extra = [p for p in io.match(io.join(folder, "data", "*.parquet"))
             if "data/" + p.replace("\\", "/").rsplit("/", 1)[-1] not in listed]
    if extra:
        raise ReleaseError(f"data/ holds {len(extra)} shard(s) release.json does not list "
                           f"({', '.join(e.rsplit('/', 1)[-1] for e in extra[:3])}): rebuild the release")
    if load:
        import datasets

        splits = [f["split"] for c in meta["configs"] for f in c["data_files"]]
        try:
            loaded = datasets.load_dataset(folder, streaming=True)
        except Exception as exc:  # whatever stops datasets from loading the folder is the check failing
            raise ReleaseError(f"datasets cannot load {folder}: {type(exc).__name__}: {exc}") from exc
        if sorted(loaded) != sorted(splits):
            raise ReleaseError(f"datasets loads splits {sorted(loaded)}, the card names {sorted(splits)}")
        for split in splits:
            if not isinstance(loaded[split].features["image"], datasets.Image):
                raise ReleaseError(f"split {split}: image loads as {loaded[split].features['image']}, not an Image")
    return meta


# --- push ----------------------------------------------------------------------------------------


class PushRefused(RuntimeError):
    """The Hub refused the push for a reason a retry will not fix."""


def release_files(folder: str) -> list[tuple[str, int]]:
    """(path in repo, bytes) of every file a push uploads."""
    root = Path(folder)
    return [(p.relative_to(root).as_posix(), p.stat().st_size) for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".partial") and ".cache" not in p.parts]


def push_release(folder: str, repo_id: str, cfg: ReleaseConfig = ReleaseConfig(), dry_run: bool = False,
                 out=sys.stdout, endpoint: str | None = None) -> str | None:
    """Publish ``folder`` as the dataset ``repo_id``: ``create_repo`` then one ``upload_folder``
    (to ``endpoint``, default ``HF_ENDPOINT`` or the Hub) that also deletes the repo's ``data/`` files
    the release does not have. Returns the commit id (None on a dry run). Errors a retry will not fix
    raise ``PushRefused``."""
    files = release_files(folder)
    message = cfg.commit_message or f"pagemill release {pipeline_version()}"
    if dry_run:
        print(f"dry run: would upload {len(files)} files ({sum(n for _, n in files):,} bytes) to "
              f"datasets/{repo_id} with the commit message {message!r}:", file=out)
        for path, size in files:
            print(f"  {path}  {size:,}", file=out)
        print("pass --push (and set HF_TOKEN) to upload", file=out)
        return None
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    token = os.environ.get("HF_TOKEN") or None
    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=cfg.private or None)
        # delete_patterns: shards of an earlier push that this release does not hold (another shard count)
        # would stay on the Hub, and the card's data/<split>-* pattern would read them too
        info = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="dataset", commit_message=message,
                                 ignore_patterns=["*.partial", ".cache/**"], delete_patterns=["data/*"])
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        detail = exc.server_message or str(exc).splitlines()[0]
        if status == 401:
            raise PushRefused(f"the Hub refused the credentials (401): {detail}. Set HF_TOKEN to a token with "
                              f"write access.") from exc
        if status == 403 and "storage" in detail.lower():
            raise PushRefused(f"the Hub's storage limit stops the push (403): {detail}. Free space or raise the "
                              f"quota, then rerun: files already uploaded are skipped.") from exc
        if status == 403:
            raise PushRefused(f"no write access to datasets/{repo_id} (403): {detail}. Use a token with write "
                              f"access to its namespace.") from exc
        if status == 413:
            raise PushRefused(f"the Hub refused a file or request as too large (413): {detail}") from exc
        raise
    except ValueError as exc:
        if "README.md" not in str(exc):  # huggingface_hub's validate-yaml answer names the README
            raise
        raise PushRefused(f"the Hub refused the dataset card: {exc}") from exc
    return info.oid


# --- CLI -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="settings (--set key=value):\n" + "\n".join(
                                         f"  {f.name}: {f.metadata.get('help', '')} (default {f.default!r})"
                                         for f in dataclasses.fields(ReleaseConfig)))
    parser.add_argument("--corpus", default="out/corpus", help="a corpus run's output (manifest.json, data/)")
    parser.add_argument("--out", default="out/release", help="the release folder to write (local)")
    parser.add_argument("--repo-id", help="the Hub dataset repo, ORG/NAME (the card's load example; --push target)")
    parser.add_argument("--push", action="store_true", help="upload to --repo-id (else a dry run listing the files)")
    parser.add_argument("--skip-build", action="store_true", help="push or list --out as it is, without rebuilding")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a release setting (below)")
    args = parser.parse_args(argv)
    try:
        cfg = load(ReleaseConfig, parse_sets(args.sets), "release")
    except ConfigError as exc:
        parser.error(str(exc))
    if args.push and not args.repo_id:
        parser.error("--push needs --repo-id ORG/NAME")
    if args.repo_id:
        from huggingface_hub.utils import HFValidationError, validate_repo_id

        try:
            validate_repo_id(args.repo_id)
        except HFValidationError as exc:
            parser.error(f"--repo-id {args.repo_id!r}: {str(exc).splitlines()[0]}")
    if not args.skip_build:
        release = None
        try:
            release = build_release(args.corpus, args.out, cfg, args.repo_id)
            check_release(args.out)
        except (ReleaseError, ManifestError) as exc:  # no corpus run there, one that does not balance, failed checks
            if release is not None:  # built but failed its checks: not a release --skip-build may push
                io.delete([io.join(args.out, "release.json")])
            print(f"release failed: {args.corpus} -> {args.out}: {exc}", file=sys.stderr)
            return 2
        print(f"release: {args.out}: {sum(release.pages.values())} pages in {len(release.shards)} shards "
              f"({', '.join(f'{s} {n}' for s, n in sorted(release.pages.items()))}); card checked, datasets loads it")
    else:
        clash = overlap(args.corpus, args.out) if io.exists(io.join(args.corpus, "manifest.json")) else None
        if clash:  # the push would upload the corpus's dead letters, dedup losers and lock
            print(f"release check failed: {clash}: a release folder must be apart from its corpus",
                  file=sys.stderr)
            return 2
        try:
            check_release(args.out, load=False)
        except ReleaseError as exc:
            print(f"release check failed: {args.out}: {exc}", file=sys.stderr)
            return 2
    if args.repo_id or args.push:
        try:
            commit = push_release(args.out, args.repo_id or "ORG/NAME", cfg, dry_run=not args.push)
        except PushRefused as exc:
            print(f"push refused: {exc}", file=sys.stderr)
            return 3
        if commit:
            print(f"pushed {args.out} to datasets/{args.repo_id} (commit {commit})")
    else:
        push_release(args.out, "ORG/NAME", cfg, dry_run=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
