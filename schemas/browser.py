"""Headless Chromium for pagemill: one shared browser per process, and pages that cannot reach the network.

Everything that renders HTML in a browser (KaTeX math checks in `schemas.math_render`, later the
synthetic-page generator) goes through here, so that the launch flags, the executable and the
network policy live in one place:

- `launch_chromium()` starts Playwright and Debian's Chromium (`/usr/bin/chromium`, or the path in
  the environment variable `PAGEMILL_CHROMIUM`) with flags that keep it from phoning home and a
  dead proxy for every connection; it returns a `ChromiumHandle` that owns both and closes both.
- `shared_browser()` returns the process's reused browser, launched on first use and closed at exit.
- `new_offline_page(browser, allowed_dirs)` opens a page in a fresh context whose every request is
  aborted (http, https, ws, data fetches of other schemes) except `file://` URLs that lie under one
  of `allowed_dirs`; it refuses downloads (nothing is written to Playwright's artifacts folder) and
  has no `RTCPeerConnection` (WebRTC would send UDP and LAN mDNS past the dead proxy; the launch
  flags also keep WebRTC to proxied UDP only, which gathers no candidates).

Playwright's browser download (`playwright install`) is not used; `scripts/install_browser_assets.sh`
installs the Debian package. Playwright's sync API binds its objects to the thread that made them,
so the shared browser is per process *and* thread: a second thread gets its own browser.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from playwright.sync_api import (
    Browser,
    Page,
    Playwright,
    Route,
    WebSocketRoute,
    sync_playwright,
)

DEFAULT_CHROMIUM = "/usr/bin/chromium"
DEAD_PROXY = "http://127.0.0.1:1"
MAX_TEMP_PATH = 62  # bytes: Chromium puts a Unix socket (107 bytes at most) 45 bytes deep in its temporary folder
INSTALL_HINT = "run scripts/install_browser_assets.sh (installs Debian's chromium and KaTeX)"

# Without the background-networking flags Chromium keeps opening connections that this
# machine's closed network refuses, and looks up Google's hosts at every start.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--no-default-browser-check",
    # Chromium opens a TCP connection to a navigation's host (an iframe, a page.goto) before
    # request interception aborts it. Sending every connection, loopback included, to a proxy
    # on a port nothing serves keeps even those from reaching any host.
    f"--proxy-server={DEAD_PROXY}",
    "--proxy-bypass-list=<-loopback>",
    # WebRTC sends UDP past any proxy: a page's RTCPeerConnection gathers host candidates and multicasts
    # their mDNS names on the LAN. Only proxied UDP (none, as the proxy is dead) gathers no host candidates,
    # so nothing is announced. (WebRTC mDNS itself is a feature, WebRtcHideLocalIpsWithMdns, but a second
    # --disable-features would replace Playwright's own list; pages also lose RTCPeerConnection, below.)
    # Debian's Chromium honours the second spelling (tests/schemas/test_browser.py checks no candidate is
    # gathered); the first is the documented policy override, kept for builds that read it.
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)

# Run before any page script in every frame of an offline context: no peer connections at all.
NO_WEBRTC_SCRIPT = """(() => {
  for (const name of ["RTCPeerConnection", "webkitRTCPeerConnection", "RTCDataChannel", "RTCIceCandidate",
                      "RTCSessionDescription", "RTCRtpSender", "RTCRtpReceiver", "RTCRtpTransceiver"]) {
    try { delete globalThis[name]; } catch (e) {}
    if (name in globalThis) {
      try { Object.defineProperty(globalThis, name, {value: undefined, configurable: false, writable: false}); }
      catch (e) {}
    }
  }
})();"""


# Playwright launches Chromium with --disable-dev-shm-usage (for containers' 64 MB /dev/shm): its shared
# memory (every screenshot's bitmap, ~5 MB a page) then lives in files under /tmp, often a disk. Where
# /dev/shm has room, Chromium keeps it there: ~4% less CPU a synthetic page (benchmarks/synth.py).
SHM_DIR = "/dev/shm"
SHM_MIN_FREE = 1 << 30


def _dropped_default_args() -> list[str]:
    try:
        roomy = shutil.disk_usage(SHM_DIR).free >= SHM_MIN_FREE
    except OSError:
        roomy = False
    return ["--disable-dev-shm-usage"] if roomy else []


def chromium_path() -> str:
    """The Chromium executable: `$PAGEMILL_CHROMIUM` or Debian's `/usr/bin/chromium`."""
    return os.environ.get("PAGEMILL_CHROMIUM") or DEFAULT_CHROMIUM


@dataclass
class ChromiumHandle:
    """A running Playwright driver and the Chromium it launched; `close()` ends both."""

    playwright: Playwright
    browser: Browser
    pid: int = field(default_factory=os.getpid)
    thread_id: int = field(default_factory=threading.get_ident)
    closed: bool = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # After a fork the child must not talk to the parent's driver pipe.
        if self.pid != os.getpid():
            return
        # The browser may already be gone; stopping the driver still matters.
        with suppress(Exception):
            self.browser.close()
        with suppress(Exception):
            self.playwright.stop()

    def __enter__(self) -> Browser:
        return self.browser

    def __exit__(self, *exc: object) -> None:
        self.close()


def launch_chromium(*, headless: bool = True, extra_args: Iterable[str] = ()) -> ChromiumHandle:
    """Start Playwright and a new headless Chromium owned by the caller (close the handle when done).

    Playwright gives every launch a fresh temporary profile (its own `--user-data-dir`) and,
    since the sandbox is off by default there, `--no-sandbox`, which Chromium needs as root.
    """
    exe = chromium_path()
    if not os.access(exe, os.X_OK):
        raise RuntimeError(f"no Chromium executable at {exe}: {INSTALL_HINT}, or set PAGEMILL_CHROMIUM")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(
            executable_path=exe,
            headless=headless,
            chromium_sandbox=False,
            args=[*CHROMIUM_ARGS, *extra_args],
            ignore_default_args=_dropped_default_args(),
        )
    except BaseException as exc:
        pw.stop()
        temp = tempfile.gettempdir()
        if isinstance(exc, Exception) and len(os.fsencode(temp)) > MAX_TEMP_PATH:
            raise RuntimeError(f"Chromium did not start, and its temporary folder is likely why: {temp} is "
                               f"{len(os.fsencode(temp))} bytes long, and Chromium's socket in it "
                               f"(org.chromium.Chromium.XXXXXX/SingletonSocket) must fit a 107-byte Unix socket "
                               f"path. Set TMPDIR to a folder of at most {MAX_TEMP_PATH} bytes.") from exc
        raise
    return ChromiumHandle(playwright=pw, browser=browser)


_local = threading.local()
_handles: list[ChromiumHandle] = []
_handles_lock = threading.Lock()


def shared_browser() -> Browser:
    """This process's (and thread's) reused Chromium, launched on first use, closed at exit.

    A handle inherited through `fork` or whose browser has disconnected is replaced.
    """
    handle: ChromiumHandle | None = getattr(_local, "handle", None)
    if handle is None or handle.closed or handle.pid != os.getpid() or not handle.browser.is_connected():
        if handle is not None:
            handle.close()
        handle = launch_chromium()
        _local.handle = handle
        with _handles_lock:
            _handles.append(handle)
    return handle.browser


def close_shared_browsers() -> None:
    """Close the shared browsers this thread launched (others end with their driver at exit)."""
    me = threading.get_ident()
    with _handles_lock:
        mine = [h for h in _handles if h.thread_id == me]
        _handles[:] = [h for h in _handles if h.thread_id != me]
    for h in mine:
        h.close()
    if getattr(_local, "handle", None) in mine:
        _local.handle = None


atexit.register(close_shared_browsers)


@contextmanager
def chromium() -> Iterator[Browser]:
    """`with chromium() as browser:` — the shared browser; it stays open for later users."""
    yield shared_browser()


def _file_path(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parts.path))


def is_allowed_url(url: str, allowed_dirs: Iterable[Path]) -> bool:
    """True only for a `file://` URL whose resolved path lies under one of `allowed_dirs`."""
    path = _file_path(url)
    if path is None:
        return False
    try:
        real = path.resolve()
    except OSError:
        return False
    return any(real.is_relative_to(Path(d).resolve()) for d in allowed_dirs)


def new_offline_page(
    browser: Browser,
    allowed_dirs: Iterable[Path | str],
    *,
    viewport: tuple[int, int] = (800, 400),
    device_scale_factor: float = 1.0,
) -> Page:
    """A page in a new context where every request is aborted but `file://` under `allowed_dirs`.

    Requests of every scheme pass through the route handler (Chromium's interception sees
    `file://` too); WebSockets are refused by their own route, service workers are blocked so
    none can answer requests behind the handler's back, and the context is marked offline. Downloads
    are refused (a blob: or data: download reaches no route, and would be written to Playwright's
    artifacts folder under /tmp), and WebRTC's constructors are removed before any page script runs.
    Close it with `page.context.close()`.
    """
    dirs = [Path(d).resolve() for d in allowed_dirs]
    context = browser.new_context(
        viewport={"width": viewport[0], "height": viewport[1]},
        device_scale_factor=device_scale_factor,
        service_workers="block",
        offline=True,
        java_script_enabled=True,
        accept_downloads=False,
    )
    context.add_init_script(NO_WEBRTC_SCRIPT)

    def on_request(route: Route) -> None:
        if is_allowed_url(route.request.url, dirs):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def on_websocket(ws: WebSocketRoute) -> None:
        ws.close(code=1008, reason="network blocked by pagemill")

    context.route("**/*", on_request)
    context.route_web_socket("**/*", on_websocket)
    return context.new_page()
