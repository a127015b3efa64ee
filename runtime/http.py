"""The driver's HTTP endpoint: serving statistics, health, readiness and Prometheus metrics."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from scorestream.runtime.stats import ServingStats, StatsCollector

log = logging.getLogger(__name__)


class StatusServer:
    """``/stats`` (ModelServingInfo per dataType), ``/models``, ``/healthz``, ``/readyz``, ``/metrics``."""

    def __init__(self, host: str, port: int, stats: ServingStats, ready: Callable[[], tuple[bool, str]],
                 executors: Callable[[], Any] | None = None):
        self.stats = stats
        self.ready = ready
        self.executors = executors or (lambda: None)
        self.metrics = CollectorRegistry()
        self.metrics.register(StatsCollector(stats))
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
                    return self._send(404, {"error": f"no such path {path}", "paths": ["/stats", "/models", "/metrics", "/healthz", "/readyz"]})
                self._send(*route())

            def do_POST(self):  # noqa: N802
                path = self.path.split("?", 1)[0].rstrip("/")
                if path != "/executors":
                    return self._send(404, {"error": f"no POST on {path}", "paths": ["/executors"]})
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    total = body["total"]
                    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
                        raise ValueError("total must be a non-negative integer")
                except (ValueError, KeyError, TypeError) as e:
                    return self._send(400, {"error": f"expected {{\"total\": N}}: {e}"})
                self._send(*server._scale(total))

            def _send(self, code, body, ctype="application/json"):
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
        ok, why = self.ready()
        return (200 if ok else 503), {"ready": ok, "reason": why}

    def _metrics(self):
        return 200, generate_latest(self.metrics), CONTENT_TYPE_LATEST

    def _stats(self):
        return 200, {"dataTypes": self.stats.serving_info(), "totals": self.stats.totals()}

    def _get_executors(self):
        control = self.executors()
        if control is None:
            return 503, {"error": "the Spark session is not up yet"}
        return 200, control.describe()

    def _scale(self, total: int):
        control = self.executors()
        if control is None:
            return 503, {"error": "the Spark session is not up yet"}
        result = control.scale_to(total)
        return (202 if result.get("accepted") else 409), result

    def _models(self):
        reg = self.stats.registry
        return 200, {"serving": reg.serving(), "candidates": reg.candidates(), "rejected": list(reg.rejected)}
