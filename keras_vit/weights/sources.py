"""`fetch(source)`: a catalogue name, `https://`, `gs://`, `hf://ORG/NAME[@REVISION]` or a local path -> a local file
or folder, downloading into a cache if needed. Imports no TensorFlow or Keras."""

import dataclasses
import difflib
import importlib.util
import os
import re
import urllib.parse

from keras_vit import files
from keras_vit.weights import catalogue, catalogue_families, download

# What a Hub repo of each layout holds. timm and transformers: config.json + model.safetensors (+ the processor
# config); a keras-hub preset: config.json, metadata.json, model.weights.h5 (+ the task files for a classifier).
_HF_OPTIONAL = ("preprocessor_config.json",)
_KERAS_HUB_REQUIRED = ("model.weights.h5",)
_KERAS_HUB_OPTIONAL = ("task.json", "task.weights.h5", "preprocessor.json")

_HF_ID = re.compile(r"^hf://(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<rev>[\w./-]+))?/?$")


@dataclasses.dataclass(frozen=True)
class Fetched:
    """A fetched source: `path` (a local file or folder) and its catalogue `entry` (None when not a catalogue name)."""

    path: str
    entry: catalogue.Entry | None = None
    source: str = ""


def fetch(source, *, timeout=download.TIMEOUT_S):
    """Resolves `source` to a local path, downloading it into a cache the first time; see the module docstring.

    Raises:
        FileNotFoundError: a source that is no existing path, URL, Hub id or catalogue name (with close names).
        download.DownloadError: a failed download; the message names the file, the URL and where to place it.
    """
    text = os.fspath(source)
    if text.startswith("hf://"):
        return Fetched(fetch_hub(text), None, text)
    if re.match(r"^https?://", text):
        entry = _entry_for_url(text)
        return Fetched(
            download.download(text, _cache_path(entry, text), sha256=_sha(entry), timeout=timeout, entry=entry),
            entry,
            text,
        )
    if text.startswith("gs://"):
        return Fetched(_fetch_gcs(text, timeout), catalogue.find(text), text)
    if files.is_remote(text):  # another tf.io.gfile scheme (ram://, s3://, ...): read where it is, never copied
        if not files.exists(text):
            raise FileNotFoundError(f"No such file: {text!r}.")
        return Fetched(text, None, text)
    if os.path.exists(text):
        return Fetched(text, None, text)
    if text in catalogue_families.FAMILIES:  # timm's Hub copy is the checkpoint's home
        return Fetched(fetch_hub(f"hf://{catalogue_families.FAMILIES[text].hf_hub_id}"), None, text)
    entry = catalogue_entry(text)
    return Fetched(fetch_entry(entry, timeout=timeout), entry, text)


def catalogue_entry(text):
    """The catalogue entry of a local source that is no existing path (nothing is downloaded); None for a name of
    timm's Hub checkpoints (`catalogue_families`).

    Raises:
        FileNotFoundError: no such path and no such catalogue name (with the closest names).
    """
    if text in catalogue_families.FAMILIES:  # a Hub checkpoint: no entry of the released-file catalogue
        return None
    try:
        return catalogue.get(text)
    except KeyError as err:
        close = difflib.get_close_matches(text, catalogue_families.FAMILIES, n=3, cutoff=0.6)
        hint = f" Of timm's Hub checkpoints: {', '.join(repr(c) for c in close)}?" if close else ""
        raise FileNotFoundError(f"No such file or folder: {text!r}, and {err.args[0]}{hint}") from None


def entry_cache_path(entry):
    """Where a catalogue entry's file lives in the cache: CACHE/BUCKET/OBJECT (the bucket's own layout)."""
    return os.path.join(download.cache_dir(), entry.bucket, *entry.object.split("/"))


def fetch_entry(entry, *, timeout=download.TIMEOUT_S):
    """Downloads a catalogue entry's `.npz` (once) and returns its local path."""
    how = f"gsutil cp {entry.gs_url} {entry_cache_path(entry)}"
    return download.download(
        entry.url,
        entry_cache_path(entry),
        sha256=entry.sha256,
        timeout=timeout,
        how_to_get=how,
        label=entry.name,
        entry=entry,
    )


def _sha(entry):
    return entry.sha256 if entry is not None else None


def _entry_for_url(url):
    """The catalogue entry a storage.googleapis.com URL points to (so it shares the entry's cache file)."""
    prefixes = {catalogue.GCS_HTTPS, os.environ.get(catalogue.GCS_ENDPOINT_ENV, "").rstrip("/") or catalogue.GCS_HTTPS}
    for prefix in prefixes:
        if url.startswith(prefix + "/"):
            return catalogue.find(urllib.parse.unquote(url[len(prefix) + 1 :]))
    return None


def _cache_path(entry, url):
    return entry_cache_path(entry) if entry is not None else download.url_cache_path(url)


def _fetch_gcs(url, timeout):
    bucket, _, obj = url[len("gs://") :].partition("/")
    if not bucket or not obj:
        raise ValueError(f"{url!r} names no object; give gs://BUCKET/PATH/FILE.")
    entry = catalogue.find(url)
    target = (
        entry_cache_path(entry) if entry is not None else os.path.join(download.cache_dir(), bucket, *obj.split("/"))
    )
    https = catalogue.gcs_https_url(bucket, obj)
    try:
        return download.download(
            https, target, sha256=_sha(entry), timeout=timeout, how_to_get=f"gsutil cp {url} {target}", entry=entry
        )
    except download.DownloadError as err:
        private = " HTTP 401 " in str(err) or " HTTP 403 " in str(err)
        if not private or importlib.util.find_spec("tensorflow") is None:
            raise
    # A private object: TensorFlow's GCS filesystem uses the user's credentials. One copy into the cache, atomic.
    files.copy_file(url, target)
    download.verify(target, _sha(entry), entry)
    return target


def _hub_settings():
    """Endpoint, cache folder and offline flag from the environment now (huggingface_hub reads them at import)."""
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None
    cache = os.environ.get("HF_HUB_CACHE")
    if not cache:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
        cache = os.path.join(os.path.expanduser(home), "hub")
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return endpoint, cache, offline


def parse_hub_id(source):
    """`hf://ORG/NAME[@REV]` -> (repo_id, revision or None); a one-line ValueError for anything else."""
    match = _HF_ID.match(source)
    if not match:
        raise ValueError(f"{source!r} is not a Hub id: write hf://ORG/NAME or hf://ORG/NAME@REVISION.")
    return match.group("repo"), match.group("rev")


def fetch_hub(source):
    """Downloads a Hub repo's model files (timm, transformers or keras-hub layout); returns the snapshot folder."""
    import huggingface_hub
    from huggingface_hub import errors

    repo_id, revision = parse_hub_id(source)
    endpoint, cache, offline = _hub_settings()

    def get(filename, required=True):
        try:
            return huggingface_hub.hf_hub_download(
                repo_id, filename, revision=revision, cache_dir=cache, endpoint=endpoint, local_files_only=offline
            )
        except errors.LocalEntryNotFoundError as err:  # not in the cache, and offline or the Hub is unreachable
            if not required:
                return None
            raise _hub_offline_error(source, filename, cache, None if offline else err) from None
        except errors.RemoteEntryNotFoundError:  # 404: the repo has no such file
            if not required:
                return None
            raise FileNotFoundError(
                f"{source} has no {filename}: keras-vit reads timm and transformers repos with safetensors weights "
                f"and keras-hub presets; this repo is neither (or has only pytorch_model.bin)."
            ) from None
        except errors.RepositoryNotFoundError:
            raise FileNotFoundError(
                f"No Hub repo {repo_id!r} (or it is private or gated: log in with `hf auth login`)."
            ) from None
        except errors.RevisionNotFoundError:
            raise FileNotFoundError(f"{repo_id!r} has no revision {revision!r}.") from None

    config = get("config.json")
    folder = os.path.dirname(config)
    if get("metadata.json", required=False) is not None:  # a keras-hub preset
        for name in _KERAS_HUB_REQUIRED:
            get(name)
        for name in _KERAS_HUB_OPTIONAL:
            get(name, required=False)
    else:
        get("model.safetensors")
        for name in _HF_OPTIONAL:
            get(name, required=False)
    return folder


def unreadable_advice(path):
    """What to do about a file that cannot be read (a clause): for a cached download, its path and how to remove it."""
    path = os.path.abspath(os.fspath(path))
    real = os.path.realpath(path)
    if _inside(path, download.cache_dir()):
        return (
            f"it is keras-vit's cached download: remove it (`rm {path} {path}.sha256`) and run again to download "
            f"it afresh"
        )
    if _inside(path, _hub_settings()[1]):
        both = f"{real} {path}" if real != path else path  # a snapshot file links to its blob: remove both
        return f"it is in the Hugging Face cache: remove it (`rm {both}`) and run again to download it afresh"
    return "download it again or point to the right file"


def _inside(path, folder):
    folder = os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder


def _hub_offline_error(source, filename, cache, err=None):
    why = f" ({type(err).__name__}: {err})".replace("\n", " ") if err is not None else ""
    return download.DownloadError(
        f"{filename} of {source} is not in the Hub cache ({cache}) and cannot be downloaded{why}. Run "
        f"`python -m keras_vit.weights download {source}` once with a connection (HF_HUB_OFFLINE unset), or "
        f"`hf download {source[len('hf://') :].split('@')[0]}` and copy {cache} here."
    )
