"""The driver's HTTP endpoint: serving statistics, health, readiness and Prometheus metrics."""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from scorestream.api.job_http import (MAX_EXECUTORS, MAX_REQUEST_BYTES, Failure, Models, Readiness, ScaleRequest,
                                      Stats, explain)
from scorestream.runtime.job_metrics import JobCollector
from scorestream.runtime.stats import ServingStats

log = logging.getLogger(__name__)
NO_SESSION = Failure(error="the Spark session is not up yet")


# A request's whole read (headers and body) must arrive within this: a client announcing more
# body than it sends (a bogus Content-Length) holds a handler thread this long, not forever.
READ_TIMEOUT_SECONDS = 5.0


def read_token(path: str | None) -> str | None:
    """The control token from its file (the operator's Secret, mounted); None when none is
    configured. An empty file is refused: it would let an empty bearer token in."""
    if path is None:
        return None
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"control token file {path} is empty")
    return token


class StatusServer:
    """``/stats`` (ModelServingInfo per dataType), ``/models``, ``/healthz``, ``/readyz``, ``/metrics``
    on every port; ``POST /executors`` only on the control port (``port``), with the bearer token.
    ``metrics_port``: a second, read-only port for monitoring and probes."""

    READ_ONLY = ("/stats", "/models", "/metrics", "/healthz", "/readyz")

    def __init__(self, host: str, port: int, stats: ServingStats, ready: Callable[[], Readiness],
                 executors: Callable[[], Any] | None = None, namespace: str = "", name: str = "",
                 token: str | None = None, metrics_port: int | None = None,
                 kafka_errors: Callable[[], list] | None = None):
        self.stats = stats
        self.kafka_errors = kafka_errors or list  # the job's ReplicaWatch.errors (runtime.kafka_health)
        self.ready = ready
        self.executors = executors or (lambda: None)
        self.token = token
        self.metrics = CollectorRegistry()
        self.metrics.register(JobCollector(stats, ready, namespace, name))
        self.httpd = self._server(host, port, control=True)
        self.port = self.httpd.server_address[1]
        self.metrics_httpd = None if metrics_port is None else self._server(host, metrics_port, control=False)
        self.metrics_port = None if self.metrics_httpd is None else self.metrics_httpd.server_address[1]
        self.threads = [threading.Thread(target=h.serve_forever, name=f"status-http-{h.server_address[1]}", daemon=True)
                        for h in (self.httpd, self.metrics_httpd) if h is not None]

    def _server(self, host: str, port: int, control: bool) -> ThreadingHTTPServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_SECONDS  # the socket's: every read of the request, and a kept connection's idleness
            # Keep-alive: the operator's three answers of a poll, and a scrape's, on one connection
            # each (every answer has its Content-Length; an error closes the connection).
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - the stdlib's name
                path = self.path.split("?", 1)[0].rstrip("/") or "/"
                route = {
                    "/healthz": server._healthz,
                    "/readyz": server._readyz,
                    "/metrics": server._metrics,
                    "/stats": server._stats,
                    "/models": server._models,
                    **({"/executors": server._get_executors} if control else {}),
                }.get(path)
                if route is None:
                    return self._send(404, Failure(error=f"no such path {path}", paths=list(server.READ_ONLY)))
                self._send(*route())

            def do_POST(self):  # noqa: N802
                path = self.path.split("?", 1)[0].rstrip("/")
                if path != "/executors" or not control:
                    self.close_connection = True  # its body is not read
                    return self._send(404, Failure(error=f"no POST on {path} on this port",
                                                   paths=["/executors"] if control else []))
                refusal = server._refuse(self.headers.get("Authorization"))
                if refusal is not None:
                    self.close_connection = True
                    return self._send(*refusal)
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    self.close_connection = True
                    return self._send(400, Failure(error="Content-Length is not a number"))
                if not 0 <= length <= MAX_REQUEST_BYTES:
                    # Not read: the connection is closed instead, whatever follows.
                    self.close_connection = True
                    return self._send(413, Failure(error=f"a request body is at most {MAX_REQUEST_BYTES} bytes"))
                try:
                    body = self.rfile.read(length)
                except TimeoutError:
                    self.close_connection = True
                    return self._send(408, Failure(error=f"the body did not arrive in {READ_TIMEOUT_SECONDS:.0f} s"))
                if len(body) < length:
                    self.close_connection = True
                    return self._send(400, Failure(error="the body is shorter than its Content-Length"))
                try:
                    asked = ScaleRequest.model_validate_json(body or b"{}")
                except ValidationError as e:
                    return self._send(400, Failure(
                        error=f"expected {{\"total\": N}}, 0 <= N <= {MAX_EXECUTORS}: {explain(e)}"))
                self._send(*server._scale(asked.total))

            def _send(self, code, body: BaseModel | dict | bytes, ctype="application/json", headers=()):
                if isinstance(body, BaseModel):
                    body = body.model_dump(mode="json")
                data = body if isinstance(body, bytes) else (json.dumps(body, indent=1) + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt, *args):
                log.debug("http: " + fmt, *args)

        httpd = ThreadingHTTPServer((host, port), Handler)
        httpd.daemon_threads = True
        return httpd

    def _refuse(self, authorization: str | None):
        """Why a request to the mutating endpoint is refused, or None. The answer never says what
        the token is or how close a guess came."""
        if self.token is None:
            return 403, Failure(error="the control endpoint is disabled: no control token is configured")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            return 401, Failure(error="a bearer token is required"), "application/json", [("WWW-Authenticate", "Bearer")]
        return None

    def start(self) -> "StatusServer":
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        for h in (self.httpd, self.metrics_httpd):
            if h is not None:
                h.shutdown()
                h.server_close()

    def _healthz(self):
        return 200, {"status": "ok"}

    def _readyz(self):
        readiness = self.ready()
        return (200 if readiness.ready else 503), readiness

    def _metrics(self):
        return 200, generate_latest(self.metrics), CONTENT_TYPE_LATEST

    def _stats(self):
        return 200, Stats(dataTypes=self.stats.serving_info(), totals=self.stats.totals(),
                          kafkaErrors=self.kafka_errors())

    def _get_executors(self):
        control = self.executors()
        if control is None:
            return 503, NO_SESSION
        return 200, control.describe()

    def _scale(self, total: int):
        control = self.executors()
        if control is None:
            return 503, NO_SESSION
        result = control.scale_to(total)
        return (202 if result.accepted else 409), result

    def _models(self):
        reg = self.stats.registry
        return 200, Models(serving=reg.serving(), candidates=reg.candidates(), rejected=list(reg.rejected))
