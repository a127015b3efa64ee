"""The driver's HTTP endpoint: serving statistics, health, readiness and Prometheus metrics."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from scorestream.api.job_http import Failure, Models, Readiness, ScaleRequest, Stats, explain
from scorestream.runtime.job_metrics import JobCollector
from scorestream.runtime.stats import ServingStats

log = logging.getLogger(__name__)
NO_SESSION = Failure(error="the Spark session is not up yet")


class StatusServer:
    """``/stats`` (ModelServingInfo per dataType), ``/models``, ``/healthz``, ``/readyz``, ``/metrics``."""

    def __init__(self, host: str, port: int, stats: ServingStats, ready: Callable[[], Readiness],
                 executors: Callable[[], Any] | None = None, namespace: str = "", name: str = ""):
        self.stats = stats
        self.ready = ready
        self.executors = executors or (lambda: None)
        self.metrics = CollectorRegistry()
        self.metrics.register(JobCollector(stats, ready, namespace, name))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the stdlib's name
                path = self.path.split("?", 1)[0].rstrip("/") or "/"
                route = {
                    "/healthz": server._healthz,
                    "/readyz": server._readyz,
                    "/metrics": server._metrics,
                    "/stats": server._stats,
                    "/models": server._models,
                    "/executors": server._get_executors,
                }.get(path)
                if route is None:
                    return self._send(404, Failure(error=f"no such path {path}",
                                                   paths=["/stats", "/models", "/metrics", "/healthz", "/readyz"]))
                self._send(*route())

            def do_POST(self):  # noqa: N802
                path = self.path.split("?", 1)[0].rstrip("/")
                if path != "/executors":
                    return self._send(404, Failure(error=f"no POST on {path}", paths=["/executors"]))
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    asked = ScaleRequest.model_validate_json(self.rfile.read(length) or b"{}")
                except ValidationError as e:
                    return self._send(400, Failure(error=f"expected {{\"total\": N}}, N >= 0: {explain(e)}"))
                except ValueError as e:  # Content-Length
                    return self._send(400, Failure(error=str(e)))
                self._send(*server._scale(asked.total))

            def _send(self, code, body: BaseModel | dict | bytes, ctype="application/json"):
                if isinstance(body, BaseModel):
                    body = body.model_dump(mode="json")
                data = body if isinstance(body, bytes) else (json.dumps(body, indent=1) + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt, *args):
                log.debug("http: " + fmt, *args)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="status-http", daemon=True)

    def start(self) -> "StatusServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _healthz(self):
        return 200, {"status": "ok"}

    def _readyz(self):
        readiness = self.ready()
        return (200 if readiness.ready else 503), readiness

    def _metrics(self):
        return 200, generate_latest(self.metrics), CONTENT_TYPE_LATEST

    def _stats(self):
        return 200, Stats(dataTypes=self.stats.serving_info(), totals=self.stats.totals())

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
