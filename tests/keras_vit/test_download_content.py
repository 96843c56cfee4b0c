"""A download is cached only when its content is what its name and catalogue entry say (keras_vit/weights/content.py).

The loopback server of test_downloads.py answers as a captive portal would (200 and an HTML page under the
`.npz`'s name), cuts files short with an honest Content-Length, or serves another file; each is refused in one line
that names the URL and what came back, and leaves no file in the cache. The right file is then accepted.
"""

import dataclasses
import hashlib
import io
import os

import numpy as np
import pytest

from keras_vit.weights import catalogue, download, npz, sources
from tests.support.hosts import TIMEOUT, npz_bytes

PORTAL = b"<!DOCTYPE html>\n<html><head><title>Sign in to the network</title></head><body>Accept</body></html>\n"
OBJ = "/vit_models/imagenet21k/ViT-B_16.npz"
PUBLISHED = dict(catalogue.CATALOGUE)  # before the `env` fixture sets the sizes aside


def _cached_files(env):
    """Every file under the cache but the download locks (empty files that only serialise downloads)."""
    root = env / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")


def _refused(server, env, name, match):
    with pytest.raises(download.DownloadError, match=match) as err:
        sources.fetch(name, timeout=TIMEOUT)
    message = str(err.value)
    assert "\n" not in message and "nothing was cached" in message
    assert _cached_files(env) == []
    return message


def test_a_portal_page_answered_with_200_is_refused_then_the_real_file_is_accepted(server, env):
    server.state.files[OBJ] = PORTAL
    server.state.types[OBJ] = "text/html; charset=utf-8"
    message = _refused(server, env, "ViT-B_16", "not a readable zip archive")
    assert f"Downloaded {server.url}{OBJ} but it is not the file asked for" in message
    assert "The server answered text/html; charset=utf-8, starting b'<!DOCTYPE html>\\n<html><head>" in message
    # The connection is fixed: the next call downloads afresh (no Range from a kept part) and caches the file.
    good = npz_bytes()
    server.state.files[OBJ] = good
    del server.state.types[OBJ]
    path = sources.fetch("ViT-B_16", timeout=TIMEOUT).path
    assert "Range" not in server.state.requests[-1][2]
    with open(path, "rb") as f:
        assert f.read() == good
    with open(path + ".sha256") as f:
        assert f.read().split()[0] == hashlib.sha256(good).hexdigest()
    assert npz.read_npz(path)["head/kernel"].shape == (4, 21843)


def test_a_file_cut_short_with_an_honest_length_is_refused(server, env):
    good = npz_bytes(1)
    server.state.files[OBJ] = good[: len(good) // 2]
    _refused(server, env, "ViT-B_16", r"not a readable zip archive.*application/octet-stream, starting b'PK")
    server.state.files[OBJ] = good[:-10]  # the directory's end cut off
    _refused(server, env, "ViT-B_16", "not a readable zip archive")


def test_a_corrupt_member_is_refused(server, env):
    good = bytearray(npz_bytes(2))
    good[len(good) // 3] ^= 0xFF  # inside the head's data: the zip's directory still reads
    server.state.files[OBJ] = bytes(good)
    _refused(server, env, "ViT-B_16", "fails its CRC-32")


def test_another_file_under_the_name_is_refused(server, env):
    buffer = io.BytesIO()
    np.savez(buffer, weights=np.zeros(3))  # an .npz, but no ViT checkpoint
    server.state.files[OBJ] = buffer.getvalue()
    message = _refused(server, env, "ViT-B_16", "an .npz without embedding/kernel")
    assert "it holds weights" in message
    server.state.files[OBJ] = npz_bytes(3, classes=1000)  # a fine-tune under the 21k file's name
    _refused(server, env, "ViT-B_16", r"head is \(4, 1000\), not 21843 classes wide")
    buffer = io.BytesIO()
    np.savez(buffer, **{"embedding/kernel": np.array([object()], dtype=object)})
    server.state.files[OBJ] = buffer.getvalue()
    _refused(server, env, "ViT-B_16", "holds Python objects")


def test_a_file_of_the_wrong_size_is_refused_and_the_published_size_is_accepted(server, env, monkeypatch):
    real = PUBLISHED["vit_base_patch16_224.orig_in21k"]  # the catalogue's own entry, its published size kept
    assert real.size_mib == 393.69 and "vit_jax.ipynb" in real.size_source
    monkeypatch.setitem(catalogue.CATALOGUE, real.name, real)
    server.state.files[OBJ] = npz_bytes(4)
    _refused(
        server,
        env,
        "ViT-B_16",
        r"0\.\d\d MiB \(\d+ bytes\), not the published 393\.69 MiB \(vision_transformer vit_jax",
    )
    # A file within the published figure's precision (1 %) is taken.
    size = len(npz_bytes(4))
    monkeypatch.setitem(catalogue.CATALOGUE, real.name, dataclasses.replace(real, size_mib=size / 2**20 * 1.005))
    assert os.path.getsize(sources.fetch("ViT-B_16", timeout=TIMEOUT).path) == size


def _safetensors_bytes(seed=0):
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    return save({"patch_embed.proj.weight": rng.normal(size=(4, 3, 2, 2)).astype("float32")})


def test_safetensors_urls_need_a_whole_safetensors_file(server, env):
    obj = "/org/repo/model.safetensors"
    url = f"{server.url}{obj}"
    server.state.files[obj] = PORTAL
    server.state.types[obj] = "text/html"
    with pytest.raises(download.DownloadError, match="no safetensors file.*text/html, starting b'<!DOCTYPE"):
        sources.fetch(url, timeout=TIMEOUT)
    good = _safetensors_bytes()
    server.state.files[obj] = good[:-4]
    with pytest.raises(download.DownloadError, match=rf"tensors end at byte {len(good)} of {len(good) - 4}"):
        sources.fetch(url, timeout=TIMEOUT)
    assert _cached_files(env) == []
    server.state.files[obj] = good
    with open(sources.fetch(url, timeout=TIMEOUT).path, "rb") as f:
        assert f.read() == good


def test_a_page_placed_by_hand_is_refused_before_its_hash_is_recorded(server, env):
    path = sources.entry_cache_path(catalogue.get("ViT-B_16"))
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(PORTAL)
    with pytest.raises(download.DownloadError, match=rf"is not the file its name says .* \(`rm {path}`\)"):
        sources.fetch("ViT-B_16", timeout=TIMEOUT)
    assert not os.path.exists(path + ".sha256") and server.state.requests == []


def test_a_cached_file_that_fails_to_read_names_its_path_and_how_to_remove_it(server, env):
    # What an older keras-vit left behind: a portal page cached under the .npz's name, its hash recorded.
    path = sources.entry_cache_path(catalogue.get("ViT-B_16"))
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(PORTAL)
    with open(path + ".sha256", "w") as f:
        f.write(f"{hashlib.sha256(PORTAL).hexdigest()}  {len(PORTAL)}\n")
    fetched = sources.fetch("ViT-B_16", timeout=TIMEOUT)  # the recorded hash matches: the cache answers
    with pytest.raises(npz.CheckpointError) as err:
        npz.read_npz(fetched.path)
    message = str(err.value)
    assert "\n" not in message and f"Cannot read {path!r}" in message
    assert f"keras-vit's cached download: remove it (`rm {path} {path}.sha256`) and run again" in message
