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
