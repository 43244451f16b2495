"""A fake of the Hugging Face Hub's HTTP API, read-only, on 127.0.0.1.

The real Hub cannot be reached from tests (no network), so this stands in for it: ``hf://`` reading
(``huggingface_hub.HfFileSystem``, pointed here by ``HF_ENDPOINT``) is otherwise real, over HTTP. It
serves one local folder as the dataset repo ``datasets/<owner>/<name>`` at revision ``main``, one
commit holding the folder as it is when the server starts (files must not change while it runs).
Only what ``HfFileSystem`` calls to glob, ls, info and open a file is implemented, in the Hub's
shapes (``huggingface_hub.hf_api`` parses them):

- ``GET /api/datasets/<repo>[/revision/<rev>]``: repo info (``id``, ``sha``, ``siblings``).
- ``GET /api/datasets/<repo>/tree/<rev>[/<folder>]?recursive=&expand=``: the folder's entries
  (``type``, ``oid``, ``size``, ``path``; ``lastCommit`` with ``expand``), cursor-paginated through
  a ``Link: <...>; rel="next"`` header like the Hub (1,000 entries a page, 50 with ``expand``).
- ``POST /api/datasets/<repo>/paths-info/<rev>``: the entries of the listed ``paths`` (form or JSON
  body), missing paths left out (``HfFileSystem.info`` asks for it with ``refresh`` or
  ``expand_info``; ``pipelines.io``'s calls are answered from tree listings).
- ``GET /datasets/<repo>/resolve/<rev>/<path>``: the file, with ``Accept-Ranges``, single
  ``Range`` requests (206 with ``Content-Range``; 416 past the end), ``ETag`` (the git blob id) and
  ``X-Repo-Commit``.

Errors carry the Hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``),
which the client turns into its typed errors (and ``FileNotFoundError``). Files are served as plain
git blobs: no LFS pointers, Xet hashes or CDN redirects, which ``HfFileSystem.open`` does not need.
Every request is logged (method, path, status, ``Range``) to stderr, so a test can check what was
asked for.

``python tests/hub_server.py --root DIR --repo owner/name --port N`` runs it; ``hub_server(...)``
starts it in its own process (so it does not share the GIL with an in-process pipeline) and yields
its endpoint URL.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import posixpath
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

REVISION = "main"
PAGE_SIZE = 1000  # the Hub's tree page sizes
EXPAND_PAGE_SIZE = 50
COMMIT_DATE = "2024-01-01T00:00:00.000Z"


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
    entries = {rel: Entry(rel, False, p.stat().st_size, git_blob_id(p.read_bytes())) for rel, p in files.items()}
    folders = {str(parent) for rel in files for parent in Path(rel).parents if str(parent) != "."}
    for folder in sorted(folders, key=lambda f: -f.count("/")):  # children first: a folder hashes its children
        children = "".join(e.oid for p, e in sorted(entries.items()) if posixpath.dirname(p) == folder)
        entries[folder] = Entry(folder, True, 0, hashlib.sha1(f"tree {folder}\0{children}".encode()).hexdigest())
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
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if parts[:2] != ["api", "datasets"]:
            self._error(404, None, "Not found")
            return
        rest = self._repo_rest(parts[2:])
        if rest is None:
            return
        if rest[:1] == ["paths-info"] and len(rest) == 2:
            if self._revision_ok(rest[1]):
                self._paths_info(body)
        else:
            self._error(404, None, "Not found")

    def _split(self) -> tuple[list[str], dict[str, list[str]]]:
        """The URL path's segments, each percent-decoded on its own (the client sends a revision
        and a tree path as one segment, ``/`` encoded as ``%2F``), and the query."""
        url = urlsplit(self.path)
        return [unquote(s) for s in url.path.split("/") if s], parse_qs(url.query)

    def _repo_rest(self, parts: list[str]) -> list[str] | None:
        """What follows ``<owner>/<name>`` when that is the served repo; else answers 404."""
        if parts[:2] != self.server.repo_id.split("/"):
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        return parts[2:]

    def _revision_ok(self, revision: str) -> bool:
        if revision in (REVISION, self.server.commit):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

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
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.log_message('"%s %s" %s range=%s', self.command, self.path, code, self.headers.get("Range") or "-")


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

    def __init__(self, address: tuple[str, int], root: Path, repo_id: str, page_size: int = PAGE_SIZE):
        super().__init__(address, HubHandler)
        self.root = root.resolve()
        self.repo_id = repo_id
        self.page_size = page_size
        self.entries = snapshot(self.root)
        self.commit = commit_id(self.entries)


@contextlib.contextmanager
def hub_server(root: Path, repo_id: str, port: int, log_path: Path, page_size: int = PAGE_SIZE) -> Iterator[str]:
    """This server in its own process on ``127.0.0.1:port``, serving ``root`` as the dataset
    ``repo_id``; yields its endpoint URL once it answers, and logs requests to ``log_path``."""
    endpoint = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--root", str(root),
                                   "--repo", repo_id, "--port", str(port), "--page-size", str(page_size)],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                try:
                    with urllib.request.urlopen(f"{endpoint}/api/datasets/{quote(repo_id)}", timeout=5):
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
    parser.add_argument("--root", type=Path, required=True, help="folder served as the repo")
    parser.add_argument("--repo", required=True, help="dataset repo id, owner/name")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE, help="tree entries per page")
    args = parser.parse_args(argv)
    server = HubServer(("127.0.0.1", args.port), args.root, args.repo, args.page_size)
    print(f"serving {server.root} as datasets/{args.repo}@{REVISION} ({server.commit}) on port {args.port}",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
