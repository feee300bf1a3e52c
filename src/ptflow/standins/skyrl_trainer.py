"""STAND-IN for SkyRL's GPU trainer (SkyRL needs GPUs and vLLM, which this machine does not have).

It does what the trainer side of the two-job setup does with the SkyRL server, for real: reads the server's URL
and API key from the environment (``SKYRL_RUNTIME_URL``, ``SKYRL_API_KEY`` — never argv), checks ``/health``, sends
``--calls`` code executions to ``/execute`` and checks their output. It does not learn anything: the "checkpoint"
it writes is a copy of the start model plus ``skyrl_standin.json`` recording the calls. If the server stops
answering it fails at once naming the URL (exit code 3).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

KEY_HEADER = "X-API-Key"
EXIT_SERVER_GONE = 3


class ServerGone(RuntimeError):
    pass


def _request(url: str, key: str | None, body: dict | None = None, timeout: float = 30) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header(KEY_HEADER, key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(
            f"runtime server answered {exc.code} for {url}: {exc.read().decode(errors='replace')}"
        ) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        raise ServerGone(f"runtime server at {url} stopped answering ({exc}); did its Slurm job die?") from None


def run(start_model: str | None, out: Path, calls: int, interval: float, log=print) -> dict:
    url = os.environ.get("SKYRL_RUNTIME_URL", "").rstrip("/")
    key = os.environ.get("SKYRL_API_KEY", "")
    if not url or not key:
        raise RuntimeError(
            "SKYRL_RUNTIME_URL and SKYRL_API_KEY must be set (ptflow.launch.skyrl sets them for the trainer)"
        )
    _request(f"{url}/health", None)
    log(f"skyrl stand-in: runtime server {url} healthy")
    results = []
    for i in range(calls):
        code = f"print({i} * {i} + 1)"
        ans = _request(f"{url}/execute", key, {"command": [sys.executable, "-c", code], "timeout": 30})
        if ans.get("returncode") != 0 or ans.get("stdout", "").strip() != str(i * i + 1):
            raise RuntimeError(f"runtime server executed {code!r} wrongly: {ans}")
        results.append({"call": i, "stdout": ans["stdout"].strip()})
        log(f"skyrl stand-in: call {i + 1}/{calls} ok")
        if i + 1 < calls:
            time.sleep(interval)
    out.mkdir(parents=True, exist_ok=True)
    if start_model:
        shutil.copytree(start_model, out, dirs_exist_ok=True, symlinks=False)
    summary = {"standin": True, "runtime_url": url, "calls": results, "step": calls, "train_loss": None}
    (out / "skyrl_standin.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ptflow.standins.skyrl_trainer", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--start-model")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args(argv)
    try:
        run(args.start_model, Path(args.out), args.calls, args.interval, log=lambda m: print(m, flush=True))
    except ServerGone as exc:
        print(f"skyrl stand-in: {exc}", file=sys.stderr, flush=True)
        return EXIT_SERVER_GONE
    return 0


if __name__ == "__main__":
    sys.exit(main())
