"""Cloud Storage: gcp-storage-emulator, behind a small recording front with fault injection.

The emulator implements buckets, objects and bucket IAM policies (get/setIamPolicy) but ignores
`location`, `labels` and `iamConfiguration` on bucket insert; the front re-applies them with a PATCH right
after the insert, so tests read back what a real bucket would hold. Everything else passes through.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.http import SHUTDOWN_POLL_S, Faults, QuietServer, Request, error_body

CREATE_ONLY_FIELDS = ("location", "labels", "iamConfiguration", "storageClass")


class GcsFront:
    def __init__(self, emulator_url: str) -> None:
        upstream = urlsplit(emulator_url)
        self.upstream = (upstream.hostname or "127.0.0.1", upstream.port or 80)
        self.faults = Faults()
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="fake-gcs", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> GcsFront:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def calls(self, method: str, path_regex: str) -> list[Request]:
        import re

        pattern = re.compile(path_regex)
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(), response.getheader("Content-Type") or "application/json"
        finally:
            connection.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
                request = Request(self.command, parts.path, query, _json_or_empty(raw, self.headers))
                with front._lock:
                    front.requests.append(request)
                status, data, content_type = front._answer(request, self.path, raw, self.headers)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

        return Handler

    def _answer(self, request: Request, full_path: str, raw: bytes, headers: Any) -> tuple[int, bytes, str]:
        import time

        fault = self.faults.take(request.method, request.path)
        if fault is not None:
            time.sleep(fault.latency)
            if fault.status is not None:
                return fault.status, json.dumps(error_body(fault.status, fault.message)).encode(), "application/json"
        forward_headers = {k: v for k, v in headers.items() if k.lower() in ("content-type", "content-length")}
        status, data, content_type = self.forward(request.method, full_path, raw, forward_headers)
        if request.method == "POST" and request.path.rstrip("/").endswith("/b") and status == 200:
            data = self._apply_create_only_fields(request.body, data)
        return status, data, content_type

    def _apply_create_only_fields(self, body: dict[str, Any], created: bytes) -> bytes:
        fields = {key: body[key] for key in CREATE_ONLY_FIELDS if key in body}
        if not fields:
            return created
        if "location" in fields:
            fields["location"] = str(fields["location"]).upper()
        name = json.loads(created)["name"]
        status, data, _ = self.forward(
            "PATCH", f"/storage/v1/b/{name}", json.dumps(fields).encode(), {"Content-Type": "application/json"}
        )
        return data if status == 200 else created


def _json_or_empty(raw: bytes, headers: Any) -> dict[str, Any]:
    if not raw or "json" not in (headers.get("Content-Type") or ""):
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
