"""schemas.browser: what a Chromium launch needs of its environment (real Chromium, in child processes so
that each gets its own TMPDIR)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from schemas.browser import MAX_TEMP_PATH
from tests.helpers import REPO

LAUNCH = ("from schemas.browser import launch_chromium\n"
          "h = launch_chromium(); p = h.browser.new_page(); p.set_content('<p>x</p>'); print('rendered'); h.close()")


def test_chromium_starts_with_the_longest_temporary_folder_and_names_one_too_long():
    base = Path(tempfile.mkdtemp(prefix="tmpd", dir="/tmp"))  # short enough to pad to the limit
    try:
        for length in (MAX_TEMP_PATH, MAX_TEMP_PATH + 1):
            folder = base / ("c" * (length - len(str(base)) - 1))
            folder.mkdir()
            assert len(os.fsencode(folder)) == length
            done = subprocess.run([sys.executable, "-c", LAUNCH], cwd=REPO, capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "TMPDIR": str(folder)})
            if length == MAX_TEMP_PATH:
                assert done.returncode == 0 and "rendered" in done.stdout, done.stderr[-2000:]
            else:
                assert done.returncode != 0
                assert f"{folder} is {length} bytes long" in done.stderr
                assert f"Set TMPDIR to a folder of at most {MAX_TEMP_PATH} bytes" in done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


ICE_CANDIDATES = """async () => { const pc = new RTCPeerConnection(); pc.createDataChannel('d'); const c = [];
  pc.onicecandidate = (e) => { if (e.candidate) c.push(e.candidate.candidate); };
  await pc.setLocalDescription(await pc.createOffer()); await new Promise((r) => setTimeout(r, 1500));
  pc.close(); return c; }"""


def test_offline_page_refuses_downloads_and_has_no_peer_connections(tmp_path):
    """A blob: or data: download reaches no route: the context must refuse it, or the bytes land in
    Playwright's artifacts folder under /tmp. WebRTC (UDP and LAN mDNS past the proxy) is not there, in
    the page nor in its frames."""
    import glob

    from playwright.sync_api import Error as PlaywrightError

    from schemas.browser import new_offline_page, shared_browser

    (tmp_path / "frame.html").write_text("<p>frame</p>")
    (tmp_path / "page.html").write_text("<!DOCTYPE html><body><iframe src='frame.html'></iframe></body>")
    artifacts = f"{tempfile.gettempdir()}/playwright-artifacts-*/*"
    before = set(glob.glob(artifacts))
    page = new_offline_page(shared_browser(), [tmp_path])
    try:
        page.goto((tmp_path / "page.html").as_uri())
        assert page.evaluate("typeof RTCPeerConnection + typeof webkitRTCPeerConnection") == "undefinedundefined"
        assert page.frames[1].evaluate("typeof RTCPeerConnection") == "undefined"
        with page.expect_download() as info:
            page.evaluate("""() => { const a = document.createElement('a');
              a.href = URL.createObjectURL(new Blob(['PAYLOAD '.repeat(1000)])); a.download = 'x.bin';
              document.body.appendChild(a); a.click(); }""")
        with pytest.raises(PlaywrightError, match="accept_downloads"):
            info.value.path()
        page.wait_for_timeout(500)
    finally:
        page.context.close()
    assert set(glob.glob(artifacts)) - before == set()


def test_launch_flags_keep_webrtc_from_gathering_candidates():
    """Even where RTCPeerConnection exists (a context made without new_offline_page), Chromium gathers no
    ICE candidates: only proxied UDP is allowed, so no host candidate is made and no mDNS name announced."""
    from schemas.browser import shared_browser

    context = shared_browser().new_context()
    try:
        page = context.new_page()
        page.set_content("<p>x</p>")
        assert page.evaluate(ICE_CANDIDATES) == []
    finally:
        context.close()

