"""The dashboard's HTTP server: the standard library's ThreadingHTTPServer, one page and a few JSON endpoints.

    GET /                          the page (one self-contained HTML document: inline script and SVG charts)
    GET /api/clusters              every cluster at a glance
    GET /api/cluster?name=NAME     one cluster in full
    GET /api/hours?from=T&to=T     where the hours went (T: seconds since the epoch; default the last 24 h)

Nothing else: no file is ever served from a path, so no path can reach outside the data; anything but GET and
HEAD is refused. It binds loopback unless told otherwise, and on loopback answers only requests addressed to
loopback (the Host header): a web page elsewhere cannot read it through a DNS name rebound to 127.0.0.1.

The page is served as soon as the socket is bound; the Board (the workflows it reads through, ~0.7 s of imports)
is built meanwhile in a thread, and the first JSON request waits for it.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from tpuops.dashboard.board import Board

LOOPBACK = ("127.0.0.1", "::1", "localhost")
DAY = 86400.0
BOARD_WAIT_S = 120.0
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:"


def page() -> bytes:
    return resources.files("tpuops.dashboard").joinpath("page.html").read_bytes()


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], make_board: Callable[[], Board]) -> None:
        self.page = page()
        super().__init__(address, Handler)  # bound here: a port in use fails before anything else starts
        self._board: Board | None = None
        self._board_error: BaseException | None = None
        self._built = threading.Event()
        threading.Thread(target=self._build, args=(make_board,), daemon=True).start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A browser that closed its tab or reloaded mid-request resets the connection: that is no error of ours,
        and the user's terminal shows the URL only (a traceback with TPUOPS_DEBUG=1)."""
        if os.environ.get("TPUOPS_DEBUG") == "1":
            super().handle_error(request, client_address)

    def _build(self, make_board: Callable[[], Board]) -> None:
        try:
            self._board = make_board()
        except BaseException as err:  # noqa: BLE001  every JSON request answers with it
            self._board_error = err
        finally:
            self._built.set()

    def addressed_to_us(self, host_header: str) -> bool:
        """On loopback, only a Host naming loopback (and our port); elsewhere the user chose who may ask."""
        host, port = self.server_address[:2]
        if not is_loopback(str(host)):
            return True
        name, given_port = host_header, ""
        if host_header.count(":") == 1 or (host_header.startswith("[") and "]:" in host_header):
            name, _, given_port = host_header.rpartition(":")
        return name.strip("[]") in LOOPBACK and given_port in ("", str(port))

    def board(self) -> Board:
        if not self._built.wait(BOARD_WAIT_S) or self._board is None:
            raise RuntimeError(f"the dashboard could not read anything: {self._board_error or 'still starting'}")
        return self._board

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def serve_in_thread(self, poll_interval: float = 0.5) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, args=(poll_interval,), daemon=True)
        thread.start()
        return thread


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "tpuops-dashboard"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802  (the standard library's name)
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b'{"error": "read-only"}', "application/json", False)

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

    def _answer(self, head: bool) -> None:
        if not self.server.addressed_to_us(self.headers.get("Host", "")):
            self._json(HTTPStatus.MISDIRECTED_REQUEST, {"error": "not addressed to this dashboard"}, head)
            return
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        if parts.path == "/":
            self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8", head)
            return
        if parts.path not in ("/api/clusters", "/api/cluster", "/api/hours"):
            self._json(HTTPStatus.NOT_FOUND, {"error": "no such page"}, head)
            return
        try:
            board = self.server.board()
        except RuntimeError as err:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(err)}, head)
            return
        try:
            if parts.path == "/api/clusters":
                document: Any = board.clusters()
            elif parts.path == "/api/cluster":
                document = board.cluster(query.get("name", ""))
                if document is None:
                    self._json(HTTPStatus.NOT_FOUND, {"error": f"no cluster {query.get('name', '')!r}"}, head)
                    return
            else:
                end = _number(query.get("to"), board.clock())
                document = board.hours(_number(query.get("from"), end - DAY), end)
        except ValueError as err:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(err)}, head)
            return
        self._json(HTTPStatus.OK, document, head)

    def _json(self, status: HTTPStatus, document: Any, head: bool) -> None:
        self._send(status, json.dumps(document, default=str, allow_nan=False).encode(), "application/json", head)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  quiet: the terminal shows the URL only
        return None


def _number(text: str | None, default: float) -> float:
    if text is None or text == "":
        return default
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a time: {text!r}")
    return value


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")
