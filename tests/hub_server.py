"""A fake of the Hugging Face Hub's HTTP API on 127.0.0.1, for tests: what ``huggingface_hub`` (its
``HfFileSystem`` and ``HfApi.upload_folder``, pointed here by ``HF_ENDPOINT``) calls to read and
to publish a dataset repo; the client is otherwise real, over HTTP. It serves one local folder as
the dataset repo ``datasets/<owner>/<name>`` at revision ``main``. The repo exists when the folder
does (or once ``POST /api/repos/create`` made it); each commit writes its files into the folder and
moves ``main`` to a new commit id, so reads see what was pushed. Only what the client calls is
implemented, in the Hub's shapes (``huggingface_hub.hf_api`` parses them).

Reads:

- ``GET /api/datasets/<repo>[/revision/<rev>]``: repo info (``id``, ``sha``, ``siblings``).
- ``GET /api/datasets/<repo>/tree/<rev>[/<folder>]?recursive=&expand=``: the folder's entries
  (``type``, ``oid``, ``size``, ``path``; ``lastCommit`` with ``expand``), cursor-paginated through
  a ``Link: <...>; rel="next"`` header like the Hub (1,000 entries a page, 50 with ``expand``).
- ``POST /api/datasets/<repo>/paths-info/<rev>``: the entries of the listed ``paths`` (form or JSON
  body), missing paths left out (``HfFileSystem.info`` asks for it with ``refresh`` or
  ``expand_info``; ``pipelines.io``'s calls are answered from tree listings).
- ``GET /datasets/<repo>/resolve/<rev>/<path>``: the file, with ``Accept-Ranges``, single
  ``Range`` requests (206 with ``Content-Range``; 416 past the end), ``ETag`` (the git blob id) and
  ``X-Repo-Commit``; ``HEAD`` answers the same headers with no body (``hf_hub_download``, which
  ``datasets.load_dataset`` uses, asks it first; ``<rev>`` may be a commit id).

Writes (what ``create_repo`` and ``upload_folder`` call; with ``hf_xet`` installed, the pipelined
multi-commit upload of huggingface_hub 2.x):

- ``POST /api/repos/create``: creates the served repo (409 when it exists, which ``exist_ok``
  accepts).
- ``POST /api/validate-yaml``: the README's YAML front matter must parse to a mapping whose
  ``license`` (a string or list) holds Hub licence ids (``LICENSES``), with ``configs`` a list of
  mappings each naming a ``config_name``; else 400 with ``errors``, as the Hub answers.
- ``POST /api/datasets/<repo>/preupload/<rev>``: every file is ``regular`` (inline in the commit, so
  no LFS or Xet storage is needed), with the ``oid`` (git blob id) of the file already at that path:
  the client skips unchanged files, which is how a rerun resumes.
- ``POST /api/datasets/<repo>/commit/<rev>``: NDJSON, a ``header`` line then ``file`` lines with
  base64 ``content`` (and ``deletedFile``); parsed and checked before any file is written, answered with
  ``commitOid`` and ``commitUrl``; a ``parentCommit`` that is not the head is refused (412).

With ``--token`` the writes need ``Authorization: Bearer <token>`` (401 without one, 403 with
another); reads stay anonymous. Faults a test can ask for: ``--fail-commits N`` answers the first N
commit POSTs with ``--fail-status`` (429 by default) and ``Retry-After: --retry-after``;
``--commit-delay`` sleeps before each commit is applied, and drops it if the client went away
meanwhile (so a client can be killed between commits); ``--quota-bytes`` refuses (403) a commit
that would make the repo larger (the Hub's storage limit).

Errors carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``),
which the client turns into its typed errors (and ``FileNotFoundError``). Files are served as plain
git blobs: no LFS pointers, Xet hashes or CDN redirects, which ``HfFileSystem.open`` does not need.
Every request is logged (method, path, status, ``Range``) to stderr, and every commit as a line
``commit <id> files=<n> bytes=<n> "<summary>"``, so a test can check what was asked for and made.

``python tests/hub_server.py --root DIR --repo owner/name --port N`` runs it; ``hub_server(...)``
starts it in its own process (so it does not share the GIL with an in-process pipeline) and yields
its endpoint URL.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import yaml

REVISION = "main"
PAGE_SIZE = 1000  # the Hub's tree page sizes
EXPAND_PAGE_SIZE = 50
COMMIT_DATE = "2024-01-01T00:00:00.000Z"
# The Hub's licence ids (hub-docs repositories-licenses.md), which validate-yaml checks a card's against.
LICENSES = frozenset("""
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib
pddl unknown other
""".split())


@dataclass(frozen=True)
class Faults:
    """What the server does wrong on purpose (see the module docstring)."""

    fail_commits: int = 0
    fail_status: int = 429
    retry_after: int = 1
    commit_delay: float = 0.0
    quota_bytes: int = 0  # 0: no limit


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the repo root, "/"-separated
    is_dir: bool
    size: int
    oid: str  # git blob id of a file; a stand-in tree id for a folder


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def snapshot(root: Path) -> dict[str, Entry]:
    """Every file and folder under ``root`` (hidden ones included), by repo path."""
    files = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
    return with_folders({rel: Entry(rel, False, p.stat().st_size, git_blob_id(p.read_bytes()))
                         for rel, p in files.items()})


def with_folders(files: dict[str, Entry]) -> dict[str, Entry]:
    """``files`` and the folders holding them, by repo path; a folder's id hashes its children's."""
    entries = {p: e for p, e in files.items() if not e.is_dir}
    children: dict[str, set[str]] = {}
    for rel in entries:
        parents = [str(p) for p in Path(rel).parents if str(p) != "."]
        for child, parent in zip([rel] + parents, parents):
            children.setdefault(parent, set()).add(child)
    for folder in sorted(children, key=lambda f: -f.count("/")):  # children first: a folder hashes its children
        oids = "".join(entries[c].oid for c in sorted(children[folder]))
        entries[folder] = Entry(folder, True, 0, hashlib.sha1(f"tree {folder}\0{oids}".encode()).hexdigest())
    return dict(sorted(entries.items()))


def commit_id(entries: dict[str, Entry]) -> str:
    return hashlib.sha1("".join(f"{e.path}\0{e.oid}\n" for e in entries.values()).encode()).hexdigest()


def entry_json(entry: Entry, commit: str, expand: bool) -> dict:
    out: dict = {"type": "directory" if entry.is_dir else "file", "oid": entry.oid, "size": entry.size,
                 "path": entry.path}
    if expand:
        out["lastCommit"] = {"id": commit, "title": "Upload folder", "date": COMMIT_DATE}
    return out


def is_true(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's HTTP client pools connections
    server: HubServer
    head_only = False  # a HEAD request: the GET's status and headers, no body

    # -- routing -----------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        parts, query = self._split()
        if parts[:2] == ["api", "datasets"]:
            self._api_get(parts[2:], query)
        elif parts[:1] == ["datasets"]:
            rest = self._repo_rest(parts[1:])
            if rest is None:
                return
            if rest[:1] == ["resolve"] and len(rest) >= 3:
                if self._revision_ok(rest[1]):
                    self._resolve("/".join(rest[2:]))
            else:
                self._error(404, None, "Not found")
        else:
            self._error(404, None, "Not found")

    def do_HEAD(self) -> None:  # noqa: N802 (what hf_hub_download asks before a GET: headers only)
        self.head_only = True
        try:
            self.do_GET()
        finally:
            self.head_only = False

    def _api_get(self, parts: list[str], query: dict[str, list[str]]) -> None:
        rest = self._repo_rest(parts)
        if rest is None:
            return
        if not rest:
            self._repo_info()
        elif rest[0] == "revision" and len(rest) == 2:
            if self._revision_ok(rest[1]):
                self._repo_info()
        elif rest[0] == "tree" and len(rest) >= 2:
            if self._revision_ok(rest[1]):
                self._tree("/".join(rest[2:]), query)
        else:
            self._error(404, None, "Not found")

    def do_POST(self) -> None:  # noqa: N802
        parts, _ = self._split()
        expected = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(expected)
        if len(body) < expected:  # the client went away mid-request: nothing is applied
            self.close_connection = True
            return
        if parts == ["api", "repos", "create"]:
            if self._writer_ok():
                self._create_repo(body)
            return
        if parts == ["api", "validate-yaml"]:
            self._validate_yaml(body)
            return
        if parts[:2] != ["api", "datasets"]:
            self._error(404, None, "Not found")
            return
        rest = self._repo_rest(parts[2:])
        if rest is None:
            return
        if rest[:1] == ["paths-info"] and len(rest) == 2:
            if self._revision_ok(rest[1]):
                self._paths_info(body)
        elif rest[:1] == ["preupload"] and len(rest) == 2:
            if self._writer_ok() and self._revision_ok(rest[1]):
                self._preupload(body)
        elif rest[:1] == ["commit"] and len(rest) == 2:
            if self._writer_ok() and self._revision_ok(rest[1]):
                self._commit(body)
        else:
            self._error(404, None, "Not found")

    def _split(self) -> tuple[list[str], dict[str, list[str]]]:
        """The URL path's segments, each percent-decoded on its own (the client sends a revision
        and a tree path as one segment, ``/`` encoded as ``%2F``), and the query."""
        url = urlsplit(self.path)
        return [unquote(s) for s in url.path.split("/") if s], parse_qs(url.query)

    def _repo_rest(self, parts: list[str]) -> list[str] | None:
        """What follows ``<owner>/<name>`` when that is the served repo; else answers 404."""
        if parts[:2] != self.server.repo_id.split("/") or not self.server.exists:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        return parts[2:]

    def _revision_ok(self, revision: str) -> bool:
        if revision in (REVISION, self.server.commit):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    def _writer_ok(self) -> bool:
        """With a token configured, a write needs it: 401 without credentials, 403 with others."""
        token = self.server.token
        given = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if not token or given == token:
            return True
        if not given:
            self._error(401, None, "Invalid credentials in Authorization header")
        else:
            self._error(403, None, f"You don't have the rights to write to dataset {self.server.repo_id}")
        return False

    def _client_gone(self) -> bool:
        """Whether the client closed its connection (a live one sends nothing while it waits)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # -- endpoints ---------------------------------------------------------------------------

    def _repo_info(self) -> None:
        owner = self.server.repo_id.split("/")[0]
        files = [e for e in self.server.entries.values() if not e.is_dir]
        self._json(200, {
            "_id": self.server.commit[:24], "id": self.server.repo_id, "author": owner, "sha": self.server.commit,
            "lastModified": COMMIT_DATE, "createdAt": COMMIT_DATE, "private": False, "gated": False,
            "disabled": False, "downloads": 0, "likes": 0, "tags": [],
            "siblings": [{"rfilename": e.path} for e in files],
        })

    def _tree(self, folder: str, query: dict[str, list[str]]) -> None:
        entries = self.server.entries
        if folder and (folder not in entries or not entries[folder].is_dir):
            self._error(404, "EntryNotFound", f"{folder} does not exist on \"{REVISION}\"")
            return
        recursive = is_true(query.get("recursive", [None])[0])
        expand = is_true(query.get("expand", [None])[0])
        prefix = folder + "/" if folder else ""
        listed = [e for p, e in entries.items() if p.startswith(prefix)
                  and (recursive or "/" not in p[len(prefix):])]
        size = min(self.server.page_size, EXPAND_PAGE_SIZE) if expand else self.server.page_size
        start = int(query.get("cursor", ["0"])[0])
        page = listed[start:start + size]
        headers = {}
        if start + size < len(listed):
            params = {k: v[0] for k, v in query.items() if k != "cursor"} | {"cursor": str(start + size)}
            next_url = f"http://{self.headers['Host']}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{next_url}>; rel="next"'
        self._json(200, [entry_json(e, self.server.commit, expand) for e in page], headers)

    def _paths_info(self, body: bytes) -> None:
        if "json" in (self.headers.get("Content-Type") or ""):
            payload = json.loads(body or b"{}")
            paths, expand = payload.get("paths", []), bool(payload.get("expand"))
        else:
            form = parse_qs(body.decode("utf-8"))
            paths, expand = form.get("paths", []), is_true(form.get("expand", [None])[0])
        if isinstance(paths, str):
            paths = [paths]
        found = [self.server.entries[p.strip("/")] for p in paths if p.strip("/") in self.server.entries]
        self._json(200, [entry_json(e, self.server.commit, expand) for e in found])

    def _create_repo(self, body: bytes) -> None:
        payload = json.loads(body or b"{}")
        repo_id = f"{payload.get('organization')}/{payload.get('name')}"
        if payload.get("type") != "dataset" or repo_id != self.server.repo_id:
            self._error(400, None, f"this server holds only the dataset {self.server.repo_id}, not {repo_id}")
            return
        url = f"http://{self.headers['Host']}/datasets/{repo_id}"
        with self.server.lock:
            if self.server.exists:
                self._json(409, {"error": "You already created this dataset repo", "url": url},
                           {"X-Error-Message": "You already created this dataset repo"})
                return
            self.server.root.mkdir(parents=True, exist_ok=True)
            self.server.exists = True
        self._json(200, {"url": url, "name": repo_id, "id": self.server.commit[:24]})

    def _validate_yaml(self, body: bytes) -> None:
        errors = card_errors(json.loads(body or b"{}").get("content", ""))
        self._json(400 if errors else 200, {"errors": [{"message": m} for m in errors], "warnings": []})

    def _preupload(self, body: bytes) -> None:
        files = json.loads(body or b"{}").get("files", [])
        known = self.server.entries
        self._json(200, {"files": [
            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
             "oid": known[f["path"]].oid if f["path"] in known and not known[f["path"]].is_dir else None}
            for f in files]})

    def _commit(self, body: bytes) -> None:
        server, faults = self.server, self.server.faults
        with server.lock:
            failing = server.failures_left > 0
            server.failures_left -= failing
        if failing:
            self._json(faults.fail_status, {"error": "Too Many Requests"},
                       {"Retry-After": str(faults.retry_after), "X-Error-Message": "Too Many Requests"})
            return
        try:
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            header = next(item["value"] for item in lines if item["key"] == "header")
            writes, deletes = {}, []
            for item in lines:
                if item["key"] == "file":
                    writes[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                elif item["key"] == "deletedFile":
                    deletes.append(item["value"]["path"])
                elif item["key"] != "header":
                    raise ValueError(f"unsupported commit operation {item['key']!r} (every file is regular here)")
        except (ValueError, KeyError, StopIteration) as exc:
            self._error(400, None, f"bad commit payload: {exc}")
            return
        if faults.commit_delay:
            time.sleep(faults.commit_delay)
            if self._client_gone():  # killed while waiting: the commit is not applied
                self.log_message("client went away: commit not applied")
                self.close_connection = True
                return
        with server.lock:
            parent = header.get("parentCommit")
            if parent and parent != server.commit:
                self._error(412, None, "A commit has happened since. Please refresh and try again.")
                return
            size = sum(e.size for p, e in server.files.items() if p not in writes and p not in deletes)
            size += sum(len(data) for data in writes.values())
            if faults.quota_bytes and size > faults.quota_bytes:
                self._error(403, None, f"Storage limit reached: this commit would make the repository {size} bytes, "
                                       f"over its quota of {faults.quota_bytes} bytes")
                return
            try:
                server.apply(writes, deletes, header.get("summary", ""))
            except ValueError as exc:
                self._error(400, None, str(exc))
                return
            commit = server.commit
            self.log_message('commit %s files=%d bytes=%d "%s"', commit, len(writes) + len(deletes),
                             sum(len(d) for d in writes.values()), header.get("summary", ""))
        self._json(200, {"commitOid": commit, "commitUrl": f"http://{self.headers['Host']}/datasets/"
                         f"{server.repo_id}/commit/{commit}", "pullRequestUrl": None})

    def _resolve(self, path: str) -> None:
        entry = self.server.entries.get(path)
        if entry is None or entry.is_dir:
            self._error(404, "EntryNotFound", f"{path} does not exist on \"{REVISION}\"")
            return
        headers = {"Accept-Ranges": "bytes", "ETag": f'"{entry.oid}"', "X-Repo-Commit": self.server.commit,
                   "Content-Type": "application/octet-stream"}
        span = parse_range(self.headers.get("Range"), entry.size)
        if span == "unsatisfiable":
            self._send(416, b"", headers | {"Content-Range": f"bytes */{entry.size}"})
            return
        start, end = span or (0, entry.size)
        with (self.server.root / path).open("rb") as fh:
            fh.seek(start)
            data = fh.read(end - start)
        if span is None:
            self._send(200, data, headers)
        else:
            self._send(206, data, headers | {"Content-Range": f"bytes {start}-{end - 1}/{entry.size}"})

    # -- responses ---------------------------------------------------------------------------

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message} | ({"X-Error-Code": code} if code else {})
        self._json(status, {"error": message}, headers)

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self.head_only:
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.log_message('"%s %s" %s range=%s', self.command, self.path, code, self.headers.get("Range") or "-")


def card_errors(content: str) -> list[str]:
    """What the Hub's validate-yaml refuses in a README: front matter that does not parse to a
    mapping, licence ids it does not know, ``configs`` entries without a ``config_name``."""
    if not content.startswith("---"):
        return []
    match = re.match(r"^---[ \t]*\n(.*?)\n---[ \t]*(\n|$)", content, re.S)
    if match is None:
        return ["the metadata block (between --- lines) is not closed"]
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        return [f"metadata is not valid YAML: {exc}"]
    if meta is None:
        return []
    if not isinstance(meta, dict):
        return ["metadata must be a YAML mapping"]
    errors = []
    licences = meta.get("license", [])
    for licence in [licences] if isinstance(licences, str) else licences if isinstance(licences, list) else [None]:
        if licence not in LICENSES:
            errors.append(f'"license" must be a Hub licence id, not {licence!r}')
    configs = meta.get("configs", [])
    if not isinstance(configs, list) or not all(isinstance(c, dict) and c.get("config_name") for c in configs):
        errors.append('"configs" must be a list of mappings, each with a "config_name"')
    return errors


def parse_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(start, end)`` (end exclusive) of a single ``bytes=`` range; ``None`` when there is no
    usable Range header (the whole file is sent), ``"unsatisfiable"`` when it starts past the end."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes="):].strip().partition("-")
    try:
        if not first:  # "bytes=-N": the last N bytes
            n = int(last)
            return (max(size - n, 0), size) if n > 0 and size else "unsatisfiable"
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    except ValueError:
        return None
    if start >= size:
        return "unsatisfiable"
    return (start, end) if end > start else None


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path, repo_id: str, page_size: int = PAGE_SIZE,
                 token: str = "", faults: Faults = Faults()):
        super().__init__(address, HubHandler)
        self.root = root.resolve()
        self.repo_id = repo_id
        self.page_size = page_size
        self.token = token
        self.faults = faults
        self.failures_left = faults.fail_commits
        self.lock = threading.Lock()
        self.exists = self.root.is_dir()
        self.entries = snapshot(self.root) if self.exists else {}
        self.files = {p: e for p, e in self.entries.items() if not e.is_dir}
        self.commit = commit_id(self.entries)

    def apply(self, writes: dict[str, bytes], deletes: list[str], summary: str) -> None:
        """One commit: every file written (to a temporary name, then renamed) before ``main`` moves."""
        for path in [*writes, *deletes]:
            if not (self.root / path).resolve().is_relative_to(self.root):
                raise ValueError(f"path {path!r} leaves the repo")
        for path, data in writes.items():
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".committing")
            tmp.write_bytes(data)
            tmp.replace(target)
            self.files[path] = Entry(path, False, len(data), git_blob_id(data))
        for path in deletes:
            (self.root / path).unlink(missing_ok=True)
            self.files.pop(path, None)
        self.entries = with_folders(self.files)
        self.commit = hashlib.sha1(f"{self.commit}\0{summary}\0{commit_id(self.entries)}".encode()).hexdigest()


@contextlib.contextmanager
def hub_server(root: Path, repo_id: str, port: int, log_path: Path, page_size: int = PAGE_SIZE, token: str = "",
               faults: Faults = Faults()) -> Iterator[str]:
    """This server in its own process on ``127.0.0.1:port``, serving ``root`` as the dataset
    ``repo_id`` (which exists when ``root`` does); yields its endpoint URL once it answers, and logs
    requests and commits to ``log_path``."""
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, str(Path(__file__).resolve()), "--root", str(root), "--repo", repo_id,
               "--port", str(port), "--page-size", str(page_size), "--token", token,
               "--fail-commits", str(faults.fail_commits), "--fail-status", str(faults.fail_status),
               "--retry-after", str(faults.retry_after), "--commit-delay", str(faults.commit_delay),
               "--quota-bytes", str(faults.quota_bytes)]
    with log_path.open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                try:
                    with urllib.request.urlopen(f"{endpoint}/api/datasets/{quote(repo_id)}", timeout=5):
                        break
                except urllib.error.HTTPError:  # it answers (404 until the repo is created)
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert server.poll() is None, f"the Hub server exited; see {log_path}"
                    time.sleep(0.05)
            else:
                raise AssertionError(f"no Hub server at {endpoint}")
            yield endpoint
        finally:
            server.terminate()
            server.wait(10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="folder served as the repo (created by a push)")
    parser.add_argument("--repo", required=True, help="dataset repo id, owner/name")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE, help="tree entries per page")
    parser.add_argument("--token", default="", help="the token writes need (none: writes are open)")
    parser.add_argument("--fail-commits", type=int, default=0, help="answer the first N commits with --fail-status")
    parser.add_argument("--fail-status", type=int, default=429)
    parser.add_argument("--retry-after", type=int, default=1, help="the failed commits' Retry-After (seconds)")
    parser.add_argument("--commit-delay", type=float, default=0.0, help="seconds to wait before applying a commit")
    parser.add_argument("--quota-bytes", type=int, default=0, help="refuse commits past this repo size (0: none)")
    args = parser.parse_args(argv)
    faults = Faults(args.fail_commits, args.fail_status, args.retry_after, args.commit_delay, args.quota_bytes)
    server = HubServer(("127.0.0.1", args.port), args.root, args.repo, args.page_size, args.token, faults)
    print(f"serving {server.root} as datasets/{args.repo}@{REVISION} ({server.commit}) on port {args.port}",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
