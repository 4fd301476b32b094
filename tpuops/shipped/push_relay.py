# The relay of `tpuops push`: the worker that received the payload over SSH serves it to the other workers on
# the internal network (random port, 128-bit token in the URL) until the client closes its stdin.
#
# Part of the worker agent: shipped.program('push_agent') puts this file's text in place of push_agent.py's import of
# it, so it stays standard-library only, Python 3.8 syntax, with no `from __future__` import.
import json
import os
import shutil
import sys
import threading

CHUNK = 1024 * 1024


class Relay:
    """Serves the payload to the other workers on the internal network until stdin closes (or time is up)."""

    def __init__(self, payload, host, token, seconds):
        self.payload, self.host, self.token, self.seconds = payload, host, token, seconds
        self.server = None

    def start(self):
        from http.server import BaseHTTPRequestHandler, HTTPServer

        payload, token = self.payload, self.token

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path != "/" + token:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(os.path.getsize(payload)))
                self.end_headers()
                with open(payload, "rb") as handle:
                    shutil.copyfileobj(handle, self.wfile, CHUNK)

            def log_message(self, *args):
                pass

        class Server(HTTPServer):
            def process_request(self, request, client_address):  # one thread per fetching worker
                threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                 daemon=True).start()

            def process_request_thread(self, request, client_address):
                try:
                    self.finish_request(request, client_address)
                finally:
                    self.shutdown_request(request)

        try:
            self.server = Server((self.host, 0), Handler)
        except OSError:
            # This worker cannot serve on that address: say so, the client copies to the others directly.
            print(json.dumps({"serving": None}), flush=True)
            return
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        print(json.dumps({"serving": self.server.server_address[1]}), flush=True)

    def wait_and_stop(self):
        if self.server is None:
            return
        stdin_closed = threading.Event()

        def wait_for_eof():
            try:
                while sys.stdin.buffer.read(CHUNK):
                    pass
            finally:
                stdin_closed.set()

        threading.Thread(target=wait_for_eof, daemon=True).start()
        stdin_closed.wait(self.seconds)  # the client closes stdin when every other worker has its copy
        self.server.shutdown()
