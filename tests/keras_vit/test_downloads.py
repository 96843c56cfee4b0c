"""Downloads against a real HTTP server on loopback that lays files out as the real hosts do.

The server answers the bucket's object paths (`/vit_models/imagenet21k/ViT-B_16.npz`, reached through
KERAS_VIT_GCS_ENDPOINT) and the Hub's `/{repo}/resolve/{revision}/{filename}` (reached through HF_ENDPOINT, with
the headers `huggingface_hub.hf_hub_download` needs: X-Repo-Commit, ETag, Content-Length; 404 + X-Error-Code for a
missing file). It counts every request, so a cache hit is shown to make none. Files are small synthetic ones made
here, never real weights; every socket has a time-out.
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse

import numpy as np
import pytest

from keras_vit.weights import catalogue, download, sources
from tests.conftest import ROOT
from tests.support.hosts import COMMIT, TIMEOUT, hub_files, npz_bytes
from tests.support.numerics import scaled_diff


def _closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- the bucket ----------------------------------------------------------------------------------------------------


def test_cold_download_then_cache_hit_without_a_request(server, env):
    data = npz_bytes()
    server.state.files["/vit_models/imagenet21k/ViT-B_16.npz"] = data
    fetched = sources.fetch("ViT-B_16", timeout=TIMEOUT)
    expected_path = env / "cache" / "vit_models" / "imagenet21k" / "ViT-B_16.npz"
    assert fetched.path == str(expected_path)
    assert fetched.entry.name == "vit_base_patch16_224.orig_in21k"
    assert expected_path.read_bytes() == data
    assert (env / "cache" / "vit_models" / "imagenet21k" / "ViT-B_16.npz.sha256").read_text().split() == [
        hashlib.sha256(data).hexdigest(),
        str(len(data)),
    ]
    assert [(m, p) for m, p, _ in server.state.requests] == [("GET", "/vit_models/imagenet21k/ViT-B_16.npz")]
    # Every name of the same file is answered from the cache, with no request at all.
    for name in [
        "vit_base_patch16_224.orig_in21k",
        "imagenet21k/ViT-B_16.npz",
        "gs://vit_models/imagenet21k/ViT-B_16.npz",
    ]:
        assert sources.fetch(name, timeout=TIMEOUT).path == str(expected_path)
    assert len(server.state.requests) == 1
    assert not list(expected_path.parent.glob("*.part"))


def test_reserved_characters_in_object_names_are_percent_encoded(server, env):
    server.state.files["/vit_models/imagenet21k+imagenet2012/ViT-B_16-224.npz"] = npz_bytes(1, classes=1000)
    path = sources.fetch("vit_base_patch16_224.orig_in21k_ft_in1k", timeout=TIMEOUT).path
    assert path.endswith(os.path.join("vit_models", "imagenet21k+imagenet2012", "ViT-B_16-224.npz"))
    # A raw '+' in a URL path may be read as a space; the bucket's documented form encodes it.
    assert server.state.requests[0][1] == "/vit_models/imagenet21k%2Bimagenet2012/ViT-B_16-224.npz"


def test_truncated_download_leaves_nothing_at_the_final_path_and_resumes(server, env):
    data = npz_bytes(2) * 3
    obj = "/vit_models/imagenet21k/ViT-L_16.npz"
    server.state.files[obj] = data
    server.state.truncate.add(obj)
    final = env / "cache" / "vit_models" / "imagenet21k" / "ViT-L_16.npz"
    with pytest.raises(download.DownloadError, match=r"ended at \d+ of \d+ bytes.*run again to resume") as err:
        sources.fetch("ViT-L_16", timeout=TIMEOUT)
    assert "\n" not in str(err.value)
    assert not final.exists()
    part = final.with_name(final.name + ".part")
    assert part.read_bytes() == data[: len(data) // 2]
    # The retry asks only for the rest, and the result is the whole file, byte for byte.
    assert sources.fetch("ViT-L_16", timeout=TIMEOUT).path == str(final)
    assert server.state.requests[-1][2].get("Range") == f"bytes={len(data) // 2}-"
    assert final.read_bytes() == data
    assert not part.exists()


def test_a_server_that_ignores_range_gets_a_fresh_start(server, env):
    data = npz_bytes(3) * 2
    obj = "/vit_models/imagenet21k/ViT-B_32.npz"
    server.state.files[obj] = data
    server.state.truncate.add(obj)
    server.state.honour_range = False
    with pytest.raises(download.DownloadError):
        sources.fetch("ViT-B_32", timeout=TIMEOUT)
    path = sources.fetch("ViT-B_32", timeout=TIMEOUT).path
    with open(path, "rb") as f:
        assert f.read() == data  # a 200 to a Range request replaced the part instead of being appended to it


def test_concurrent_fetches_download_once(server, env):
    server.state.files["/vit_models/imagenet21k/ViT-B_16.npz"] = npz_bytes(10)
    server.state.delay = 0.5
    results = []

    def fetch():
        results.append(sources.fetch("ViT-B_16", timeout=TIMEOUT).path)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * TIMEOUT)
    assert len(results) == 2 and results[0] == results[1]
    assert [m for m, _, _ in server.state.requests] == ["GET"]  # the second waited for the first, then used its file


def test_wrong_publisher_checksum_is_an_error_and_leaves_nothing(server, env):
    server.state.files["/files/x.npz"] = npz_bytes(4)
    target = env / "x.npz"
    with pytest.raises(download.DownloadError, match="not the publisher's") as err:
        download.download(f"{server.url}/files/x.npz", str(target), sha256="0" * 64, timeout=TIMEOUT)
    assert "\n" not in str(err.value)
    assert not target.exists() and not target.with_name("x.npz.part").exists()
    right = hashlib.sha256(npz_bytes(4)).hexdigest()
    assert download.download(f"{server.url}/files/x.npz", str(target), sha256=right, timeout=TIMEOUT) == str(target)


def test_recorded_checksum_catches_a_file_changed_in_the_cache(server, env):
    server.state.files["/vit_models/imagenet21k/ViT-H_14.npz"] = npz_bytes(5)
    path = sources.fetch("ViT-H_14", timeout=TIMEOUT).path
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xfe")
    with pytest.raises(download.DownloadError, match="does not match the one recorded sha256.*download it again"):
        sources.fetch("ViT-H_14", timeout=TIMEOUT)
    assert len(server.state.requests) == 1


def test_a_file_placed_by_hand_is_used_without_a_request(server, env):
    entry = catalogue.get("ViT-L_32")
    path = sources.entry_cache_path(entry)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(npz_bytes(6))
    assert sources.fetch("ViT-L_32", timeout=TIMEOUT).path == path
    assert server.state.requests == []
    with open(path + ".sha256") as f:
        assert f.read().split()[0] == hashlib.sha256(npz_bytes(6)).hexdigest()


def test_offline_names_the_file_the_url_and_where_to_place_it(env, monkeypatch):
    url = _closed_port_url()
    monkeypatch.setenv(catalogue.GCS_ENDPOINT_ENV, url)
    entry = catalogue.get("vit_small_patch16_384.augreg_in21k_ft_in1k")
    with pytest.raises(download.DownloadError) as err:
        sources.fetch(entry.name, timeout=TIMEOUT)
    message = str(err.value)
    assert "\n" not in message
    assert entry.file_name in message
    assert f"{url}/vit_models/augreg/{entry.file_name}" in message
    assert f"place it by hand at {sources.entry_cache_path(entry)}" in message
    assert f"gsutil cp {entry.gs_url}" in message


def test_any_url_and_gs_url_land_in_the_cache(server, env):
    server.state.files["/some/dir/model.npz"] = npz_bytes(7)
    server.state.files["/my-bucket/run/ckpt.npz"] = npz_bytes(8)
    path = sources.fetch(f"{server.url}/some/dir/model.npz", timeout=TIMEOUT).path
    assert path == str(env / "cache" / "urls" / f"127.0.0.1_{server.server_address[1]}" / "some" / "dir" / "model.npz")
    gs = sources.fetch("gs://my-bucket/run/ckpt.npz", timeout=TIMEOUT)
    assert gs.entry is None and gs.path == str(env / "cache" / "my-bucket" / "run" / "ckpt.npz")
    assert server.state.requests[-1][1] == "/my-bucket/run/ckpt.npz"


def test_local_paths_and_unknown_names(env, tmp_path):
    local = tmp_path / "mine.npz"
    local.write_bytes(b"x")
    assert sources.fetch(str(local)).path == str(local)
    with pytest.raises(FileNotFoundError, match="Did you mean 'vit_base_patch16_224.orig_in21k"):
        sources.fetch("vit_base_patch16_224.orig_in21")


# --- the Hub -------------------------------------------------------------------------------------------------------


def test_hub_download_then_offline(server, env, monkeypatch):
    files = {
        "config.json": json.dumps({"architecture": "vit_tiny_patch16_224"}).encode(),
        "model.safetensors": b"s" * 300,
    }
    hub_files(server, "timm/tiny", "main", files)
    folder = sources.fetch("hf://timm/tiny", timeout=TIMEOUT).path
    for name, data in files.items():
        with open(os.path.join(folder, name), "rb") as f:
            assert f.read() == data
    assert os.path.basename(folder) == COMMIT and str(env / "hub") in folder  # the Hub's own snapshot layout
    seen = [(m, p) for m, p, _ in server.state.requests]
    for name in files:  # what hf_hub_download does for each file: HEAD for the metadata, then GET
        assert ("HEAD", f"/timm/tiny/resolve/main/{name}") in seen
        assert ("GET", f"/timm/tiny/resolve/main/{name}") in seen
    assert ("HEAD", "/timm/tiny/resolve/main/preprocessor_config.json") in seen  # optional: 404, skipped
    count = len(server.state.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert sources.fetch("hf://timm/tiny").path == folder
    assert len(server.state.requests) == count
    monkeypatch.setenv("HF_HUB_CACHE", str(env / "empty-hub"))
    with pytest.raises(download.DownloadError, match="config.json of hf://timm/tiny is not in the Hub cache") as err:
        sources.fetch("hf://timm/tiny")
    assert "\n" not in str(err.value) and len(server.state.requests) == count


def test_hub_keras_hub_preset_and_revision(server, env):
    files = {name: name.encode() * 10 for name in ["config.json", "metadata.json", "model.weights.h5", "task.json"]}
    hub_files(server, "keras/vit_tiny", "v1", files)
    folder = sources.fetch("hf://keras/vit_tiny@v1", timeout=TIMEOUT).path
    assert sorted(n for n in os.listdir(folder)) == sorted(files)
    assert ("GET", "/keras/vit_tiny/resolve/v1/model.weights.h5") in [(m, p) for m, p, _ in server.state.requests]


def test_hub_repo_without_weights_and_bad_ids(server, env):
    hub_files(server, "someone/notes", "main", {"config.json": b"{}"})
    with pytest.raises(FileNotFoundError, match="has no model.safetensors"):
        sources.fetch("hf://someone/notes", timeout=TIMEOUT)
    with pytest.raises(ValueError, match="hf://ORG/NAME"):
        sources.fetch("hf://just-a-name")


def test_hub_unreachable_is_the_offline_message(env, monkeypatch):
    import time
    import types

    from huggingface_hub.utils import _http

    # hf_hub_download retries a refused connection 5 times with back-off (about 30 s) when nothing is cached;
    # the test skips the waits, not the retries.
    fake_time = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    fake_time.sleep = lambda seconds: None
    monkeypatch.setattr(_http, "time", fake_time)
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_url())
    with pytest.raises(download.DownloadError, match="not in the Hub cache .* and cannot be downloaded"):
        sources.fetch("hf://timm/tiny", timeout=TIMEOUT)


# --- the catalogue -------------------------------------------------------------------------------------------------


def test_catalogue_entries_are_consistent():
    from keras_vit.models.configs import get_variant

    seen_aliases = {}
    for name, entry in catalogue.CATALOGUE.items():
        assert name == entry.name
        assert entry.url == f"https://storage.googleapis.com/{entry.bucket}/{urllib.parse.quote(entry.object)}"
        assert entry.gs_url == f"gs://{entry.bucket}/{entry.object}" and entry.object.endswith(".npz")
        assert entry.bucket in ("vit_models", "big_vision")
        if entry.bucket == "vit_models":
            assert entry.object.split("/")[0] in ("imagenet21k", "imagenet21k+imagenet2012", "augreg", "sam")
        assert catalogue.LABEL_SPACES[entry.label_space] == entry.num_classes
        # Fine-tuned on ImageNet-1k <=> a 1000-class head; timm's tag says which.
        assert (name.endswith("in1k") or "_in1k_" in name) == (entry.label_space == catalogue.IMAGENET1K), name
        config = get_variant(entry.variant)
        assert entry.image_size % (config.patch_size * config.feature_stride) == 0, name
        assert f"_{entry.image_size}." in name, name
        assert (entry.top1 is None) == (entry.top1_source is None), name
        assert entry.top1 is None or 70 < entry.top1 < 90
        assert entry.hf_hub_id in (None, f"timm/{name}")
        assert entry.sha256 is None or len(entry.sha256) == 64
        for alias in entry.aliases:
            assert alias not in catalogue.CATALOGUE and seen_aliases.setdefault(alias, name) == name, alias
            assert catalogue.find(alias) is entry
    # Every family the issue asks for is there, the hybrid and the big_vision baseline included.
    assert {e.family for e in catalogue.CATALOGUE.values()} == {"vit_jax", "augreg", "big_vision"}
    assert catalogue.get("R50+ViT-B_16").representation_size == 768
    assert catalogue.get("imagenet21k+imagenet2012/R50+ViT-B_16.npz").variant == "R50+B/16"


def test_every_figure_names_its_source_and_timms_figures_their_revision():
    figures = 0
    for name, entry in catalogue.CATALOGUE.items():
        for value, source in [(entry.top1, entry.top1_source), (entry.size_mib, entry.size_source)]:
            assert (value is None) == (source is None), name  # a figure without a source, or a source of nothing
            figures += value is not None
            if source is not None and "timm results-imagenet.csv" in source:
                # The csv changes as timm re-evaluates: a figure from it names the revision it was read from.
                assert "@ 049b1332 (2023-05-24)" in source or "of 2021-04-17" in source, name
        assert entry.size_bytes is None or entry.size_bytes > 0
    by_source = [e.top1_source for e in catalogue.CATALOGUE.values()]
    assert (
        sum("049b1332" in (s or "") for s in by_source) == 24 and sum("2021-04-17" in (s or "") for s in by_source) == 2
    )
    assert figures > 30


def test_catalogue_corrections_of_issue_29():
    for epochs in (90, 150, 300):  # big_vision's resize_small resizes with method="area"
        assert catalogue.get(f"i1k-s16-{epochs}ep").interpolation == "area"
    for stem in ("ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "ViT-H_14", "R50+ViT-B_16"):
        entry = catalogue.get(f"imagenet21k/{stem}.npz")
        assert entry.hf_hub_id == f"timm/{entry.name}" and "neither the 21k head nor pre_logits" in entry.note
        assert ("21k head is all zeros" in entry.note) == (stem in ("ViT-L_32", "ViT-H_14"))
    assert catalogue.get("imagenet21k+imagenet2012/ViT-B_32.npz").top1 == 81.652
    assert catalogue.get("imagenet21k+imagenet2012/ViT-L_16.npz").top1 == 85.158


def test_catalogue_entries_added_from_the_notebook_and_timm():
    b8 = catalogue.get("imagenet21k/ViT-B_8.npz")  # vit_jax.ipynb's bucket listing
    assert (b8.name, b8.variant, b8.num_classes, b8.size_mib) == (
        "vit_base_patch8_224.orig_in21k",
        "B/8",
        21843,
        393.72,
    )
    assert "fa9697fc" in b8.size_source and b8.hf_hub_id is None and "pre_logits is not published" in b8.note
    for stem, variant in (("ViT-B_16", "B/16"), ("ViT-B_32", "B/32")):  # timm's sam_in1k tags
        sam = catalogue.get(f"gs://vit_models/sam/{stem}.npz")
        assert (sam.variant, sam.num_classes, sam.image_size, sam.crop_pct) == (variant, 1000, 224, 0.9)
        assert sam.hf_hub_id == f"timm/{sam.name}" and sam.name.endswith("_224.sam_in1k") and "timm" in sam.note
    # Every vit_jax file the notebook lists has its size; GiB figures are kept in MiB and say how they were listed.
    sizes = {e.object: e.size_mib for e in catalogue.CATALOGUE.values() if e.family == "vit_jax" and e.size_mib}
    assert sizes["imagenet21k+imagenet2012/ViT-B_16.npz"] == 331.4 and sizes["imagenet21k/R50+ViT-B_16.npz"] == 439.85
    assert sizes["imagenet21k/ViT-H_14.npz"] == 2519.04  # 2.46 GiB
    assert "listed as 2.46 GiB" in catalogue.get("ViT-H_14").size_source
    assert len(sizes) == 15  # every file the notebook lists


def test_b8_fine_tune_resolution_follows_from_the_listed_sizes():
    """No source publishes it; the listed sizes do: the 21k file less the fine-tune, against B/16's pair."""
    mib = 2**20
    ft = catalogue.get("imagenet21k+imagenet2012/ViT-B_8.npz")
    assert (ft.name, ft.image_size, ft.num_classes) == ("vit_base_patch8_384.orig_in21k_ft_in1k", 384, 1000)
    assert ft.size_mib == 334.78
    assert "derived" in ft.note and ft.top1 is None and ft.hf_hub_id is None
    width = 768
    heads = (width * width + width) + (width * 21843 + 21843) - (width * 1000 + 1000)  # pre_logits + 21k - 1k head
    b16 = catalogue.get("imagenet21k/ViT-B_16.npz").size_mib - catalogue.get("ViT-B_16-224").size_mib
    assert abs(b16 - heads * 4 / mib) < 0.01  # the method on a pair whose resolutions are known (both 224)
    b8 = catalogue.get("imagenet21k/ViT-B_8.npz").size_mib - ft.size_mib
    extra_tokens = (heads * 4 / mib - b8) * mib / (4 * width)
    tokens = 1 + (224 // 8) ** 2 + extra_tokens
    rounding = 2 * 0.005 * mib / (4 * width)  # both sizes are rounded to 0.01 MiB
    fits = [n for n in range(8, 1024, 8) if abs(1 + (n // 8) ** 2 - tokens) <= rounding]
    assert fits == [384], (tokens, fits)


def test_sam_checkpoints_other_sources_name():
    for stem, variant in (("ViT-S_16", "S/16"), ("ViT-L_16", "L/16"), ("ViT-L_32", "L/32")):
        sam = catalogue.get(f"gs://vit_models/sam/{stem}.npz")
        assert (sam.variant, sam.num_classes, sam.image_size, sam.name) == (
            variant,
            1000,
            224,
            f"{catalogue._TIMM_NAMES[variant]}_224.sam_in1k",
        )
        assert sam.hf_hub_id is None and "timm does not publish" in sam.note and "README" in sam.note


def test_catalogue_url_respects_the_endpoint_variable(monkeypatch):
    monkeypatch.setenv(catalogue.GCS_ENDPOINT_ENV, "http://mirror.example:8080/")
    assert catalogue.get("ViT-B_16").url == "http://mirror.example:8080/vit_models/imagenet21k/ViT-B_16.npz"


# --- the command line ----------------------------------------------------------------------------------------------


def _cli(*args, env=None):
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "keras_vit.weights", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.slow
def test_cli_list_and_info_import_no_keras():
    for args in (["list"], ["info", "ViT-B_16"], ["--help"]):
        result = _cli(*args)
        assert result.returncode == 0, result.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
        assert not {"keras", "tensorflow", "jax"} & imported, args
    listing = _cli("list").stdout
    assert "vit_base_r50_s16_384.orig_in21k_ft_in1k" in listing and "84.976" in listing
    assert "~1243 MiB" in listing  # the AugReg README's size of the recommended L/16
    info = _cli("info", "ViT-B_16").stdout
    assert "gs://vit_models/imagenet21k/ViT-B_16.npz" in info and "pre_logits          768" in info
    bad = _cli("info", "ViT-B_99")
    assert bad.returncode == 2 and "not in the catalogue" in bad.stderr


@pytest.mark.slow
def test_cli_mode_still_offers_every_public_name():
    # What `python -m keras_vit.weights` sees while it starts (sys.argv[0] is "-m" then): the packages skip Keras at
    # import and give their names on first use.
    code = (
        "import sys; sys.argv = ['-m']; sys.orig_argv = [sys.executable, '-m', 'keras_vit.weights', 'list']\n"
        "import keras_vit, keras_vit.weights\n"
        "assert 'keras' not in sys.modules, 'keras imported at start'\n"
        "assert keras_vit.load_npz is keras_vit.weights.load_npz and callable(keras_vit.create_model)\n"
        "assert keras_vit.layers.__name__ == 'keras_vit.layers' and 'B/16' in keras_vit.VARIANTS\n"
        "assert issubclass(keras_vit.weights.CheckpointError, ValueError)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "numpy"},  # the lightest backend to import
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_cli_download_prints_the_path(server, env):
    server.state.files["/big_vision/vit_s16_i1k_90ep.npz"] = npz_bytes(9, classes=1000)
    result = _cli(
        "download", "i1k-s16-90ep", env={k: os.environ[k] for k in ("KERAS_VIT_CACHE", catalogue.GCS_ENDPOINT_ENV)}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(env / "cache" / "big_vision" / "vit_s16_i1k_90ep.npz")


def test_docs_catalogue_tables_are_the_cli_output():
    from keras_vit.weights.__main__ import markdown_table

    doc = (ROOT / "docs" / "pretrained_catalogue.md").read_text()
    for family in ("vit_jax", "augreg", "big_vision"):
        entries = [catalogue.CATALOGUE[n] for n in catalogue.names() if catalogue.CATALOGUE[n].family == family]
        assert markdown_table(entries) in doc, (
            f"regenerate with: python -m keras_vit.weights list --markdown --family {family}"
        )


# --- from_pretrained end to end: a name or a Hub id, downloaded from the loopback server, built and loaded -----------

INTEROP = ROOT / "tests" / "fixtures" / "interop"


@pytest.mark.slow
def test_from_pretrained_of_a_catalogue_name_downloads_once_and_names_the_classes(server, env, tmp_path):
    import keras_vit

    entry = catalogue.get("vit_base_patch16_224.orig_in21k_ft_in1k")
    # A tiny model with the entry's 1000-class head stands in for the real file (same layout, same key names).
    model = keras_vit.create_model("testing", num_classes=1000)
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(0, 0.1, w.shape).astype("float32"))
    npz = keras_vit.save_pretrained(model, tmp_path / "tiny.npz", format="npz")
    with open(npz, "rb") as f:
        server.state.files["/" + entry.bucket + "/" + entry.object] = f.read()
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")

    loaded = keras_vit.from_pretrained(entry.name)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0), atol=1e-6)
    assert loaded.class_names[:2] == ("tench", "goldfish") and len(loaded.class_names) == 1000
    assert len(server.state.requests) == 1
    again = keras_vit.from_pretrained("imagenet21k+imagenet2012/ViT-B_16-224.npz", num_classes=10)
    assert len(server.state.requests) == 1  # the cache answered
    assert again.class_names is None and again.get_layer("head").kernel.shape == (32, 10)


@pytest.mark.parametrize(
    ("repo", "fixture", "output"),
    [
        ("timm/vit_tiny_test", "timm_vit_tiny", "logits"),
        ("google/vit-tiny-test", "hf_vit_for_image_classification", "logits"),
    ],
)
def test_from_pretrained_of_a_hub_repo_gives_the_library_outputs(server, env, repo, fixture, output):
    import keras_vit

    folder = INTEROP / fixture
    hub_files(server, repo, "main", {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "io.npz"})
    model = keras_vit.from_pretrained(f"hf://{repo}")
    io_npz = np.load(folder / "io.npz")
    np.testing.assert_allclose(model.predict(io_npz["images"], verbose=0), io_npz[output], atol=1e-5)


FAMILIES = ROOT / "tests" / "fixtures" / "interop_families"


def _dual_encoder_repo(fixture, model_type, architecture, extra, root=FAMILIES):
    """A CLIPModel / SiglipModel / Siglip2Model repo as the Hub's openai/google ones are laid out: the fixture's image
    tower under `vision_config` and the `vision_model.` prefix, beside text-tower and projection tensors keras-vit must
    leave."""
    from safetensors.numpy import load_file, save

    folder = root / fixture
    vision = json.loads((folder / "config.json").read_text())
    for key in ("architectures", "model_type", "transformers_version"):
        vision.pop(key, None)
    cfg = dict(architectures=[architecture], model_type=model_type, vision_config=vision, text_config={})
    state = {f"vision_model.{k}": v for k, v in load_file(folder / "model.safetensors").items()}
    rng = np.random.default_rng(0)
    state.update({k: rng.standard_normal(shape).astype("float32") for k, shape in extra.items()})
    return {
        "config.json": json.dumps(cfg).encode(),
        "model.safetensors": save(state),
        "preprocessor_config.json": (folder / "preprocessor_config.json").read_bytes(),
    }


_TEXT = {"text_model.embeddings.token_embedding.weight": (10, 48)}
_CLIP_OTHERS = {**_TEXT, "visual_projection.weight": (8, 48), "text_projection.weight": (8, 48), "logit_scale": ()}
_SIGLIP_OTHERS = {**_TEXT, "text_model.head.weight": (48, 48), "logit_scale": (1,), "logit_bias": (1,)}


def _folder_repo(fixture):
    return {p.name: p.read_bytes() for p in (FAMILIES / fixture).iterdir() if p.name != "io.npz"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("repo", "fixture", "output", "files"),
    [
        ("facebook/dinov2-small", "hf_dinov2_small", "pooler_output", lambda: _folder_repo("hf_dinov2_small")),
        (
            "timm/vit_small_patch14_reg4_dinov2.lvd142m",
            "timm_dinov2_small_reg4",
            "logits",
            lambda: _folder_repo("timm_dinov2_small_reg4"),
        ),
        (
            "openai/clip-vit-base-patch16",
            "hf_clip_vision",
            "pooler_output",
            lambda: _dual_encoder_repo("hf_clip_vision", "clip", "CLIPModel", _CLIP_OTHERS),
        ),
        (
            "google/siglip-base-patch16-224",
            "hf_siglip_vision",
            "pooler_output",
            lambda: _dual_encoder_repo("hf_siglip_vision", "siglip", "SiglipModel", _SIGLIP_OTHERS),
        ),
    ],
    ids=["dinov2", "timm-dinov2-reg4", "clip", "siglip"],
)
def test_from_pretrained_of_a_family_hub_repo_gives_the_library_outputs(server, env, repo, fixture, output, files):
    import keras_vit

    hub_files(server, repo, "main", files())
    model = keras_vit.from_pretrained(f"hf://{repo}")
    io_npz = np.load(FAMILIES / fixture / "io.npz")
    np.testing.assert_allclose(model.predict(io_npz["images"], verbose=0), io_npz[output], atol=1e-5)


def test_a_siglip2_naflex_hub_repo_is_one_line_to_a_naflex_model(server, env):
    """`hf://google/siglip2-base-patch16-naflex` (a two-tower `Siglip2Model` repo) gives a `NaFlexViT` with the
    repo's patch budget, whose pooled output on transformers' own preprocessed inputs is transformers'."""
    import keras

    import keras_vit

    root, fixture = ROOT / "tests" / "fixtures" / "interop_families2", "hf_siglip2_naflex"
    repo = "google/siglip2-base-patch16-naflex"
    hub_files(server, repo, "main", _dual_encoder_repo(fixture, "siglip2", "Siglip2Model", _SIGLIP_OTHERS, root))
    model = keras_vit.from_pretrained(f"hf://{repo}")
    assert isinstance(model, keras_vit.NaFlexViT) and model.options["max_num_patches"] == 16
    arrays = np.load(root / fixture / "io.npz")
    inputs = dict(patches=arrays["pixel_values"], mask=arrays["pixel_attention_mask"].astype("int32"),
                  grid=arrays["spatial_shapes"].astype("int32"))  # fmt: skip
    pooled = keras.Model(model.inputs, model.get_layer("MAPHead_0").output)(inputs)
    assert scaled_diff(pooled, arrays["pooler_output"]) <= 1e-5  # relative to the outputs' scale (7.6 here)
