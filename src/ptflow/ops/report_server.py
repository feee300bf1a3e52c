"""``ptflow report serve``: the built report over HTTP on loopback, with the range requests inspect's log viewer
needs to read ``.eval`` logs (``python -m http.server`` has none). The rest of the report opens from ``file://``."""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path


class RangeRequestHandler(http.server.SimpleHTTPRequestHandler):
    """The standard library's static file handler plus single-range ``Range`` requests (what inspect's viewer needs
    to read ``.eval`` logs); multi-range requests get the whole file, which HTTP allows."""

    _range: tuple[int, int] | None = None

    def send_head(self):
        self._range = None
        path = self.translate_path(self.path)
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if not m or not os.path.isfile(path) or m.group(1) == m.group(2) == "":
            return super().send_head()
        size = os.path.getsize(path)
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        else:  # suffix range: the last N bytes
            start, end = max(size - int(m.group(2)), 0), size - 1
        if start > end or start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        fh = open(path, "rb")  # closed by the base class's do_GET after copyfile
        fh.seek(start)
        self._range = (start, end)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return fh

    def end_headers(self):
        if self._range is None and self.command in ("GET", "HEAD"):
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def copyfile(self, source, outputfile):
        if self._range is None:
            return super().copyfile(source, outputfile)
        left = self._range[1] - self._range[0] + 1
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)

    def log_message(self, format, *args):  # one line per request is noise for a report server
        pass


def serve(directory: str | Path, host: str = "127.0.0.1", port: int = 0) -> http.server.ThreadingHTTPServer:
    """Serve ``directory`` in a background thread (loopback by default); the caller calls ``shutdown()``."""
    handler = functools.partial(RangeRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="ptflow-report-server", daemon=True).start()
    return server
