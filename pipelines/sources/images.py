"""Fetch page images that a corpus references by URL (NARA, LoC, IIIF), offline-first.

``ImageResolver.fetch(url)`` looks in three places, in order:

1. **mirror**: a local folder or URI root laid out as ``<mirror>/<url host>/<url path>`` (the query
   string and fragment are ignored). A bulk download (``aws s3 sync``, ``wget -x``) produces this
   layout, and the sample builders write it so pipelines run without a network.
2. **cache**: ``<cache_dir>/<sha[:2]>/<sha>`` with ``sha = sha256(url)``, filled by earlier HTTP
   fetches. Writes go to a temporary file renamed into place, so concurrent workers never see a
   partial image.
3. **HTTP GET**, only when ``allow_http`` is true, with ``timeout_s``, a ``max_bytes`` size cap and
   ``retries`` for transient failures (timeouts, 429 and 5xx). A URL is untrusted input: its host
   (and every redirect's) is resolved first and refused (``bad_image_url``) when any of its addresses is
   not global (loopback, private, link-local, multicast, reserved: ``127.0.0.1``, ``2130706433``,
   ``localhost``, ``169.254.169.254``, ``10.x``), unless ``allow_hosts`` names the host or a network
   holding the address.

Failures raise ``RecordError``: ``bad_image_url`` for a URL that is not http(s), has no host, or
whose path tries to leave the mirror (``..``); ``image_unavailable`` (naming the URL and why) when
no tier has the image. The resolver holds only plain settings, so sources that own one stay
picklable for Beam workers.

Source ``options`` keys read by ``ImageResolver.from_options``: the fields of ``ImageOptions``
(``mirror``, ``cache_dir``, ``allow_http``, ``allow_hosts``, ``timeout_s``, ``max_bytes``, ``retries``,
``user_agent``).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import ipaddress
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

from pipelines import io
from pipelines.sources.base import at_least, positive
from schemas.config import load, option
from schemas.deadletter import RecordError

DEFAULT_MAX_BYTES = 50 * 1024 * 1024
_CHUNK = 1 << 16
_RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}


def check_public_host(url: str, allow_hosts: tuple[str, ...] = ()) -> None:
    """``bad_image_url`` unless every address ``url``'s host resolves to is global (not loopback, private,
    link-local, multicast, reserved, unspecified), or ``allow_hosts`` permits it: an entry equal to the host
    name, or an IP address or network (``127.0.0.1``, ``10.0.0.0/8``) holding each address.
    ``image_unavailable`` when the host does not resolve."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        raise RecordError("bad_image_url", f"{url}: URL has no usable host")
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        public_addresses(host, port, allow_hosts, url)
    except (OSError, UnicodeError, ValueError) as exc:
        raise RecordError("image_unavailable", f"{url}: cannot resolve {host}: {exc}") from None


def public_addresses(host: str, port: int, allow_hosts: tuple[str, ...], url: str) -> list[str]:
    """The addresses ``host`` resolves to, once (``bad_image_url`` if any is not public and not allowed, as
    ``check_public_host`` says); resolution errors (``socket.gaierror``) propagate, so callers may retry."""
    host = host.lower()
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [str(info[4][0]).split("%", 1)[0] for info in infos]
    if host in {h.lower() for h in allow_hosts}:
        return addresses
    networks = []
    for entry in allow_hosts:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue  # a host name
    for text in addresses:
        addr = ipaddress.ip_address(text)
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        if any(addr in net for net in networks):
            continue
        if not addr.is_global or addr.is_multicast:
            raise RecordError("bad_image_url", f"{url}: host {host} resolves to {addr}, not a public address "
                                               f"(allow_hosts lists hosts and networks that may be fetched)")
    return addresses


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address ``public_addresses`` checked, resolved once: a name whose DNS answer changes
    between the check and the connection (DNS rebinding) cannot reach loopback or the LAN."""

    def __init__(self, *args, allow_hosts: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.allow_hosts = allow_hosts

    def _pinned_socket(self) -> socket.socket:
        """A socket to the first of the checked addresses that answers (as ``create_connection`` of a name
        tries each of its addresses: a dual-stack host with broken IPv6, a balanced name with one down)."""
        url = f"http://{self.host}:{self.port}/"
        error: OSError | None = None
        for address in public_addresses(self.host, self.port, self.allow_hosts, url):
            try:
                return socket.create_connection((address, self.port), self.timeout, self.source_address)
            except OSError as exc:
                error = exc
        raise error or OSError(f"{self.host} has no address")

    def connect(self) -> None:
        self.sock = self._pinned_socket()


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """``_PinnedHTTPConnection`` over TLS, verified for the URL's host name (SNI)."""

    def __init__(self, *args, allow_hosts: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.allow_hosts = allow_hosts

    _pinned_socket = _PinnedHTTPConnection._pinned_socket

    def connect(self) -> None:
        self.sock = self._context.wrap_socket(self._pinned_socket(), server_hostname=self.host)


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, allow_hosts: tuple[str, ...]):
        super().__init__()
        self.allow_hosts = allow_hosts

    def http_open(self, req):  # type: ignore[override]
        return self.do_open(functools.partial(_PinnedHTTPConnection, allow_hosts=self.allow_hosts), req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, allow_hosts: tuple[str, ...]):
        super().__init__()
        self.allow_hosts = allow_hosts

    def https_open(self, req):  # type: ignore[override]
        return self.do_open(functools.partial(_PinnedHTTPSConnection, allow_hosts=self.allow_hosts), req,
                            context=self._context)


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http(s) URLs of public hosts (``check_public_host``); urllib would otherwise
    also follow ``ftp://``, and a public host could bounce the fetch to loopback or the LAN."""

    def __init__(self, allow_hosts: tuple[str, ...] = ()):
        super().__init__()
        self.allow_hosts = allow_hosts

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        if urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise urllib.error.HTTPError(newurl, code, f"redirect to non-http URL {newurl}", headers, fp)
        check_public_host(newurl, self.allow_hosts)  # RecordError: not retried, a dead letter
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _split_http_url(url: str) -> tuple[str, list[str]]:
    """``(host, path segments)`` of an http(s) URL; ``bad_image_url`` for anything unsafe.

    Segments are percent-decoded, so ``%2e%2e`` is caught as ``..`` too.
    """
    if not isinstance(url, str) or not url.strip():
        raise RecordError("bad_image_url", f"image URL is empty: {url!r}")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        scheme = parts.scheme or "no scheme"
        raise RecordError("bad_image_url", f"{url}: only http(s) image URLs are fetched, not {scheme!r}")
    host = (parts.hostname or "").lower()
    if not host or host in (".", "..") or "/" in host or "\\" in host:
        raise RecordError("bad_image_url", f"{url}: URL has no usable host")
    segments = []
    for raw in parts.path.split("/"):
        seg = unquote(raw)
        if not seg:
            continue
        if seg in (".", "..") or "/" in seg or "\\" in seg or "\x00" in seg:
            raise RecordError("bad_image_url", f"{url}: path segment {seg!r} would leave the mirror root")
        segments.append(seg)
    if not segments:
        raise RecordError("bad_image_url", f"{url}: URL has no path")
    return host, segments


@dataclass(frozen=True)
class ImageOptions:
    """The source options ``ImageResolver.from_options`` reads (readers of URL-referenced images extend it)."""

    mirror: str | None = option(None, help="local folder or URI root laid out as <mirror>/<url host>/<url path>")
    cache_dir: str | None = option(None, help="cache of HTTP fetches, <cache_dir>/<sha[:2]>/<sha>")
    allow_http: bool = option(False, help="fetch images missing from the mirror and cache over HTTP")
    allow_hosts: tuple[str, ...] = option((), help="hosts, IP addresses or networks (CIDR) HTTP may reach though "
                                                   "not public (loopback, private, link-local); default none")
    timeout_s: float = option(30.0, help="seconds per HTTP request")
    max_bytes: int = option(DEFAULT_MAX_BYTES, help="largest image fetched, in bytes")
    retries: int = option(2, help="retries of a transient HTTP failure (timeouts, 429, 5xx)")
    user_agent: str = option("pagemill-image-resolver/1", help="User-Agent of HTTP requests")

    def __post_init__(self) -> None:
        positive(self, "timeout_s")
        at_least(self, max_bytes=1, retries=0)


@dataclass(frozen=True)
class ImageResolver:
    """Mirror -> cache -> HTTP image fetcher; see the module docstring."""

    mirror: str | None = None
    cache_dir: str | None = None
    allow_http: bool = False
    allow_hosts: tuple[str, ...] = ()
    timeout_s: float = 30.0
    max_bytes: int = DEFAULT_MAX_BYTES
    retries: int = 2
    user_agent: str = "pagemill-image-resolver/1"

    @classmethod
    def from_options(cls, options: ImageOptions | Mapping[str, Any]) -> ImageResolver:
        """From a reader's typed options (an ``ImageOptions``) or a mapping of its keys."""
        o = load(ImageOptions, options, "options")
        return cls(mirror=o.mirror or None, cache_dir=o.cache_dir or None, allow_http=o.allow_http,
                   allow_hosts=tuple(o.allow_hosts), timeout_s=o.timeout_s, max_bytes=o.max_bytes,
                   retries=o.retries, user_agent=o.user_agent)

    # -- tiers -------------------------------------------------------------------------------

    def mirror_path(self, url: str) -> str | None:
        """Where ``url`` lives in the mirror (``None`` without a mirror); never outside its root."""
        host, segments = _split_http_url(url)
        if not self.mirror:
            return None
        return io.join(self.mirror, host, *segments)

    def cache_path(self, url: str) -> str | None:
        if not self.cache_dir:
            return None
        key = hashlib.sha256(url.encode("utf-8")).hexdigest()
        return io.join(self.cache_dir, key[:2], key)

    def _read_mirror(self, url: str) -> bytes | None:
        path = self.mirror_path(url)
        if path is None:
            return None
        if "://" not in path:
            # Symlinks inside the mirror must not lead out of it either.
            root = os.path.realpath(self.mirror)  # type: ignore[arg-type]
            real = os.path.realpath(path)
            if os.path.commonpath([root, real]) != root:
                raise RecordError("bad_image_url", f"{url}: mirror entry resolves outside the mirror root")
            if not os.path.isfile(real):
                return None
            return self._read_capped(path, url)
        if not io.exists(path):
            return None
        return self._read_capped(path, url)

    def _read_capped(self, path: str, url: str) -> bytes:
        try:
            with io.open_read(path) as fh:
                data = fh.read(self.max_bytes + 1)
        except OSError as exc:
            raise RecordError("image_unavailable", f"{url}: cannot read {path}: {exc}") from exc
        if len(data) > self.max_bytes:
            raise RecordError("image_unavailable", f"{url}: {path} is larger than max_bytes={self.max_bytes}")
        return data

    def _read_cache(self, url: str) -> bytes | None:
        path = self.cache_path(url)
        if path is None or not io.exists(path):
            return None
        return self._read_capped(path, url)

    def _write_cache(self, url: str, data: bytes) -> None:
        path = self.cache_path(url)
        if path is None:
            return
        if "://" in path:
            io.write_bytes_atomic(path, data)
            return
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        # A unique temp name per writer: two workers fetching the same URL must not share one.
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise

    def _http_get(self, url: str) -> bytes:
        parts = urlsplit(url)
        proxies = urllib.request.getproxies()  # also holds "no" (no_proxy); urllib uses the URL scheme's entry only
        if parts.scheme.lower() in proxies and not urllib.request.proxy_bypass(parts.hostname or ""):
            # the proxy resolves and connects: only the name can be checked here (once, before the request)
            check_public_host(url, self.allow_hosts)
            opener = urllib.request.build_opener(_SafeRedirects(self.allow_hosts))
        else:  # every connection, redirects and retries included, goes to an address checked when it is made
            if not parts.hostname:
                raise RecordError("bad_image_url", f"{url}: URL has no usable host")
            # no proxy handler: a redirect to another scheme or host is not handed to a proxy here, whose own
            # address the pinned connection would check and dial
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), _SafeRedirects(self.allow_hosts),
                _PinnedHTTPHandler(self.allow_hosts), _PinnedHTTPSHandler(self.allow_hosts))
        request = urllib.request.Request(url, headers={"User-Agent": self.user_agent})
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                # timeout_s bounds the request (connect and the whole body), not each socket read: a server
                # dripping bytes is cut off at the deadline like one that does not answer (io.read_before)
                deadline = time.monotonic() + self.timeout_s
                with opener.open(request, timeout=self.timeout_s) as response:
                    length = response.headers.get("Content-Length")
                    if length and length.isdigit() and int(length) > self.max_bytes:
                        raise RecordError(
                            "image_unavailable",
                            f"{url}: Content-Length {length} exceeds max_bytes={self.max_bytes}",
                        )
                    data = io.read_before(response, self.max_bytes, deadline, _CHUNK)
                    if len(data) > self.max_bytes:
                        raise RecordError(
                            "image_unavailable", f"{url}: response exceeds max_bytes={self.max_bytes}"
                        )
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code} {exc.reason}"
                if exc.code in _RETRYABLE_STATUS:
                    continue
                break
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
                continue
            if not data:
                raise RecordError("image_unavailable", f"{url}: HTTP response body is empty")
            return data
        raise RecordError("image_unavailable", f"{url}: HTTP GET failed: {last}")

    # -- public ------------------------------------------------------------------------------

    def fetch(self, url: str) -> bytes:
        """The image bytes for ``url`` from the mirror, the cache or HTTP, in that order."""
        _split_http_url(url)  # validate before touching any tier
        url = url.strip()
        data = self._read_mirror(url)
        if data is not None:
            return data
        data = self._read_cache(url)
        if data is not None:
            return data
        if not self.allow_http:
            where = f"mirror {self.mirror_path(url)}" if self.mirror else "no mirror configured"
            raise RecordError(
                "image_unavailable", f"{url}: not found ({where}; not cached; allow_http is false)"
            )
        data = self._http_get(url)
        self._write_cache(url, data)
        return data
