"""The corpus report (pipelines/report.py), opened in headless Chromium: it loads with no console
errors, every image (plots and thumbnails, all data: URIs) decodes, and its tables hold the manifest's numbers."""

from __future__ import annotations

import pytest

from pipelines import report
from schemas.browser import new_offline_page, shared_browser


@pytest.fixture(scope="module")
def opened(subset_run, tmp_path_factory):
    manifest, corpus = subset_run
    out = tmp_path_factory.mktemp("report")
    assert report.main(["--corpus", str(corpus), "--out", str(out), "--per-source", "2"]) == 0
    # the process's shared browser: the synthetic pages of the corpus run were rendered with it
    page = new_offline_page(shared_browser(), [out], viewport=(1200, 900))
    messages, failures = [], []
    page.on("console", lambda m: messages.append((m.type, m.text)))
    page.on("pageerror", lambda e: messages.append(("pageerror", str(e))))
    page.on("requestfailed", lambda r: failures.append(r.url[:80]))
    page.goto((out / "index.html").as_uri(), wait_until="load")
    yield manifest, out, page, messages, failures
    page.context.close()


def cells(page, table_id: str) -> dict[str, list[str]]:
    """data-key of each row -> its cells' text."""
    return page.evaluate(
        """id => Object.fromEntries(Array.from(document.querySelectorAll(`#${id} tbody tr`)).map(
               tr => [tr.dataset.key, Array.from(tr.cells).map(td => td.textContent)]))""", table_id)


def test_report_is_one_self_contained_file_with_no_console_errors(opened):
    _, out, page, messages, failures = opened
    assert [p.name for p in out.iterdir()] == ["index.html"]
    assert page.evaluate("Array.from(document.querySelectorAll('[src]')).every(e => e.src.startsWith('data:'))")
    assert [m for m in messages if m[0] in ("error", "pageerror", "warning")] == []
    assert failures == []


def test_every_image_loads(opened):
    _, _, page, _, _ = opened
    images = page.evaluate("Array.from(document.images).map(i => [i.className, i.complete, i.naturalWidth])")
    assert sum(1 for c, _, _ in images if c == "plot") == 5
    assert sum(1 for c, _, _ in images if c == "thumb") > 0
    assert all(complete and width > 0 for _, complete, width in images), images


def test_tables_hold_the_manifests_numbers(opened):
    manifest, _, page, _, _ = opened
    totals = cells(page, "totals")
    assert int(totals["written"][1]) == manifest.records_written
    assert int(totals["in"][1]) == manifest.records_in
    assert int(totals["dropped"][1]) == manifest.records_dropped
    assert int(totals["dead_lettered"][1]) == manifest.records_dead
    stages = cells(page, "stages")
    for stage in manifest.stage_order:
        for source, c in manifest.stages[stage].items():
            assert [int(x) for x in stages[f"{stage}/{source}"][2:]] == [c.inputs, c.out, c.emitted, c.n_dropped,
                                                                         c.n_dead]
    reasons = cells(page, "reasons")
    for stage in manifest.stage_order:
        for reason, n in manifest.totals(stage).dropped.items():
            assert int(reasons[f"dropped/{stage}/{reason}"][3]) == n


def test_gallery_shows_each_source_with_labels_and_checked_unit_tests(opened):
    manifest, _, page, _, _ = opened
    sources = page.evaluate("Array.from(document.querySelectorAll('h3')).map(h => h.textContent)")
    written = {s for s in manifest.sources if manifest.stages["dedup"].get(s) and manifest.stages["dedup"][s].out}
    assert written <= set(sources)
    synthetic = page.evaluate(
        """Array.from(document.querySelectorAll('.card details.tests summary')).map(s => [
               +s.querySelector('.passed').textContent, +s.querySelector('.failed').textContent])""")
    assert synthetic and all(passed > 0 and failed == 0 for passed, failed in synthetic)  # synth labels pass
    labels = page.evaluate("Array.from(document.querySelectorAll('.card .label')).map(l => l.textContent.length)")
    assert labels and all(n > 0 for n in labels)


def test_a_failing_unit_test_is_reported_as_such():
    row = {"response": "Hello world", "unit_tests": ['{"pdf": "x.pdf", "page": 1, "id": "t1", "type": "present", '
                                                      '"text": "Goodbye moon"}',
                                                      '{"pdf": "x.pdf", "page": 1, "id": "t2", "type": "present", '
                                                      '"text": "Hello world"}']}
    assert [(kind, ok) for kind, ok, _ in report._checked_tests(row)] == [("present", False), ("present", True)]


def test_a_box_stream_label_is_checked_as_its_convention_reads_it():
    test = '{"pdf": "x.pdf", "page": 1, "id": "t1", "type": "present", "text": "alpha beta"}'
    row = {"response": "<x_1><y_2>alpha<x_3><y_4>\n<x_1><y_5>beta<x_3><y_6>\n", "unit_tests": [test],
           "metadata": '{"instruct": {"convention": "nemotron_plain_bbox"}}'}
    assert [ok for _, ok, _ in report._checked_tests(row)] == [True]  # the boxes' texts, in order
    assert [ok for _, ok, _ in report._checked_tests({**row, "metadata": None})] == [False]


def test_cli_on_a_folder_without_a_run_manifest_says_so(tmp_path, capsys):
    assert report.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"no run manifest at {tmp_path / 'manifest.json'}" in err and "make corpus" in err
    (tmp_path / "manifest.json").write_text('{"run": {}}')
    assert report.main(["--corpus", str(tmp_path), "--out", str(tmp_path / "report")]) == 2
    assert "is not a pagemill run manifest" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()


# --- small corpora written directly (no corpus run): fast checks of what the report reads -----------


def small_corpus(root, pages=None, hashed: bool = False):
    """``tests/pipelines/test_release.write_corpus``'s corpus; ``hashed`` records each shard's bytes and
    sha256 in the manifest as a run does."""
    import json

    from pipelines.io import sha256
    from tests.pipelines.test_release import write_corpus

    corpus = write_corpus(root, pages or {("alpha", "train"): 30, ("beta", "train"): 20, ("alpha", "eval"): 5})
    if hashed:
        body = json.loads((corpus / "manifest.json").read_text())
        for shard in body["shards"]:
            path = corpus / shard["file"]
            shard.update(bytes=path.stat().st_size, sha256=sha256(str(path)))
        (corpus / "manifest.json").write_text(json.dumps(body))
    return corpus


def test_a_dedup_cluster_whose_losers_are_in_two_duplicates_files_counts_once(tmp_path):
    """The duplicates files are sharded by the loser's id: one cluster's losers can be in several."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines import io

    corpus = small_corpus(tmp_path / "corpus")
    losers = {"dropped/dedup-duplicates-00000-of-00002.parquet": [("l1", "k1"), ("l2", "k2")],
              "dropped/dedup-duplicates-00001-of-00002.parquet": [("l3", "k1"), ("l4", "k3"), ("l5", "k1")]}
    (corpus / "dropped").mkdir()
    for name, rows in losers.items():
        pq.write_table(pa.Table.from_pylist([{"id": i, "source": "alpha", "reason": "duplicate_image", "kept": k}
                                             for i, k in rows]), corpus / name)
    body = json.loads((corpus / "manifest.json").read_text())
    body["dropped_sample_files"] = sorted(losers)
    (corpus / "manifest.json").write_text(json.dumps(body))
    stats = report.collect(str(corpus), io.read_run_manifest(str(corpus)), 2)
    assert stats.clusters == {4: 1, 2: 2}  # k1 and its 3 losers; k2 and k3 with one each
    assert stats.duplicate_reasons == {"duplicate_image": 5}


def test_the_gallery_reads_whole_only_the_row_groups_holding_its_pages(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from pipelines import io

    corpus = small_corpus(tmp_path / "corpus", {("alpha", "train"): 30, ("beta", "eval"): 20})
    manifest = io.read_run_manifest(str(corpus))
    ids = report.collect(str(corpus), manifest, 1).gallery(1)
    assert len(ids) == 2
    whole, read = [], pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kwargs):
        table = read(self, i, columns=columns, **kwargs)
        if columns is None or "image" in columns:
            whole.append(table.num_rows)
        return table

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    rows = report.gallery_rows(str(corpus), manifest, ids)
    assert sorted(r["id"] for r in rows) == sorted(ids) and all(r["image"]["bytes"] for r in rows)
    groups = sum(pq.ParquetFile(corpus / s["file"]).num_row_groups for s in manifest.shards)
    assert groups == 4 and 1 <= len(whole) <= len(ids)  # not every row group of every shard


def test_the_gallery_shows_the_first_pages_by_id_of_a_source_in_two_splits(tmp_path):
    import pyarrow.parquet as pq

    from pipelines import io

    corpus = small_corpus(tmp_path / "corpus", {("alpha", "train"): 30, ("alpha", "eval"): 5})
    ids = sorted({i for f in (corpus / "data").glob("*.parquet") for i in pq.read_table(f).column("id").to_pylist()})
    chosen = report.collect(str(corpus), io.read_run_manifest(str(corpus)), 2).gallery(2)
    assert sorted(chosen) == ids[:2]  # not the eval shard's first two (listed first in the manifest)


def test_ids_and_source_ids_with_quotes_stay_inside_their_attributes(tmp_path):
    """Every attribute value is escaped: a shard's id or source_id cannot add attributes (script)."""
    from html.parser import HTMLParser

    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = small_corpus(tmp_path / "corpus", {("alpha", "train"): 3})
    shard = corpus / "data" / "train-00000-of-00001.parquet"
    rows = pq.read_table(shard).to_pylist()
    hostile_id, hostile_source_id = "p1' onmouseover='alert(1)' x='", 'x" onerror="alert(2)'
    rows[0].update(id=hostile_id, source_id=hostile_source_id)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(shard)), shard)
    assert report.main(["--corpus", str(corpus), "--out", str(tmp_path / "report"), "--per-source", "3"]) == 0

    class Attributes(HTMLParser):
        def __init__(self):
            super().__init__()
            self.seen: list[tuple[str, dict]] = []

        def handle_starttag(self, tag, attrs):
            self.seen.append((tag, dict(attrs)))

    parser = Attributes()
    parser.feed((tmp_path / "report" / "index.html").read_text())
    assert not [a for _, attrs in parser.seen for a in attrs if a.startswith("on") or a == "x"]
    cards = [attrs for tag, attrs in parser.seen if tag == "div" and attrs.get("class") == "card"]
    assert hostile_id in [c["data-id"] for c in cards] and len(cards) == 3
    assert hostile_source_id in [attrs["alt"] for tag, attrs in parser.seen if attrs.get("class") == "thumb"]


def test_a_missing_or_changed_shard_is_named_in_one_line_before_anything_is_written(tmp_path, capsys):
    import pyarrow.parquet as pq

    corpus = small_corpus(tmp_path / "corpus", hashed=True)
    out = tmp_path / "report"
    shard = corpus / "data" / "train-00000-of-00001.parquet"
    pq.write_table(pq.read_table(shard), shard, row_group_size=5)  # the same rows, another file
    assert report.main(["--corpus", str(corpus), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "corpus shard data/train-00000-of-00001.parquet" in err and len(err.strip().splitlines()) == 1
    shard.unlink()
    assert report.main(["--corpus", str(corpus), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "corpus shard data/train-00000-of-00001.parquet is missing" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
