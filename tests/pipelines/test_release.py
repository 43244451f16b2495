"""The Hub-ready release (``pipelines/release.py``): shards, card and checks on a small corpus, and the
push with huggingface_hub's real client against ``tests/hub_server.py`` (a fake of the Hub's HTTP API
in its own process on 127.0.0.1): happy path, rerun, several commits, 429, refused cards and tokens,
a push killed midway, and the pushed files read back over ``hf://``.

Pushes that must see ``HF_ENDPOINT`` (the CLI, ``pipelines.io``'s ``hf://`` reads) run as
subprocesses: huggingface_hub reads it once, at import; the others call ``push_release`` with the
endpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.release import (
    CARD_KEYS,
    PushRefused,
    ReleaseConfig,
    build_release,
    card_metadata_of,
    check_release,
    push_release,
    release_files,
)
from pipelines.write import RowGroupCuts, row_bytes, row_groups
from schemas.manifest import CountEvent, RunManifest
from schemas.page import PAGE_SCHEMA
from tests.helpers import REPO, corpus_record
from tests.hub_server import Faults, hub_server
from tests.object_stores import free_port

REPO_ID = "pagemill/release"
SOURCES = {"alpha": ("cc0-1.0", "en", "documents"), "beta": ("odc-by", "fr", "books")}


def write_corpus(root: Path, pages: dict[tuple[str, str], int], licences: dict[str, str] | None = None) -> Path:
    """A corpus folder as a run writes it: ``data/<split>-00000-of-00001.parquet`` (ids sorted) and a
    balanced ``manifest.json`` (a ``short`` stage that dropped 2 pages per source, then ``write``)."""
    records = {}
    for (source, split), n in pages.items():
        licence, language, domain = SOURCES[source]
        for i in range(n):
            record = corpus_record(source, domain, i, split=split)
            records.setdefault(split, []).append(dataclasses.replace(
                record, license=(licences or {}).get(source, licence), language=language))
    (root / "data").mkdir(parents=True)
    shards, events = [], []
    for split, rows in sorted(records.items()):
        name = f"data/{split}-00000-of-00001.parquet"
        table = pa.Table.from_pylist([r.to_row() for r in sorted(rows, key=lambda r: r.id)], schema=PAGE_SCHEMA)
        pq.write_table(table, root / name, row_group_size=16)
        shards.append({"file": name, "split": split, "rows": len(rows)})
    for source in sorted({s for s, _ in pages}):
        n = sum(v for (s, _), v in pages.items() if s == source)
        events += [CountEvent("short", source, "in", "", n + 2), CountEvent("short", source, "out", "", n),
                   CountEvent("short", source, "emitted", "", n),
                   CountEvent("short", source, "dropped", "short_response", 2)]
        events += [CountEvent("write", source, kind, "", n) for kind in ("in", "out", "emitted")]
    config = {"sources": [{"name": s, "kind": "local_folder", "license": SOURCES[s][0], "domain": SOURCES[s][2],
                           "paths": [f"/data/{s}"]} for s in sorted({s for s, _ in pages})]}
    manifest = RunManifest.from_events(events, ["short", "write"], run={"config": config}, shards=shards)
    assert manifest.imbalances() == []
    (root / "manifest.json").write_text(manifest.to_json())
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), {("alpha", "train"): 30, ("beta", "train"): 20,
                                                            ("alpha", "eval"): 5})


def corpus_rows(corpus: Path, split: str) -> list[dict]:
    return pq.read_table(corpus / "data" / f"{split}-00000-of-00001.parquet").to_pylist()


# --- the release folder ----------------------------------------------------------------------------


def test_release_shards_card_and_datasets_load(corpus, tmp_path):
    out = tmp_path / "release"
    cfg = ReleaseConfig(shard_bytes=60_000, row_group_bytes=20_000, row_group_rows=7)
    release = build_release(str(corpus), str(out), cfg)

    # Shards named as push_to_hub names them, each within its caps, page index written.
    names = sorted(p.name for p in (out / "data").iterdir())
    count = sum(1 for n in names if n.startswith("train-"))
    assert count > 1 and names == sorted(["eval-00000-of-00001.parquet"]
                                         + [f"train-{i:05d}-of-{count:05d}.parquet" for i in range(count)])
    for shard in release.shards:
        path = out / shard["file"]
        meta = pq.ParquetFile(path).metadata
        assert shard["uncompressed_bytes"] <= cfg.shard_bytes and shard["bytes"] == path.stat().st_size
        groups = [pq.ParquetFile(path).read_row_group(i) for i in range(meta.num_row_groups)]
        assert all(1 <= g.num_rows <= cfg.row_group_rows for g in groups)
        assert all(g.num_rows == 1 or sum(row_bytes(g).to_pylist()) <= cfg.row_group_bytes for g in groups)
        assert all(meta.row_group(i).column(j).has_offset_index
                   for i in range(meta.num_row_groups) for j in range(meta.num_columns))
        assert meta.row_group(0).column(0).has_column_index  # id: min/max per page

    # The card: every key, licences differ -> other + table, languages, sizes, configs per split.
    text = (out / "README.md").read_text()
    meta = card_metadata_of(text)
    assert set(CARD_KEYS) <= set(meta)
    assert meta["license"] == "other" and meta["task_categories"] == ["image-to-text"]
    assert meta["language"] == ["en", "fr"] and meta["size_categories"] == ["n<1K"]
    assert meta["configs"] == [{"config_name": "default", "default": True, "data_files": [
        {"split": "eval", "path": "data/eval-*"}, {"split": "train", "path": "data/train-*"}]}]
    assert {"name": "image", "dtype": "image"} in meta["dataset_info"]["features"]
    assert {s["name"]: s["num_examples"] for s in meta["dataset_info"]["splits"]} == {"train": 50, "eval": 5}
    assert "| alpha | cc0-1.0 | 35 |" in text and "| beta | odc-by | 20 |" in text  # the licence table
    assert "| short | dropped | `short_response` | 4 |" in text and "| `present` | 55 |" in text
    assert check_release(str(out))["license"] == "other"

    # datasets loads the folder: both splits, image an Image, the corpus's rows in id order.
    loaded = datasets.load_dataset(str(out))
    assert sorted(loaded) == ["eval", "train"]
    assert isinstance(loaded["train"].features["image"], datasets.Image)
    for split in ("train", "eval"):
        local = corpus_rows(corpus, split)
        assert loaded[split].num_rows == len(local)
        assert loaded[split]["id"] == [r["id"] for r in local]
    first = loaded["train"].cast_column("image", datasets.Image(decode=False))[0]
    assert first["image"]["bytes"] == corpus_rows(corpus, "train")[0]["image"]["bytes"]


def test_rerun_writes_identical_files_and_removes_stale_shards(corpus, tmp_path):
    out = tmp_path / "release"
    cfg = ReleaseConfig(shard_bytes=60_000, row_group_rows=7)
    build_release(str(corpus), str(out), cfg)
    before = {p: hashlib.sha256((out / p).read_bytes()).hexdigest() for p, _ in release_files(str(out))}
    (out / "data" / "train-00007-of-00009.parquet").write_bytes(b"an older release's shard")
    build_release(str(corpus), str(out), cfg)
    after = {p: hashlib.sha256((out / p).read_bytes()).hexdigest() for p, _ in release_files(str(out))}
    assert after == before


def test_cli_without_a_corpus_run_or_with_one_that_does_not_balance_says_so(corpus, tmp_path, capsys):
    from pipelines.release import main

    assert main(["--corpus", str(tmp_path / "none"), "--out", str(tmp_path / "rel")]) == 2
    assert f"no run manifest at {tmp_path / 'none' / 'manifest.json'}" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    body = json.loads((corpus / "manifest.json").read_text())
    body["stages"]["write"]["alpha"]["out"] -= 1  # a page lost between in and out
    (broken / "manifest.json").write_text(json.dumps(body))
    assert main(["--corpus", str(broken), "--out", str(tmp_path / "rel")]) == 2
    assert "does not balance" in capsys.readouterr().err
    assert not (tmp_path / "rel" / "README.md").exists()
    assert main(["--out", str(tmp_path / "none"), "--skip-build"]) == 2
    assert f"no release at {tmp_path / 'none'} (no README.md)" in capsys.readouterr().err


def test_an_empty_corpus_or_a_broken_release_folder_is_never_published(corpus, tmp_path, capsys):
    """A build that fails must not leave a folder --skip-build --push would publish: a push replaces the Hub's
    data/ (it deleted every shard there), and --skip-build checked only the card."""
    from pipelines.release import main

    out = tmp_path / "rel"
    assert main(["--corpus", str(corpus), "--out", str(out)]) == 0
    empty = tmp_path / "empty"
    (empty / "data").mkdir(parents=True)
    (empty / "manifest.json").write_text(RunManifest.from_events([], ["write"], run={"config": {}}).to_json())
    before = sorted(p.name for p in (out / "data").iterdir())
    assert main(["--corpus", str(empty), "--out", str(out)]) == 2
    assert "holds no pages: nothing to release" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "data").iterdir()) == before  # the earlier release stays whole
    next((out / "data").iterdir()).unlink()
    assert main(["--out", str(out), "--skip-build", "--repo-id", REPO_ID, "--push"]) == 2
    err = capsys.readouterr().err
    assert "1 of them missing" in err and "rebuild the release" in err


def test_a_malformed_repo_id_is_refused_before_any_work(corpus, tmp_path, capsys):
    from pipelines.release import main

    with pytest.raises(SystemExit) as exited:
        main(["--corpus", str(corpus), "--out", str(tmp_path / "rel"), "--repo-id", "bad/repo/id", "--push"])
    assert exited.value.code == 2 and "Repo id must be in the form" in capsys.readouterr().err
    assert not (tmp_path / "rel").exists()


def test_cli_names_an_unreadable_shard_and_leaves_other_errors_their_traceback(corpus, tmp_path, capsys,
                                                                              monkeypatch):
    """A damaged corpus is the user's to mend (one line, exit 2, naming the shard); a ValueError that is
    not one of the release's own checks is a bug and must not be reported as "release failed"."""
    import shutil

    import pipelines.release as release

    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    shard = damaged / "data" / "train-00000-of-00001.parquet"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert release.main(["--corpus", str(damaged), "--out", str(tmp_path / "rel")]) == 2
    err = capsys.readouterr().err
    assert "release failed" in err and "corpus shard data/train-00000-of-00001.parquet cannot be read" in err
    assert len(err.strip().splitlines()) == 1

    def buggy(*args, **kwargs):
        raise ValueError("a bug, not a check")

    monkeypatch.setattr(release, "build_release", buggy)
    with pytest.raises(ValueError, match="a bug, not a check"):
        release.main(["--corpus", str(corpus), "--out", str(tmp_path / "rel2")])


def test_one_hub_licence_is_the_cards_and_unknown_ids_make_it_other(tmp_path):
    same = write_corpus(tmp_path / "same", {("alpha", "train"): 3, ("beta", "train"): 2},
                        {"alpha": "cc-by-4.0", "beta": "cc-by-4.0"})
    build_release(str(same), str(tmp_path / "r1"))
    assert card_metadata_of((tmp_path / "r1" / "README.md").read_text())["license"] == "cc-by-4.0"
    odd = write_corpus(tmp_path / "odd", {("alpha", "train"): 3}, {"alpha": "public-domain"})
    build_release(str(odd), str(tmp_path / "r2"))
    meta = card_metadata_of((tmp_path / "r2" / "README.md").read_text())
    assert meta["license"] == "other" and meta["license_name"] == "pagemill-per-source"


def test_row_group_cuts_cap_bytes_and_rows_across_batches():
    cuts = RowGroupCuts(max_bytes=10, max_rows=3)
    assert cuts.feed([4, 4]) == [] and cuts.feed([4, 1, 1, 1, 20, 2]) == [0, 3, 4, 5]
    assert row_groups(pa.array([4, 4, 4, 30, 1]), 10, 3) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert row_groups(pa.array([], pa.int64()), 10, 3) == [(0, 0)]


# --- push ------------------------------------------------------------------------------------------


def hub_env(endpoint: str, home: Path, token: str | None = "write-token") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k != "HUGGING_FACE_HUB_TOKEN"}
    env |= {"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    return env | ({"HF_TOKEN": token} if token else {})


def commits(log: Path) -> list[str]:
    """The summaries of the commits the server made, in order."""
    return re.findall(r'\] commit [0-9a-f]{40} files=\d+ bytes=\d+ "(.*)"', log.read_text())


def requests(log: Path) -> list[tuple[str, str, int]]:
    return [(m, p, int(s)) for m, p, s in re.findall(r'"(GET|HEAD|POST) (\S+)" (\d{3}) ', log.read_text())]


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def release(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "release"
    build_release(str(corpus), str(out), ReleaseConfig(shard_bytes=60_000), repo_id=REPO_ID)
    return out


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> Path:
    """A release of 300 one-page shards (+ README, manifest, release.json): over the client's 256
    files per preupload call and 250 per first commit."""
    root = tmp_path_factory.mktemp("many")
    corpus = write_corpus(root / "corpus", {("alpha", "train"): 300})
    build_release(str(corpus), str(root / "release"), ReleaseConfig(shard_bytes=1))
    assert len(release_files(str(root / "release"))) == 303
    return root / "release"


def run_cli(*args: str, env: dict[str, str], timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.release", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_push_creates_the_repo_then_a_rerun_commits_nothing_and_hf_reads_it_back(release, tmp_path, monkeypatch):
    log = tmp_path / "hub.log"
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token") as endpoint:
        env = hub_env(endpoint, tmp_path / "hf")
        listing = io.StringIO()
        assert push_release(str(release), REPO_ID, dry_run=True, out=listing, endpoint=endpoint) is None
        assert f"dry run: would upload {len(tree(release))} files" in listing.getvalue()
        assert not (tmp_path / "hub").exists() and not any(m == "POST" for m, _, _ in requests(log))

        monkeypatch.setenv("HF_TOKEN", "write-token")
        push_release(str(release), REPO_ID, endpoint=endpoint)
        assert len(commits(log)) == 1
        asked = [(m, p) for m, p, _ in requests(log) if m == "POST"]
        assert asked == [("POST", "/api/repos/create"), ("POST", "/api/validate-yaml"),
                         ("POST", f"/api/datasets/{REPO_ID}/preupload/main"),
                         ("POST", f"/api/datasets/{REPO_ID}/commit/main")]
        assert tree(tmp_path / "hub") == tree(release)

        again = run_cli("--out", str(release), "--skip-build", "--repo-id", REPO_ID, "--push", env=env)  # HF_ENDPOINT
        assert again.returncode == 0 and f"pushed {release} to datasets/{REPO_ID}" in again.stdout, again.stderr
        assert len(commits(log)) == 1 and requests(log)[-1][2] == 200  # preupload found every file there

        # pipelines.io over hf:// sees the release as it is locally, byte for byte
        script = ("import hashlib, json, sys; from pipelines import io; root = sys.argv[1]; "
                  "files = io.match(root + '**'); "
                  "print(json.dumps({f[len(root):]: hashlib.sha256(io.read_bytes(f)).hexdigest() for f in files}))")
        read = subprocess.run([sys.executable, "-c", script, f"hf://datasets/{REPO_ID}/"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert read.returncode == 0, read.stderr[-3000:]
        assert json.loads(read.stdout.splitlines()[-1]) == tree(release)


def test_load_dataset_of_the_pushed_repo_gives_the_release_rows(release, tmp_path, monkeypatch):
    """What a user of the release runs: ``datasets.load_dataset("<org>/<name>")`` over the Hub's HTTP API (the card's
    ``configs`` name the splits' files), with no code of pagemill's on the reading side."""
    log = tmp_path / "hub.log"
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token") as endpoint:
        monkeypatch.setenv("HF_TOKEN", "write-token")
        push_release(str(release), REPO_ID, endpoint=endpoint)
        script = ("import datasets, json, sys; d = datasets.load_dataset(sys.argv[1]); "
                  "print(json.dumps({k: [v.num_rows, sorted(v['id']), sorted(v.features)] for k, v in d.items()}))")
        read = subprocess.run([sys.executable, "-c", script, REPO_ID], cwd=REPO, env=hub_env(endpoint, tmp_path / "hf",
                              token=None), capture_output=True, text=True, timeout=300)
        assert read.returncode == 0, read.stderr[-3000:]
    loaded = json.loads(read.stdout.splitlines()[-1])
    local = {}
    for split in ("train", "eval"):
        table = pq.read_table([str(f) for f in sorted((release / "data").glob(f"{split}-*.parquet"))])
        local[split] = [table.num_rows, sorted(table.column("id").to_pylist()), sorted(table.column_names)]
    assert loaded == local
    assert any(m == "HEAD" and "/resolve/" in p and s == 200 for m, p, s in requests(log))


def test_a_push_with_fewer_shards_removes_the_old_ones_from_the_hub(corpus, release, tmp_path, monkeypatch):
    log = tmp_path / "hub.log"
    monkeypatch.setenv("HF_TOKEN", "write-token")
    fewer = tmp_path / "fewer"
    build_release(str(corpus), str(fewer), ReleaseConfig(shard_bytes=10_000_000), repo_id=REPO_ID)
    shards = [f for f in tree(release) if f.startswith("data/")]
    assert len([f for f in tree(fewer) if f.startswith("data/")]) < len(shards)
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token") as endpoint:
        push_release(str(release), REPO_ID, endpoint=endpoint)
        assert tree(tmp_path / "hub") == tree(release)
        push_release(str(fewer), REPO_ID, endpoint=endpoint)
        assert tree(tmp_path / "hub") == tree(fewer)  # no shard of the first push is left to read twice


def test_more_than_256_files_go_in_several_commits_through_429s(many_files, tmp_path, monkeypatch):
    log = tmp_path / "hub.log"
    monkeypatch.setenv("HF_TOKEN", "write-token")
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token",
                    faults=Faults(fail_commits=2, fail_status=429, retry_after=1)) as endpoint:
        push_release(str(many_files), REPO_ID, ReleaseConfig(commit_message="v1"), endpoint=endpoint)
    assert commits(log) == ["v1", "v1 (part 2)"]
    statuses = [s for _, p, s in requests(log) if "/commit/" in p]
    assert statuses == [429, 429, 200, 200]  # Retry-After honoured, then the commits went through
    assert sum(1 for _, p, _ in requests(log) if "/preupload/" in p) == 2
    assert tree(tmp_path / "hub") == tree(many_files)


def test_a_push_killed_midway_completes_when_rerun(many_files, tmp_path):
    log = tmp_path / "hub.log"
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, faults=Faults(commit_delay=1.0)) as endpoint:
        env = hub_env(endpoint, tmp_path / "hf", token=None)
        push = subprocess.Popen([sys.executable, "-m", "pipelines.release", "--out", str(many_files), "--skip-build",
                                 "--repo-id", REPO_ID, "--push"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not commits(log) and push.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        push.send_signal(signal.SIGKILL)  # after the first commit, during the second (1 s to apply)
        push.wait(10)
        landed = commits(log)
        assert len(landed) == 1, landed
        assert 0 < len(tree(tmp_path / "hub")) < 303

        push_release(str(many_files), REPO_ID, endpoint=endpoint)  # the same call again
    assert tree(tmp_path / "hub") == tree(many_files)
    files = [int(n) for n in re.findall(r"commit [0-9a-f]{40} files=(\d+)", log.read_text())]
    assert len(files) >= 2 and sum(files) == 303  # the rerun committed only what had not landed


def test_invalid_cards_are_refused_before_anything_is_committed(release, tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    for path, _ in release_files(str(release)):
        (bad / path).parent.mkdir(parents=True, exist_ok=True)
        (bad / path).write_bytes((release / path).read_bytes())
    text = (release / "README.md").read_text()
    log = tmp_path / "hub.log"
    monkeypatch.setenv("HF_TOKEN", "write-token")
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token") as endpoint:
        # parses, has every key, but its licence is no Hub id: the Hub's validate-yaml refuses it
        (bad / "README.md").write_text(text.replace("license: other", "license: odc_by", 1))
        with pytest.raises(PushRefused, match=r"(?s)refused the dataset card.*odc_by"):
            push_release(str(bad), REPO_ID, endpoint=endpoint)
        assert ("POST", "/api/validate-yaml", 400) in requests(log)
        # does not parse: the CLI stops before any request
        (bad / "README.md").write_text(text.replace("license: other", "license: [other", 1))
        before = len(requests(log))
        run = run_cli("--out", str(bad), "--skip-build", "--repo-id", REPO_ID, "--push",
                      env=hub_env(endpoint, tmp_path / "hf"))
        assert run.returncode == 2 and "YAML does not parse" in run.stderr
        assert len(requests(log)) == before
    assert commits(log) == [] and not any("/preupload/" in p for _, p, _ in requests(log))


def test_credentials_and_storage_limits_abort_with_a_clear_message(release, tmp_path, monkeypatch):
    log = tmp_path / "hub.log"
    with hub_server(tmp_path / "hub", REPO_ID, free_port(), log, token="write-token",
                    faults=Faults(quota_bytes=10_000)) as endpoint:
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored token either
        with pytest.raises(PushRefused, match=r"\(401\).*Set HF_TOKEN"):
            push_release(str(release), REPO_ID, endpoint=endpoint)
        monkeypatch.setenv("HF_TOKEN", "read-token")
        with pytest.raises(PushRefused, match=r"no write access.*\(403\)"):
            push_release(str(release), REPO_ID, endpoint=endpoint)
        monkeypatch.setenv("HF_TOKEN", "write-token")
        with pytest.raises(PushRefused, match=r"storage limit.*\(403\)"):
            push_release(str(release), REPO_ID, endpoint=endpoint)
    assert commits(log) == []


def test_the_config_hash_leaves_out_where_the_run_wrote():
    """Each scheduled refresh writes a new folder: the same config and inputs give the same card."""
    from pipelines.release import manifest_config_hash

    def manifest(output: str, short: int) -> RunManifest:
        config = {"run": {"output": output}, "clean": {"stages": [{"name": "short", "min_tokens": short}]}}
        return RunManifest(run={"config": config}, stage_order=[], stages={})

    assert manifest_config_hash(manifest("out/a", 64)) == manifest_config_hash(manifest("releases/v2", 64))
    assert manifest_config_hash(manifest("out/a", 64)) != manifest_config_hash(manifest("out/a", 32))


def test_a_corpus_whose_shards_are_not_its_manifests_is_refused_before_out_is_touched(corpus, tmp_path, capsys):
    """An interrupted rerun into a corpus folder can leave new shards under an older manifest (same page
    count): the build checks each shard's rows, bytes and sha256 against the manifest first."""
    import shutil

    from pipelines.io import sha256
    from pipelines.release import main

    changed = tmp_path / "changed"
    shutil.copytree(corpus, changed)
    body = json.loads((changed / "manifest.json").read_text())
    for shard in body["shards"]:  # what a run's manifest records of each shard
        path = changed / shard["file"]
        shard.update(bytes=path.stat().st_size, sha256=sha256(str(path)))
    (changed / "manifest.json").write_text(json.dumps(body))
    out = tmp_path / "rel"
    assert main(["--corpus", str(changed), "--out", str(out)]) == 0
    before = tree(out)
    shard = changed / "data" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)  # the same rows, written again: another file
    pq.write_table(table.replace_schema_metadata(PAGE_SCHEMA.metadata), shard, row_group_size=5)
    assert main(["--corpus", str(changed), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "corpus shard data/train-00000-of-00001.parquet" in err and "rerun the corpus" in err
    assert tree(out) == before  # the earlier release stays whole


def test_a_build_that_fails_midway_leaves_no_release_skip_build_accepts(corpus, tmp_path, capsys, monkeypatch):
    """release.json is removed when a build starts and written last, with each shard's sha256: a build that
    fails (or is killed) after its shards are renamed in is refused by --skip-build, and so is a shard
    changed after the build."""
    import pipelines.release as release

    out = tmp_path / "rel"
    assert release.main(["--corpus", str(corpus), "--out", str(out)]) == 0
    summary = json.loads((out / "release.json").read_text())
    assert all(s["sha256"] == hashlib.sha256((out / s["file"]).read_bytes()).hexdigest() for s in summary["shards"])
    other = write_corpus(tmp_path / "other", {("alpha", "train"): 12})

    def killed(*args, **kwargs):
        raise release.ReleaseError("stopped after the shards")

    with monkeypatch.context() as m:
        m.setattr(release, "render_card", killed)
        assert release.main(["--corpus", str(other), "--out", str(out)]) == 2
    assert not (out / "release.json").exists() and (out / "README.md").exists()
    capsys.readouterr()
    assert release.main(["--out", str(out), "--skip-build", "--repo-id", REPO_ID]) == 2
    assert "no release.json" in capsys.readouterr().err

    assert release.main(["--corpus", str(corpus), "--out", str(out)]) == 0
    shard = out / summary["shards"][0]["file"]
    table = pq.read_table(shard)
    pq.write_table(table, shard, row_group_size=3)  # the same rows, another file
    assert release.main(["--out", str(out), "--skip-build", "--repo-id", REPO_ID]) == 2
    assert "1 of them missing or changed" in capsys.readouterr().err


def test_an_out_that_is_the_corpus_or_inside_it_or_holds_it_is_refused_before_anything(corpus, tmp_path, capsys):
    """A build into the corpus folder deleted its shards as an older release's; a push of a folder holding
    the corpus would publish its dead letters and dedup losers."""
    import shutil

    from pipelines.release import main

    home = tmp_path / "home"
    inner = home / "corpus"
    shutil.copytree(corpus, inner)
    (inner / "dead_letter").mkdir()
    (inner / "dead_letter" / "write-00000.parquet").write_bytes(b"dead letters")
    (inner / ".lock").write_text("")
    link = tmp_path / "link"
    link.symlink_to(inner)
    before = tree(home)
    for out, says in ((inner, "is the corpus folder"), (link, "is the corpus folder"), (inner / "release", "inside"),
                      (home, "holds the corpus folder"), (inner / ".." / "corpus", "is the corpus folder")):
        assert main(["--corpus", str(inner), "--out", str(out)]) == 2, out
        err = capsys.readouterr().err
        assert says in err and "apart from its corpus" in err and len(err.strip().splitlines()) == 1
        assert tree(home) == before
    assert main(["--corpus", str(link), "--out", str(home), "--skip-build", "--repo-id", REPO_ID]) == 2
    captured = capsys.readouterr()
    assert "holds the corpus folder" in captured.err and captured.out == ""  # no dry-run listing
    assert main(["--corpus", str(inner), "--out", str(tmp_path / "apart")]) == 0  # a sibling is fine
    assert tree(home) == before


def test_an_unknown_compression_is_refused_in_one_line_before_the_release_is_touched(corpus, tmp_path, capsys):
    from pipelines.release import main

    assert ReleaseConfig(compression="NONE").compression == "NONE" and ReleaseConfig(compression="snappy")
    with pytest.raises(ValueError, match="compression: unknown or unavailable Parquet codec 'zstandard'"):
        ReleaseConfig(compression="zstandard")
    out = tmp_path / "rel"
    assert main(["--corpus", str(corpus), "--out", str(out)]) == 0
    before = tree(out)
    capsys.readouterr()
    for codec in ("zstandard", "bz2", ""):  # bz2: an Arrow codec, not a Parquet one
        with pytest.raises(SystemExit) as exited:
            main(["--corpus", str(corpus), "--out", str(out), "--set", f"compression={codec}"])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and f"Parquet codec {codec!r}" in err and "Traceback" not in err
        assert tree(out) == before  # release.json and the shards as they were, no .partial
