"""STAND-IN for the Hugging Face Hub: a local HTTP server speaking the small part of the Hub protocol that
``huggingface_hub`` and ``datasets`` use to download a pinned revision of a repo.

Why a stand-in and not a hand-built cache: ``datasets`` (5.x) cannot load a Hub dataset offline from the hub
cache layout alone; offline it reads the *prepared* cache that an earlier online ``load_dataset`` wrote under
``HF_HOME/datasets``. The only faithful way to produce that cache in a test is to run the real online code path,
so the tests point ``HF_ENDPOINT`` at this server and let the real fetch code download and prepare.

Served per repo: ``resolve`` (HEAD/GET, with the headers huggingface_hub reads: X-Repo-Commit, ETag, size),
``revision`` info (sha + siblings; also at ``/api/<type>s/<id>``, the default branch's), ``tree`` listings,
``paths-info``. Gated repos answer 401 without an
``Authorization`` header, as the Hub does, so token handling is exercised too. No xet, no LFS pointers.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class StandInRepo:
    repo_id: str
    repo_type: str  # "dataset" or "model"
    commit: str  # the 40-hex commit the stand-in reports (the real pinned revision, in fixtures)
    files: dict[str, bytes]
    gated: bool = False
    branches: tuple[str, ...] = ("main",)
    _sha1: dict[str, str] = field(default_factory=dict, repr=False)

    def etag(self, path: str) -> str:
        # The Hub's ETag for a regular (non-LFS) file is its git blob sha1.
        if path not in self._sha1:
            data = self.files[path]
            self._sha1[path] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return self._sha1[path]


class HubStandIn:
    """``with HubStandIn(repos) as hub: env["HF_ENDPOINT"] = hub.url`` (a thread; stopped on exit)."""

    def __init__(self, repos: list[StandInRepo], rate_limited: int = 0):
        """``rate_limited``: answer the first that many requests 429 (the hub's rate limit), then behave."""
        self.repos = {(r.repo_type, r.repo_id): r for r in repos}
        self.rate_limited = rate_limited
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet; requests are recorded instead
                pass

            def do_HEAD(self):
                self._route(send_body=False)

            def do_GET(self):
                self._route(send_body=True)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self._body = self.rfile.read(length)
                self._route(send_body=True)

            def _reply(self, status: int, body: bytes = b"", headers: dict | None = None, send_body: bool = True):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body and body:
                    self.wfile.write(body)

            def _error(self, status: int, code: str, send_body: bool):
                self._reply(status, json.dumps({"error": code}).encode(), {"X-Error-Code": code}, send_body)

            def _json(self, data, send_body: bool):
                self._reply(200, json.dumps(data).encode(), {"Content-Type": "application/json"}, send_body)

            def _repo(self, repo_type: str, repo_id: str, rev: str, send_body: bool) -> StandInRepo | None:
                repo = hub.repos.get((repo_type, repo_id))
                if repo is None:
                    self._error(404, "RepoNotFound", send_body)
                    return None
                if repo.gated and not self.headers.get("Authorization"):
                    self._error(401, "GatedRepo", send_body)
                    return None
                if rev not in (repo.commit, *repo.branches):
                    self._error(404, "RevisionNotFound", send_body)
                    return None
                return repo

            def _route(self, send_body: bool):
                parsed = urllib.parse.urlparse(self.path)
                path = urllib.parse.unquote(parsed.path)
                query = urllib.parse.parse_qs(parsed.query)
                hub.requests.append(f"{self.command} {path}")
                if hub.rate_limited > 0:
                    hub.rate_limited -= 1
                    return self._error(429, "RateLimited", send_body)
                parts = path.strip("/").split("/")
                if parts[0] == "api" and len(parts) == 4 and parts[1] in ("datasets", "models"):
                    # the repo's info at its default branch (datasets asks it of a repo without a card)
                    repo = self._repo(parts[1][:-1], "/".join(parts[2:4]), "main", send_body)
                    return None if repo is None else self._json(self._info(repo), send_body)
                if parts[0] == "api" and len(parts) >= 6 and parts[1] in ("datasets", "models"):
                    repo_type = parts[1][:-1]
                    repo_id, action, rev = "/".join(parts[2:4]), parts[4], parts[5]
                    repo = self._repo(repo_type, repo_id, rev, send_body)
                    if repo is None:
                        return
                    sub = "/".join(parts[6:])
                    if action == "revision":
                        return self._json(self._info(repo), send_body)
                    if action == "tree":
                        recursive = query.get("recursive", ["false"])[0].lower() == "true"
                        return self._json(self._tree(repo, sub, recursive), send_body)
                    if action == "paths-info":
                        form = urllib.parse.parse_qs(getattr(self, "_body", b"").decode())
                        wanted = form.get("paths", [])
                        if not wanted:
                            try:
                                wanted = json.loads(self._body or b"{}").get("paths", [])
                            except ValueError:
                                wanted = []
                        return self._json(self._paths_info(repo, wanted), send_body)
                    return self._error(404, "EntryNotFound", send_body)
                # /datasets/<org>/<name>/resolve/<rev>/<path> or /<org>/<name>/resolve/<rev>/<path> (models)
                if parts[0] == "datasets":
                    repo_type, parts = "dataset", parts[1:]
                else:
                    repo_type = "model"
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = self._repo(repo_type, "/".join(parts[:2]), parts[3], send_body)
                    if repo is None:
                        return
                    file_path = "/".join(parts[4:])
                    if file_path not in repo.files:
                        return self._error(404, "EntryNotFound", send_body)
                    data = repo.files[file_path]
                    headers = {
                        "X-Repo-Commit": repo.commit,
                        "ETag": f'"{repo.etag(file_path)}"',
                        "Content-Type": "application/octet-stream",
                    }
                    return self._reply(200, data, headers, send_body)
                return self._error(404, "RepoNotFound", send_body)

            @staticmethod
            def _entry(repo: StandInRepo, path: str) -> dict:
                return {"type": "file", "path": path, "size": len(repo.files[path]), "oid": repo.etag(path)}

            def _info(self, repo: StandInRepo) -> dict:
                return {
                    "id": repo.repo_id,
                    "sha": repo.commit,
                    "private": False,
                    "gated": "auto" if repo.gated else False,
                    "siblings": [{"rfilename": p, "size": len(d)} for p, d in sorted(repo.files.items())],
                }

            def _tree(self, repo: StandInRepo, sub: str, recursive: bool) -> list[dict]:
                prefix = f"{sub}/" if sub else ""
                out, dirs = [], set()
                for p in sorted(repo.files):
                    if not p.startswith(prefix):
                        continue
                    rest = p[len(prefix) :]
                    if "/" in rest and not recursive:
                        dirs.add(prefix + rest.split("/", 1)[0])
                        continue
                    if recursive:
                        segs = rest.split("/")[:-1]
                        for i in range(len(segs)):
                            dirs.add(prefix + "/".join(segs[: i + 1]))
                    out.append(self._entry(repo, p))
                return [{"type": "directory", "path": d, "oid": "0" * 40} for d in sorted(dirs)] + out

            def _paths_info(self, repo: StandInRepo, wanted: list[str]) -> list[dict]:
                out = []
                for p in wanted:
                    p = p.strip("/")
                    if p in repo.files:
                        out.append(self._entry(repo, p))
                    elif any(f.startswith(p + "/") for f in repo.files) or p == "":
                        out.append({"type": "directory", "path": p, "oid": "0" * 40})
                return out

        return Handler


def repo_from_dir(repo_id: str, repo_type: str, commit: str, src: Path, gated: bool = False) -> StandInRepo:
    files = {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted(Path(src).rglob("*")) if p.is_file()}
    return StandInRepo(repo_id=repo_id, repo_type=repo_type, commit=commit, files=files, gated=gated)
