"""A corpus report people can look at: one static HTML page, plots and a gallery, images embedded.

    python -m pipelines.report --corpus out/corpus --out out/report [--per-source 4]

Writes ``<out>/index.html``: the manifest's totals and per-stage counts as tables; plots of pages
per source, domain, task and language, label lengths, drops and dead letters by stage and reason,
unit-test types per page, image sizes and dedup cluster sizes; the incremental-refresh summary when
the run had one; and a gallery of sample pages per source (the first by id, i.e. a hash-random
pick, those with unit tests before those without) with their labels and unit tests, each checked on
the label by ``schemas.unit_tests``. Every image is a ``data:`` URI, so the one file opens anywhere.

The shards are first checked against the manifest (``shard_problems``: a missing or changed one is
exit 2 naming it). They are streamed a row group at a time, reading only the small columns; a row
group is read whole (images) only when it holds a gallery page, which its id statistics or id column
tell. Memory grows with the number of sources and clusters, not pages.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import html
import io as _io
import json
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines import io
from pipelines.write import shard_problems
from schemas.manifest import ManifestError, RunManifest

SMALL_COLUMNS = ["id", "source", "domain", "task", "language", "response", "unit_tests", "width", "height"]
LENGTH_BINS = np.concatenate([[0], np.logspace(0, 6, 37)])  # label characters, log-spaced up to 1M
SIDE_BINS = np.arange(0, 4097, 128)  # image width/height in pixels
LABEL_CHARS = 1200  # of a gallery page's label shown


class ReportError(ValueError):
    """A corpus the report cannot be made of (a shard missing or not the manifest's): one line, exit 2."""


def _keep_first(ids: list[str], page_id: str, n: int) -> None:
    """Keep ``ids`` the ``n`` smallest ids seen, sorted (whatever order the shards give them in)."""
    if page_id in ids:  # an id two shards hold: one card
        return
    if len(ids) < n:
        bisect.insort(ids, page_id)
    elif n and page_id < ids[-1]:
        bisect.insort(ids, page_id)
        ids.pop()


@dataclass
class CorpusStats:
    """What the plots need, summed over the shards."""

    pages: int = 0
    by: dict[str, Counter] = field(default_factory=lambda: {k: Counter() for k in ("source", "domain", "task",
                                                                                      "language")})
    label_lengths: dict[str, np.ndarray] = field(default_factory=dict)  # source -> histogram over LENGTH_BINS
    sizes: np.ndarray = field(default_factory=lambda: np.zeros((len(SIDE_BINS) - 1,) * 2, dtype=np.int64))
    test_types: Counter = field(default_factory=Counter)  # pages having at least one test of a type
    tests_per_page: Counter = field(default_factory=Counter)
    gallery_ids: dict[str, list[str]] = field(default_factory=dict)  # source -> its first ids with unit tests
    _untested: dict[str, list[str]] = field(default_factory=dict)  # source -> its first ids without any
    clusters: Counter = field(default_factory=Counter)  # cluster size -> clusters
    duplicate_reasons: Counter = field(default_factory=Counter)

    def add(self, table: pa.Table, per_source: int) -> None:
        self.pages += table.num_rows
        for key, counter in self.by.items():
            counter.update(table.column(key).to_pylist())
        lengths = pc.utf8_length(table.column("response").fill_null("")).to_numpy(zero_copy_only=False)
        sources = np.array(table.column("source").to_pylist(), dtype=object)
        for source in set(sources):
            hist, _ = np.histogram(lengths[sources == source], bins=LENGTH_BINS)
            self.label_lengths[source] = self.label_lengths.get(source, 0) + hist
        hist, _, _ = np.histogram2d(np.clip(table.column("width").to_numpy(), 0, SIDE_BINS[-1] - 1),
                                    np.clip(table.column("height").to_numpy(), 0, SIDE_BINS[-1] - 1),
                                    bins=[SIDE_BINS, SIDE_BINS])
        self.sizes += hist.astype(np.int64)
        all_tests = [tests or [] for tests in table.column("unit_tests").to_pylist()]
        for tests in all_tests:
            self.tests_per_page[len(tests)] += 1
            self.test_types.update({json.loads(t).get("type", "?") for t in tests})
        for page_id, source, tests in zip(table.column("id").to_pylist(), sources, all_tests):
            tested = self.gallery_ids.setdefault(source, [])
            untested = self._untested.setdefault(source, [])
            # the first by id over all the source's shards (its splits are separate shards)
            _keep_first(tested if tests else untested, page_id, per_source)

    def gallery(self, per_source: int) -> set[str]:
        """The gallery's pages: per source, those with unit tests first, then those without."""
        return {i for source, tested in self.gallery_ids.items()
                for i in (tested + self._untested.get(source, []))[:per_source]}


def collect(corpus: str, manifest: RunManifest, per_source: int) -> CorpusStats:
    stats = CorpusStats()
    for shard in manifest.shards:
        with io.open_read(io.join(corpus, shard["file"])) as f:
            pf = pq.ParquetFile(f)
            for group in range(pf.num_row_groups):
                stats.add(pf.read_row_group(group, columns=SMALL_COLUMNS), per_source)
    # losers per kept page, over every duplicates file: they are sharded by the loser's id, so one
    # cluster's losers can be in several files
    kept: Counter = Counter()
    for name in manifest.dropped_sample_files:
        if name.startswith("dropped/dedup-duplicates"):
            with io.open_read(io.join(corpus, name)) as f:
                for row in pq.read_table(f, columns=["reason", "kept"]).to_pylist():
                    kept[row["kept"]] += 1
                    stats.duplicate_reasons[row["reason"]] += 1
    stats.clusters.update(n + 1 for n in kept.values())
    return stats


def _id_range(pf: pq.ParquetFile, group: int) -> tuple[str, str] | None:
    """The row group's smallest and largest id from its statistics, when the footer has them."""
    meta = pf.metadata.row_group(group)
    for i in range(meta.num_columns):
        column = meta.column(i)
        if column.path_in_schema == "id":
            stats = column.statistics
            if stats is not None and stats.has_min_max and isinstance(stats.min, str):
                return stats.min, stats.max
    return None


def gallery_rows(corpus: str, manifest: RunManifest, ids: set[str]) -> list[dict]:
    """The full rows of the chosen pages. Per row group: skipped when its id statistics rule the ids
    out, else its id column is read, and the row group is read whole only when it holds one of them."""
    rows: list[dict] = []
    remaining = set(ids)
    for shard in manifest.shards:
        if not remaining:
            break
        with io.open_read(io.join(corpus, shard["file"])) as f:
            pf = pq.ParquetFile(f)
            for group in range(pf.num_row_groups):
                if not remaining:
                    break
                bounds = _id_range(pf, group)
                if bounds is not None and not any(bounds[0] <= i <= bounds[1] for i in remaining):
                    continue
                wanted = pa.array(sorted(remaining), pa.string())
                hits = pc.is_in(pf.read_row_group(group, columns=["id"]).column("id"), value_set=wanted)
                if not pc.any(hits).as_py():
                    continue
                table = pf.read_row_group(group)
                found = table.filter(pc.is_in(table.column("id"), value_set=wanted)).to_pylist()
                rows.extend(found)
                remaining.difference_update(r["id"] for r in found)
    return sorted(rows, key=lambda r: (r["source"], r["id"]))


# --- rendering ----------------------------------------------------------------------------------


def _png_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _figure_uri(fig) -> str:
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return _png_uri(buf.getvalue())


def _bar(ax, counter: Counter | dict, title: str) -> None:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0])))
    labels, values = [str(k) for k, _ in items] or ["(none)"], [v for _, v in items] or [0]
    ax.barh(labels[::-1], values[::-1], color="#4a7ab5")
    ax.set_title(title)


def plots(stats: CorpusStats, manifest: RunManifest) -> dict[str, str]:
    """name -> PNG data URI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, key in zip(axes.flat, ("source", "domain", "task", "language")):
        _bar(ax, stats.by[key], f"pages per {key}")
    fig.tight_layout()
    out["mix"] = _figure_uri(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    centres = np.sqrt(np.maximum(LENGTH_BINS[:-1], 1) * LENGTH_BINS[1:])
    for source, hist in sorted(stats.label_lengths.items()):
        ax.step(centres, hist, where="mid", label=source)
    ax.set_xscale("log")
    ax.set_xlabel("label length (characters)")
    ax.set_ylabel("pages")
    ax.set_title("label lengths per source")
    ax.legend(fontsize=7)
    out["label_lengths"] = _figure_uri(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    drops = {f"{stage}: {reason}": n for stage in manifest.stage_order
             for reason, n in manifest.totals(stage).dropped.items()}
    dead = {f"{stage}: {reason}": n for stage in manifest.stage_order
            for reason, n in manifest.totals(stage).dead.items()}
    _bar(axes[0], drops, "dropped by stage and reason")
    _bar(axes[1], dead, "dead letters by stage and reason")
    fig.tight_layout()
    out["drops"] = _figure_uri(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    _bar(axes[0], stats.test_types, "pages with a unit test of each type")
    counts = sorted(stats.tests_per_page.items())
    axes[1].bar([k for k, _ in counts], [v for _, v in counts], color="#4a7ab5")
    axes[1].set_title("unit tests per page")
    axes[1].set_xlabel("tests on the page")
    axes[1].set_ylabel("pages")
    fig.tight_layout()
    out["unit_tests"] = _figure_uri(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].imshow(np.log1p(stats.sizes.T), origin="lower", extent=(0, SIDE_BINS[-1], 0, SIDE_BINS[-1]),
                   cmap="Blues", aspect="auto")
    axes[0].set_xlabel("width (px)")
    axes[0].set_ylabel("height (px)")
    axes[0].set_title("image sizes (log pages per 128 px cell)")
    _bar(axes[1], {f"{size} pages": n for size, n in sorted(stats.clusters.items())},
         "dedup clusters by size (kept + dropped)")
    fig.tight_layout()
    out["sizes_dedup"] = _figure_uri(fig)
    return out


def _thumbnail(image: dict | bytes, side: int = 320) -> str:
    from PIL import Image

    data = image["bytes"] if isinstance(image, dict) else image
    with Image.open(_io.BytesIO(data)) as im:
        im.thumbnail((side, side))
        buf = _io.BytesIO()
        im.convert("L" if im.mode in ("L", "1", "I;16") else "RGB").save(buf, format="JPEG", quality=80)
    return _png_uri(buf.getvalue(), "image/jpeg")


def _checked_tests(row: dict) -> list[tuple[str, bool, str]]:
    """The row's tests on its response, read as its response convention has them read (``checkable``)."""
    from pipelines.instruct.conventions import checkable, record_convention
    from schemas.unit_tests import check_all, unit_test_from_json

    tests = [unit_test_from_json(line) for line in row.get("unit_tests") or []]
    text = checkable(record_convention(row.get("metadata")), row.get("response") or "")
    return [(t.type, passed, why) for t, passed, why in check_all(tests, text)]


def _table(table_id: str, header: list[str], rows: list[list], keys: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        key = f' data-key="{html.escape(keys[i], quote=True)}"' if keys else ""
        body.append(f"<tr{key}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    return (f'<table id="{html.escape(table_id, quote=True)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def render_html(corpus: str, manifest: RunManifest, stats: CorpusStats, gallery: list[dict]) -> str:
    figures = plots(stats, manifest)
    totals = json.loads(manifest.to_json())["totals"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>pagemill corpus report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,"
        "th:first-child{text-align:left}.card{display:flex;gap:1em;border-top:1px solid #ddd;padding:1em 0}"
        ".card img{border:1px solid #999;align-self:flex-start}.label{white-space:pre-wrap;font-size:12px;"
        "background:#f6f6f6;padding:6px;max-height:22em;overflow:auto;flex:1}.pass{color:#17702b}"
        ".fail{color:#b3261e}li{font-size:12px}</style></head><body>",
        f"<h1>pagemill corpus report</h1><p>{html.escape(corpus)}; balanced: "
        f"{'yes' if not manifest.imbalances() else 'NO'}</p>",
        "<h2>Totals</h2>",
        _table("totals", ["count", "records"], [[k, v] for k, v in totals.items()], list(totals)),
        "<h2>Stages</h2>",
    ]
    rows, keys = [], []
    for stage in manifest.stage_order:
        for source, c in sorted(manifest.stages.get(stage, {}).items()):
            rows.append([stage, source, c.inputs, c.out, c.emitted, c.n_dropped, c.n_dead])
            keys.append(f"{stage}/{source}")
    parts.append(_table("stages", ["stage", "source", "in", "out", "emitted", "dropped", "dead"], rows, keys))
    reasons = [[kind, stage, reason, n] for stage in manifest.stage_order
               for kind, per in (("dropped", manifest.totals(stage).dropped), ("dead", manifest.totals(stage).dead))
               for reason, n in sorted(per.items())]
    parts.append("<h2>Drops and dead letters</h2>")
    parts.append(_table("reasons", ["kind", "stage", "reason", "records"], reasons,
                        [f"{k}/{s}/{r}" for k, s, r, _ in reasons]))
    refresh = manifest.run.get("refresh")
    if refresh:
        parts.append("<h2>Incremental refresh</h2>")
        flat = [["previous", refresh.get("previous") or "(none)"], ["units reused", refresh["units_reused"]],
                ["units processed", refresh["units_processed"]], ["units removed", refresh["units_removed"]],
                ["pages carried", refresh["pages_carried"]]]
        flat += [[f"processed: {reason}", n] for reason, n in refresh["processed_by_reason"].items()]
        parts.append(_table("refresh", ["", "value"], flat))
    titles = {"mix": "Pages per source, domain, task and language", "label_lengths": "Label lengths",
              "drops": "Drops and dead letters by stage and reason", "unit_tests": "Unit tests",
              "sizes_dedup": "Image sizes and dedup clusters"}
    parts.append("<h2>Plots</h2>")
    for name, uri in figures.items():
        parts.append(f"<h3>{html.escape(titles[name])}</h3><img class='plot' alt='{html.escape(name)}' "
                     f"src='{html.escape(uri)}'>")
    parts.append(f"<h2>Sample pages</h2><p>{len(gallery)} pages: the first by id of each source.</p>")
    for source in sorted({r["source"] for r in gallery}):
        parts.append(f"<h3>{html.escape(source)}</h3>")
        for row in (r for r in gallery if r["source"] == source):
            tests = _checked_tests(row)
            items = "".join(f"<li class='{'pass' if ok else 'fail'}'>{'pass' if ok else 'FAIL'} "
                            f"{html.escape(kind)}: {html.escape(why)}</li>" for kind, ok, why in tests)
            failed = sum(1 for _, ok, _ in tests if not ok)
            summary = (f"<summary>{len(tests)} unit tests on the label: <span class='passed'>{len(tests) - failed}"
                       f"</span> pass, <span class='failed'>{failed}</span> fail</summary>")
            label = row.get("response") or ""
            shown = html.escape(label[:LABEL_CHARS]) + ("…" if len(label) > LABEL_CHARS else "")
            parts.append(
                f"<div class='card' data-id='{html.escape(row['id'], quote=True)}'><img class='thumb' "
                f"alt='{html.escape(row['source_id'], quote=True)}' src='{html.escape(_thumbnail(row['image']))}'>"
                f"<div style='flex:1'><b>{html.escape(row['source_id'])}</b> "
                f"page {html.escape(str(row['page_number']))} · {html.escape(row['domain'])} · "
                f"{html.escape(row['task'])} · {html.escape(row['language'])} · "
                f"{html.escape(str(row['width']))}×{html.escape(str(row['height']))}"
                f"<div class='label'>{shown}</div>"
                + (f"<details class='tests'{' open' if failed else ''}>{summary}<ul>{items}</ul></details>"
                   if tests else "<p>no unit tests</p>") + "</div></div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def build_report(corpus: str, out: str, per_source: int = 4) -> str:
    """Write ``<out>/index.html`` for the corpus at ``corpus``; return its path. A shard missing or not
    the one the manifest lists (rows, bytes, sha256) is a ``ReportError`` naming it, before anything is read."""
    manifest = io.read_run_manifest(corpus)
    problems = shard_problems(corpus, manifest.shards)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ReportError(f"corpus shard {problems[0]}{more}: {corpus} is not the run its manifest.json describes "
                          f"(a rerun into it failed or was stopped, or its files changed)")
    stats = collect(corpus, manifest, per_source)
    chosen = stats.gallery(per_source)
    page = render_html(corpus, manifest, stats, gallery_rows(corpus, manifest, chosen))
    path = io.join(out, "index.html")
    io.write_bytes_atomic(path, page.encode("utf-8"))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="out/corpus", help="a corpus run's output folder (manifest.json)")
    parser.add_argument("--out", default="out/report", help="folder to write index.html to")
    parser.add_argument("--per-source", type=int, default=4, help="sample pages shown per source")
    args = parser.parse_args(argv)
    try:
        path = build_report(args.corpus, args.out, args.per_source)
    except (ManifestError, ReportError) as exc:  # no corpus run there, or not the one its manifest describes
        print(f"report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
