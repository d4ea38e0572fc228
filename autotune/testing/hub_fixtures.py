"""Hugging Face Hub fixtures for tests that cannot reach huggingface.co.

`write_hub_cache` lays files out in a hub cache directory exactly as huggingface_hub does
(`models--org--repo/{blobs,snapshots/<commit>,refs}`), for the real library to read back with
`local_files_only`. `LocalHubEndpoint` is an HTTP server on 127.0.0.1 that answers the few hub
requests a download makes (repo info, with each file's size when asked for `blobs` as the hub does, then
HEAD and GET of `<repo>/resolve/<revision>/<file>`), for
`HF_ENDPOINT` to point at; with `break_after` it sends only that many bytes of a file and hangs up,
as a dropped connection does.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


def repo_folder(cache_dir: Path, repo: str) -> Path:
    return Path(cache_dir) / ("models--" + repo.replace("/", "--"))


def write_hub_cache(
    cache_dir: Path, repo: str, commit: str, files: dict[str, bytes], ref: str | None = "main"
) -> dict[str, Path]:
    """Put `files` (name -> content) at `commit` of `repo` into `cache_dir`, the way hf_hub_download
    leaves them: the content in `blobs/<sha256>`, a relative symlink `snapshots/<commit>/<name>` to it,
    and `refs/<ref>` holding the commit. Returns each file's snapshot path."""
    folder = repo_folder(cache_dir, repo)
    paths = {}
    for name, content in files.items():
        blob = folder / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        pointer = folder / "snapshots" / commit / name
        pointer.parent.mkdir(parents=True, exist_ok=True)
        if pointer.is_symlink() or pointer.exists():
            pointer.unlink()
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
        paths[name] = pointer
    if ref is not None:
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return paths


@dataclass
class HubRepo:
    commit: str
    files: dict[str, bytes] = field(default_factory=dict)


class LocalHubEndpoint:
    """A hub endpoint on 127.0.0.1 serving `repos` (repo id -> HubRepo); a context manager."""

    def __init__(self, repos: dict[str, HubRepo], *, break_after: int | None = None):
        self.repos = repos
        self.break_after = break_after
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "LocalHubEndpoint":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self):
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _fail(self, status: int, code: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _serve(self, body: bool) -> None:
                endpoint.requests.append(f"{self.command} {self.path}")
                path = unquote(self.path.split("?", 1)[0])
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"]:
                    return self._repo_info(parts[2:], with_sizes="blobs=" in self.path.partition("?")[2])
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._file("/".join(parts[:2]), parts[3], "/".join(parts[4:]), body)
                self._fail(404, "EntryNotFound")

            def _repo(self, repo_id: str, revision: str) -> HubRepo | None:
                repo = endpoint.repos.get(repo_id)
                if repo is None:
                    self._fail(404, "RepoNotFound")
                elif revision not in ("main", repo.commit):
                    self._fail(404, "RevisionNotFound")
                    repo = None
                return repo

            def _repo_info(self, parts: list[str], with_sizes: bool) -> None:
                repo_id = "/".join(parts[:2])
                revision = parts[3] if len(parts) > 3 and parts[2] == "revision" else "main"
                repo = self._repo(repo_id, revision)
                if repo is None:
                    return
                data = json.dumps(
                    {
                        "id": repo_id,
                        "sha": repo.commit,
                        "siblings": [
                            {"rfilename": name, **({"size": len(content)} if with_sizes else {})}
                            for name, content in repo.files.items()
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _file(self, repo_id: str, revision: str, name: str, body: bool) -> None:
                repo = self._repo(repo_id, revision)
                if repo is None:
                    return
                if name not in repo.files:
                    return self._fail(404, "EntryNotFound")
                if body and endpoint.break_after is not None and self.headers.get("Range"):
                    return self._fail(503, "Unavailable")  # a resumed transfer fails too
                content = repo.files[name]
                self.send_response(200)
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("ETag", f'"{hashlib.sha256(content).hexdigest()}"')
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if not body:
                    return
                if endpoint.break_after is None:
                    self.wfile.write(content)
                    return
                self.wfile.write(content[: endpoint.break_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # hang up mid-file

        return Handler
