"""A tiny threaded JSON-over-HTTP server with request recording and per-call fault injection."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# serve_forever checks for shutdown() this often: its default of 0.5 s made every fake's stop wait that long.
SHUTDOWN_POLL_S = 0.02

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased


class HttpError(Exception):
    """Raised by a fake's handler: answered as Google's JSON error envelope."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}}


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int | None = None
    message: str = "injected fault"
    times: int = 1  # how many matching calls it hits; -1: every one
    latency: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return self.times != 0 and method == self.method and bool(self.pattern.search(path))


@dataclass
class Faults:
    """Faults injected per call: the first rule that matches a call applies to it (and is used up)."""

    rules: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def http_error(self, method: str, path_regex: str, status: int, times: int = 1, message: str = "") -> None:
        text = message or f"injected HTTP {status}"
        with self.lock:
            self.rules.append(Fault(method, re.compile(path_regex), status=status, message=text, times=times))

    def delay(self, method: str, path_regex: str, seconds: float, times: int = -1) -> None:
        with self.lock:
            self.rules.append(Fault(method, re.compile(path_regex), latency=seconds, times=times))

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    if rule.times > 0:
                        rule.times -= 1
                    return rule
        return None


Handler = Callable[[Request], tuple[int, Any]]
Route = tuple[str, str, Callable[..., Any]]  # (method, path regex with named groups, action(request, **groups))


def dispatch(service: str, routes: list[Route], request: Request, failed: Callable[[Exception], HttpError | None],
             ) -> tuple[int, Any]:
    """Call the first route matching the request; `failed` turns an action's exception into an HTTP error."""
    for method, pattern, action in routes:
        match = re.match(pattern, request.path)
        if method == request.method and match:
            try:
                return 200, action(request, **match.groupdict())
            except Exception as err:
                error = failed(err)
                if error is None:
                    raise
                raise error from None
    raise HttpError(404, f"fake {service}: no route for {request.method} {request.path}")


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-request (a timeout, a test's end) is part of what the fakes serve: no traceback
    in the test output."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class JsonServer:
    """Serves `handler(request) -> (status, json body)` on 127.0.0.1:<free port>; start()/stop()."""

    def __init__(self, handler: Handler, name: str) -> None:
        self.handler = handler
        self.name = name
        self.faults = Faults()
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name=f"fake-{name}", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> JsonServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def calls(self, method: str, path_regex: str) -> list[Request]:
        pattern = re.compile(path_regex)
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall per call

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if len(raw) < length:  # the client went away mid-request (a killed `up`): a server acts on nothing
                    self.send_error(HTTPStatus.BAD_REQUEST, "incomplete request body")
                    return
                body = json.loads(raw) if raw.strip() else {}
                query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
                headers = {key.lower(): value for key, value in self.headers.items()}
                request = Request(self.command, parts.path, query, body, headers)
                fake._record(request)
                status, payload = fake._answer(request)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        return RequestHandler

    def _answer(self, request: Request) -> tuple[int, Any]:
        fault = self.faults.take(request.method, request.path)
        if fault is not None:
            if fault.latency:
                time.sleep(fault.latency)
            if fault.status is not None:
                return fault.status, error_body(fault.status, fault.message)
        try:
            return self.handler(request)
        except HttpError as err:
            return err.status, error_body(err.status, err.message)
        except Exception as err:  # noqa: BLE001  a bug in the fake must show, not hang the client
            return HTTPStatus.NOT_IMPLEMENTED, error_body(501, f"fake {self.name} crashed: {err!r}")  # not retried
