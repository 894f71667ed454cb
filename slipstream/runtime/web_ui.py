"""The web view of a running job (``ui_port``, ``slipstream run --ui PORT``), served by the job's process.

A standard-library HTTP server on 127.0.0.1, on threads of its own, with:

* ``/`` — the page (:mod:`slipstream.runtime.web_page`): the plan as a picture, live per-operator
  throughput, backlog progress with its ETA, the switch time, watermarks, checkpoint history;
* ``/api/plan`` — the plan document (:func:`~slipstream.runtime.plan_formats.plan_document`);
* ``/api/progress`` — the monitor's latest sample
  (:class:`~slipstream.datastream.progress_listener.JobProgress`) as JSON;
* ``/plan.svg`` — the plan picture alone;
* ``/metrics`` — the same figures in Prometheus's format (:mod:`slipstream.runtime.prometheus`).

Every answer is built from what the monitor already sampled, so a browser never touches the job.
"""

from __future__ import annotations

import json
import threading
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from slipstream.runtime.plan_svg import plan_svg
from slipstream.runtime.prometheus import HOST, progress_registry
from slipstream.runtime.web_page import PAGE

if TYPE_CHECKING:
    from slipstream.runtime.monitor import JobMonitor


class _Handler(BaseHTTPRequestHandler):
    server: _WebServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        route = self.path.split("?", 1)[0]
        web = self.server.web
        if route in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", web.page().encode())
        elif route == "/api/progress":
            self._send(200, "application/json", json.dumps(web.monitor.latest.to_dict()).encode())
        elif route == "/api/plan":
            self._send(200, "application/json", json.dumps(web.monitor.plan).encode())
        elif route == "/plan.svg":
            self._send(200, "image/svg+xml", web.svg.encode())
        elif route == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(web.registry))
        else:
            self._send(404, "text/plain; charset=utf-8", f"no page {route}\n".encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a browser polling every second must not fill the job's stderr."""


class _WebServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, web: WebUI, port: int) -> None:
        self.web = web
        super().__init__((HOST, port), _Handler)


class WebUI:
    """The web view of one job, served until :meth:`close`."""

    def __init__(self, monitor: JobMonitor, port: int) -> None:
        self.monitor = monitor
        self.svg = plan_svg(monitor.plan)
        self.registry = progress_registry(monitor)
        self._server = _WebServer(self, port)
        self.port: int = self._server.server_address[1]
        self.url = f"http://{HOST}:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, name="slipstream web view", daemon=True)
        self._thread.start()

    def page(self) -> str:
        latest = self.monitor.latest
        return PAGE.substitute(title=escape(latest.job_name), status=escape(latest.status),
                               job_id=escape(latest.job_id), svg=self.svg,
                               refresh_ms=max(250, int(self.monitor.interval * 1000)))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_web_ui(monitor: JobMonitor, port: int) -> WebUI:
    """Serve ``monitor``'s job on ``port`` of 127.0.0.1 (0: a free one) until :meth:`WebUI.close`."""
    return WebUI(monitor, port)


__all__ = ["WebUI", "serve_web_ui"]
