"""A real HTTP server on loopback that lays files out as the weights' hosts do (the bucket's object paths, the
Hub's `/{repo}/resolve/{revision}/{filename}` with its headers), and the `env` fixture that points the library at it.
tests/conftest.py makes `server` and `env` fixtures of every test."""

import dataclasses
import hashlib
import http.server
import io
import socket
import threading
import urllib.parse

import numpy as np
import pytest

from keras_vit.weights import catalogue

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TIMEOUT = 5.0


def npz_bytes(seed=0, classes=21843, **extra):
    """A tiny stand-in for a catalogue file: the tensors every ViT .npz holds, a head `classes` wide."""
    buffer = io.BytesIO()
    rng = np.random.default_rng(seed)
    arrays = {
        "embedding/kernel": rng.normal(size=(2, 2, 3, 4)),
        "cls": rng.normal(size=(1, 1, 4)),
        "Transformer/encoder_norm/scale": rng.normal(size=(4,)),
        "head/kernel": rng.normal(size=(4, classes)).astype("float16"),
    }
    np.savez(buffer, **arrays, **extra)
    return buffer.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = TIMEOUT  # a client that stops talking cannot hold a server thread

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body):
        state = self.server.state
        raw = self.path.split("?", 1)[0]
        path = urllib.parse.unquote(raw)
        state.requests.append((self.command, raw, dict(self.headers)))
        hub = "/resolve/" in path
        data = state.files.get(path)
        if data is None:
            self.send_response(404)
            if hub:
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start = 0
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and state.honour_range:
            start = int(ranged[len("bytes=") :].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        if hub:
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Type", state.types.get(path, "application/octet-stream"))
        self.end_headers()
        if not body:
            return
        payload = data[start:]
        if state.delay:  # a slow transfer, so that concurrent clients overlap
            import time

            time.sleep(state.delay)
        if path in state.truncate:  # promise the whole file, send half, hang up
            state.truncate.discard(path)
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(payload)


class _State:
    def __init__(self):
        self.files, self.requests, self.truncate, self.honour_range, self.delay = {}, [], set(), True, 0.0
        self.types = {}  # path -> Content-Type (default application/octet-stream)


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.state = _State()
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    httpd.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(TIMEOUT)


@pytest.fixture
def env(tmp_path, monkeypatch, server):
    # The files served here are tiny stand-ins, so the catalogue's published sizes are set aside (a test that
    # checks sizes puts its entry's back).
    sizeless = {n: dataclasses.replace(e, size_mib=None, size_source=None) for n, e in catalogue.CATALOGUE.items()}
    monkeypatch.setattr(catalogue, "CATALOGUE", sizeless)
    monkeypatch.setenv("KERAS_VIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(catalogue.GCS_ENDPOINT_ENV, server.url)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path


def hub_files(server, repo, revision, files):
    """Serves `files` ({name: bytes}) as the Hub repo `repo` at `revision`."""
    for name, data in files.items():
        server.state.files[f"/{repo}/resolve/{revision}/{name}"] = data
