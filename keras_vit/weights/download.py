"""HTTP(S) downloads into a local cache as `keras.utils.get_file` does them, resumable, checked (content.py, sha256)
before they are renamed into place (docs/pretrained_catalogue.md). Standard library and numpy only."""

import contextlib
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

from keras_vit import files
from keras_vit.weights import content

CACHE_ENV = "KERAS_VIT_CACHE"
CHUNK = 1 << 20
TIMEOUT_S = 30.0


class DownloadError(OSError):
    """A download that failed (offline, truncated, wrong checksum, HTTP error); the message says what to do."""


def cache_dir():
    """The cache folder: KERAS_VIT_CACHE, else $KERAS_HOME/keras_vit, else ~/.cache/keras_vit."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.path.expanduser(os.environ[CACHE_ENV]))
    if os.environ.get("KERAS_HOME"):
        return os.path.join(os.path.abspath(os.path.expanduser(os.environ["KERAS_HOME"])), "keras_vit")
    return os.path.join(os.path.expanduser("~"), ".cache", "keras_vit")


def url_cache_path(url):
    """Where a URL's file lives in the cache: `urls/HOST/PATH` (the host's port, if any, joined with '_')."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.replace(":", "_")
    path = [p for p in urllib.parse.unquote(parts.path).split("/") if p not in ("", ".", "..")]
    if not host or not path:
        raise ValueError(f"Cannot download {url!r}: it names no file. Give a URL ending in a file name.")
    return os.path.join(cache_dir(), "urls", host, *path)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(path):
    return f"{path}.sha256"


def _read_sidecar(path):
    try:
        with open(_sidecar(path), encoding="utf-8") as f:
            fields = f.read().split()
    except FileNotFoundError:
        return None
    return fields[0] if fields else None


def verify(path, sha256=None, entry=None):
    """Checks a cached file against `sha256` (the publisher's) or its recorded sidecar; records one if neither.

    A file with no hash to check (placed by hand, or its sidecar lost) must pass the content check
    (`content.check`, against `entry` when given) before its hash is recorded. Returns the file's sha256.
    Raises `DownloadError` on a mismatch or a failed content check, naming the file and the fix.
    """
    actual = sha256_of(path)
    expected, origin = (sha256, "the publisher's") if sha256 else (_read_sidecar(path), "the one recorded")
    if expected is None:  # placed by hand, or the sidecar was lost: record it now, if it is what it should be
        try:
            content.check(path, entry)
        except content.ContentError as err:
            raise DownloadError(
                f"{path} is not the file its name says ({err}): delete it (`rm {path}`) and run again to download "
                f"it afresh, or place the right file there."
            ) from None
        files.atomic_write_text(_sidecar(path), f"{actual}  {os.path.getsize(path)}\n")
        return actual
    if actual != expected.lower():
        raise DownloadError(
            f"{path} does not match {origin} sha256 ({actual} != {expected}): the file is corrupt or was "
            f"replaced. Delete it (and {os.path.basename(_sidecar(path))}) and download it again."
        )
    if sha256 and _read_sidecar(path) is None:
        files.atomic_write_text(_sidecar(path), f"{actual}  {os.path.getsize(path)}\n")
    return actual


def _progress(total, initial, label):
    """A tqdm bar on an interactive stderr, else None (logs and CI stay quiet)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm  # a dependency of huggingface_hub
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=label, leave=False)


def _offline_error(url, path, err, how_to_get=None):
    how = how_to_get or f"curl -L -o {path} {url}"
    return DownloadError(
        f"Cannot download {os.path.basename(path)} from {url} ({err}). Offline? Fetch it elsewhere and place it "
        f"by hand at {path} (e.g. `{how}`); it is used from there without a request."
    )


def download(url, path=None, *, sha256=None, timeout=TIMEOUT_S, how_to_get=None, label=None, entry=None):
    """Downloads `url` to `path` (default: its place in the cache) unless it is already there; returns `path`.

    Args:
        url: an http:// or https:// URL.
        path: the final local path; default `url_cache_path(url)`.
        sha256: the publisher's hex digest, if known; otherwise the first download records one.
        timeout: seconds any single socket operation may take.
        how_to_get: the command shown in the offline message for fetching the file by other means.
        label: the name shown on the progress bar.
        entry: the catalogue entry the file is, if any: its tensors and published size are checked too.

    Raises:
        DownloadError: offline (names the file, URL and where to place it), HTTP errors, a download that ended
            before its Content-Length (run again to resume), a file that is not what its name or entry says
            (names what came back), or a checksum mismatch. Nothing is left at `path`.
    """
    path = os.path.abspath(path or url_cache_path(url))
    if os.path.exists(path):
        verify(path, sha256, entry)
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _exclusive(path):  # several processes on one host (e.g. one per accelerator) download it once
        if os.path.exists(path):  # another process finished it while this one waited
            verify(path, sha256, entry)
            return path
        part = f"{path}.part"
        got, content_type = _transfer(url, part, path, timeout, how_to_get, label)
        _accept(url, part, entry, content_type)
        actual = sha256_of(part)
        if sha256 and actual != sha256.lower():
            os.remove(part)
            raise DownloadError(
                f"Downloaded {url} but its sha256 {actual} is not the publisher's {sha256}: removed. The file on "
                f"the server changed or the transfer was corrupted; try again, or check the URL."
            )
        files.replace_file(part, path)
        files.atomic_write_text(_sidecar(path), f"{actual}  {got}\n")
    return path


def _accept(url, part, entry, content_type):
    """Removes `part` and raises unless its content is what its name and `entry` say (see content.py)."""
    try:
        content.check(part, entry)
    except content.ContentError as err:
        with open(part, "rb") as f:
            first = f.read(40)
        os.remove(part)  # never resumed from, never hashed: the next call starts afresh
        raise DownloadError(
            f"Downloaded {url} but it is not the file asked for: {err}. The server answered "
            f"{content_type or 'with no Content-Type'}, starting {first!r} (a captive portal or a proxy's error "
            f"page?); nothing was cached. Check the connection or the URL and run again."
        ) from None


@contextlib.contextmanager
def _exclusive(path):
    """An advisory lock on `path.lock` (released by the OS if the process dies); a no-op without fcntl."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock; concurrent downloads of one file are then the user's to avoid
        yield
        return
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _transfer(url, part, path, timeout, how_to_get, label):
    """Appends the rest of `url` to `part` (all of it when the server ignores Range); returns (size, Content-Type)."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "keras-vit", "Accept-Encoding": "identity"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # our part is no prefix of the server's file: start again
            os.remove(part)
            return _transfer(url, part, path, timeout, how_to_get, label)
        raise DownloadError(f"Cannot download {url}: HTTP {err.code} {err.reason}. Check the name or URL.") from err
    except (urllib.error.URLError, OSError) as err:
        raise _offline_error(url, path, getattr(err, "reason", err), how_to_get) from err
    with response:
        resumed = bool(have) and response.status == 206 and _range_start(response) == have
        if response.status == 206 and not resumed:  # a range we did not ask for: never mix it into the file
            os.remove(part)
            raise DownloadError(f"{url} answered with an unexpected byte range; run again to start afresh.")
        have = have if resumed else 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        bar = _progress(total, have, label or os.path.basename(path))
        got = have
        try:
            with open(part, "ab" if resumed else "wb") as out:
                while True:
                    try:
                        block = response.read(CHUNK)
                    except http.client.IncompleteRead as err:  # the server closed before Content-Length
                        out.write(err.partial)
                        got += len(err.partial)
                        break
                    if not block:
                        break
                    out.write(block)
                    got += len(block)
                    if bar is not None:
                        bar.update(len(block))
                out.flush()
                os.fsync(out.fileno())
        except (TimeoutError, ConnectionError) as err:
            raise DownloadError(
                f"Download of {url} stopped at {got} bytes ({err}); run again to resume it (kept in {part})."
            ) from err
        finally:
            if bar is not None:
                bar.close()
    if total is not None and got != total:
        raise DownloadError(
            f"Download of {url} ended at {got} of {total} bytes (the connection closed early); run again to "
            f"resume it (the part is kept in {part}, never at {path})."
        )
    return got, response.headers.get("Content-Type")


def _range_start(response):
    """The first byte of a 206 response's Content-Range ("bytes 100-199/200" -> 100), or None."""
    value = response.headers.get("Content-Range", "")
    try:
        return int(value.split()[1].split("-")[0])
    except (IndexError, ValueError):
        return None
