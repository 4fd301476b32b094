"""The GCE metadata server as a VM sees it, on a free loopback port: the default service account's token
and email, and the instance's attributes (`attributes`, e.g. a TPU host's `tpu-env`; 404 when absent). Like the
real one it answers only requests carrying `Metadata-Flavor: Google` (403 otherwise) and records every request
with its headers, so tests can check what a caller sent.

Point a caller at it with GCE_METADATA_HOST=<fake.host> (google-auth's own variable), or pass the host to
the autostop agent's configuration.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.http import SHUTDOWN_POLL_S

ACCOUNT_PATH = "/computeMetadata/v1/instance/service-accounts/default"
ATTRIBUTES_PATH = "/computeMetadata/v1/instance/attributes/"
DEFAULT_EMAIL = "123456789012-compute@developer.gserviceaccount.com"


@dataclass(frozen=True)
class MetadataRequest:
    method: str
    path: str
    headers: dict[str, str]


class MetadataFake:
    def __init__(self, email: str = DEFAULT_EMAIL, expires_in: int = 3599) -> None:
        self.email = email
        self.expires_in = expires_in
        self.requests: list[MetadataRequest] = []
        self.tokens_issued: list[str] = []
        self.attributes: dict[str, str] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,),
                                        name="fake-metadata", daemon=True)

    @property
    def host(self) -> str:
        """host:port, the form GCE_METADATA_HOST takes."""
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> MetadataFake:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetadataFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def token_requests(self) -> list[MetadataRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/token")]

    def _answer(self, request: MetadataRequest) -> tuple[int, str, str]:
        with self._lock:
            self.requests.append(request)
            if request.headers.get("metadata-flavor") != "Google":
                return 403, "text/html", "Missing required header: Metadata-Flavor: Google"
            if request.path == ACCOUNT_PATH + "/token":
                token = f"fake-token-{len(self.tokens_issued) + 1}"
                self.tokens_issued.append(token)
                body = {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"}
                return 200, "application/json", json.dumps(body)
            if request.path == ACCOUNT_PATH + "/email":
                return 200, "application/text", self.email
            attribute = request.path.removeprefix(ATTRIBUTES_PATH)
            if request.path.startswith(ATTRIBUTES_PATH) and attribute in self.attributes:
                return 200, "application/text", self.attributes[attribute]
        return 404, "text/html", "not found"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
                headers = {key.lower(): value for key, value in self.headers.items()}
                request = MetadataRequest("GET", self.path.split("?", 1)[0], headers)
                status, content_type, text = fake._answer(request)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
