"""A small real HTTP SkyRL server for SkyRL-style two-job training (the CPU side of ``ptflow.launch.skyrl``).

Stands in for SkyRL's sandbox runtime service (which needs GPUs/podman sandboxes this machine cannot run) with the
same contract the trainer relies on: it is a real server, not a mock.

- ``GET /health``   -> ``{"status": "ok"}`` (no key needed: the trainer's readiness probe)
- ``POST /execute`` -> runs ``{"command": [argv...], "timeout": s}`` (no shell) with a timeout, answers
  ``{"returncode", "stdout", "stderr", "timed_out"}``; needs header ``X-API-Key`` equal to the key file's content
  (401 otherwise). With ``--wrap`` (e.g. ``podman --url unix://… run --rm IMAGE``) each command runs inside that
  prefix: FASRC's sandboxes go through the job's podman socket.

Start-up writes ``runtime_url.txt`` (atomically) and then ``runtime_ready.flag`` into the coordination dir; the
server exits when ``training_complete.flag`` appears there (or on SIGTERM, which scancel sends).
The API key is read from the key file (mode 600) and never printed.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ptflow.files import write_text_atomic

URL_FILE = "runtime_url.txt"
KEY_FILE = "runtime_api_key.txt"
READY_FLAG = "runtime_ready.flag"
COMPLETE_FLAG = "training_complete.flag"
KEY_HEADER = "X-API-Key"
MAX_BODY = 1 << 20


def make_handler(key: str, wrap: list[str], max_timeout: float):
    class Handler(BaseHTTPRequestHandler):
        server_version = "ptflow-runtime/1"

        def log_message(self, fmt, *args):  # one line per request on stderr (the job log); no headers, no key
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {fmt % args}\n")

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server naming)
            if self.path == "/health":
                return self._send(200, {"status": "ok", "pid": os.getpid()})
            return self._send(404, {"error": f"no such path {self.path}; use GET /health or POST /execute"})

        def do_POST(self):  # noqa: N802
            if self.path != "/execute":
                return self._send(404, {"error": f"no such path {self.path}; use POST /execute"})
            given = self.headers.get(KEY_HEADER, "")
            if not hmac.compare_digest(given.encode(), key.encode()):
                return self._send(401, {"error": f"missing or wrong {KEY_HEADER} header"})
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._send(413, {"error": f"request body over {MAX_BODY} bytes"})
            try:
                req = json.loads(self.rfile.read(length) or b"{}")
                command = req["command"]
                if not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
                    raise ValueError("command must be a non-empty list of strings (an argv, no shell)")
                timeout = min(float(req.get("timeout", 30)), max_timeout)
            except (ValueError, KeyError, TypeError) as exc:
                return self._send(400, {"error": f"bad request: {exc}"})
            try:
                proc = subprocess.run(wrap + command, capture_output=True, text=True, timeout=timeout)
                return self._send(
                    200,
                    {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "timed_out": False},
                )
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                return self._send(200, {"returncode": None, "stdout": out, "stderr": "", "timed_out": True})
            except OSError as exc:
                return self._send(200, {"returncode": 127, "stdout": "", "stderr": str(exc), "timed_out": False})

    return Handler


def serve(coord: Path, host: str, port: int, advertise: str, wrap: list[str], max_timeout: float, poll: float) -> int:
    coord = Path(coord)
    key_path = coord / KEY_FILE
    if not key_path.is_file():
        print(f"skyrl server: API key file {key_path} is missing; the trainer's launcher writes it", file=sys.stderr)
        return 2
    if key_path.stat().st_mode & 0o077:
        print(f"skyrl server: {key_path} is readable by others; it must be mode 600", file=sys.stderr)
        return 2
    key = key_path.read_text().strip()
    httpd = ThreadingHTTPServer((host, port), make_handler(key, wrap, max_timeout))
    httpd.daemon_threads = True
    url = f"http://{advertise}:{httpd.server_address[1]}"
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(poll):
            if (coord / COMPLETE_FLAG).exists():
                print(f"skyrl server: {COMPLETE_FLAG} found, shutting down", flush=True)
                break
        httpd.shutdown()

    def on_signal(signum, _frame) -> None:
        print(f"skyrl server: signal {signum}, shutting down", flush=True)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    write_text_atomic(coord / URL_FILE, url + "\n")
    write_text_atomic(coord / READY_FLAG, f"{time.time():.3f} pid={os.getpid()} host={socket.gethostname()}\n")
    print(f"skyrl server: serving {url} (pid {os.getpid()})", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        httpd.server_close()
    print("skyrl server: stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ptflow.launch.skyrl_server", description=__doc__.splitlines()[0])
    ap.add_argument("--coord", required=True, help="the run's coordination dir (key file, flags, url)")
    ap.add_argument("--host", default="0.0.0.0", help="address to bind")
    ap.add_argument("--port", type=int, default=0, help="0 = a free port")
    ap.add_argument("--advertise", default=socket.getfqdn(), help="host name/address written into runtime_url.txt")
    ap.add_argument("--max-timeout", type=float, default=600.0, help="upper bound of a command's timeout (s)")
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between checks for training_complete.flag")
    ap.add_argument("--wrap", default="", help="prefix each command with this argv (space-separated), e.g. podman run")
    args = ap.parse_args(argv)
    return serve(Path(args.coord), args.host, args.port, args.advertise, args.wrap.split(), args.max_timeout, args.poll)


if __name__ == "__main__":
    sys.exit(main())
