"""The checkpoint readers hold no second copy: local files are memory-mapped, compressed members read one by one.

Every array is compared with what numpy's and safetensors' own loaders return for the same file (the independent
reference); that an array is a view of the file is read from its flags (read-only, owning no memory).
"""

import os

import numpy as np
import pytest
from safetensors.numpy import load as safetensors_load

from keras_vit.weights import checkpoint, npz
from keras_vit.weights.loading import CheckpointError


def _arrays():
    rng = np.random.default_rng(0)
    return {
        "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": rng.normal(size=(8, 32)).astype("float32"),
        "fortran": np.asfortranarray(rng.normal(size=(5, 3))),
        "half": rng.normal(size=(4, 4)).astype("float16"),
        "ints": np.arange(7, dtype="int64"),
        "scalar": np.float32(2.5),
        "empty": np.zeros((0, 3), "float32"),
    }


def _is_file_view(array):
    return not array.flags.writeable and not array.flags.owndata


def test_an_uncompressed_npz_is_memory_mapped(tmp_path):
    path = tmp_path / "stored.npz"
    np.savez(path, **_arrays())
    got = npz.read_npz(path)
    with np.load(path) as reference:
        assert sorted(got) == sorted(reference.files)
        for key in reference.files:
            expected = reference[key]
            assert got[key].dtype == expected.dtype and got[key].shape == expected.shape, key
            np.testing.assert_array_equal(got[key], expected)
            assert type(got[key]) is np.ndarray, key  # plain arrays, not np.memmap objects
            if expected.size:
                assert _is_file_view(got[key]), key
    assert got["fortran"].flags.f_contiguous


def test_a_compressed_npz_is_read_member_by_member(tmp_path):
    path = tmp_path / "compressed.npz"
    np.savez_compressed(path, **_arrays())
    got = npz.read_npz(path)
    with np.load(path) as reference:
        for key in reference.files:
            np.testing.assert_array_equal(got[key], reference[key])
            assert type(got[key]) is np.ndarray, key


def test_an_npz_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, bad=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="pickled Python objects"):
        npz.read_npz(path)


def test_safetensors_are_memory_mapped(tmp_path):
    arrays = {k: v for k, v in _arrays().items() if k not in ("fortran", "scalar")}
    arrays["scalar"] = np.array(3.0, "float32")
    path = tmp_path / "model.safetensors"
    from safetensors.numpy import save_file

    save_file(arrays, str(path))
    got = checkpoint.read_safetensors(path)
    with open(path, "rb") as f:
        reference = safetensors_load(f.read())
    assert sorted(got) == sorted(reference)
    for key, expected in reference.items():
        assert got[key].dtype == expected.dtype and got[key].shape == expected.shape, key
        np.testing.assert_array_equal(got[key], expected)
        if expected.size:
            assert _is_file_view(got[key]), key


def test_a_truncated_safetensors_file_is_one_clear_error(tmp_path):
    path = tmp_path / "model.safetensors"
    checkpoint.write_safetensors(path, {"w": np.ones((4, 4))})
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    with pytest.raises(CheckpointError, match=r"as safetensors \(a safetensors file whose tensors end at byte") as err:
        checkpoint.read_safetensors(path)
    assert "\n" not in str(err.value) and "download it again" in str(err.value)


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from Linux's /proc")
def test_a_loaded_tensor_leaves_the_resident_set_and_reads_back_unchanged(tmp_path):
    from keras_vit.weights import loading

    path = tmp_path / "big.npz"
    values = np.random.default_rng(1).normal(size=(64, 2**18)).astype("float32")  # 64 MiB
    np.savez(path, w=values)
    mapped = npz.read_npz(path)["w"]
    assert float(mapped.sum(dtype=np.float64)) == pytest.approx(float(values.sum(dtype=np.float64)))
    before = _rss_mib()  # every page of the mapping is resident now
    loading._release(mapped)
    assert before - _rss_mib() > 48  # what load_params does after each assign: the 64 MiB leave the resident set
    np.testing.assert_array_equal(mapped, values)  # and come back from the file, unchanged


def _views():
    rng = np.random.default_rng(2)
    linear = rng.normal(size=(24, 8)).astype("float32")  # PyTorch (out, in)
    square = rng.normal(size=(8, 8)).astype("float32")
    conv = rng.normal(size=(6, 3, 2, 2)).astype("float32")  # OIHW
    return {
        "linear kernel": (linear, checkpoint.linear_to_kernel(linear)),
        "query kernel": (linear, checkpoint.split_heads(checkpoint.linear_to_kernel(linear[:8]), 2)),
        "out kernel": (square, checkpoint.linear_to_kernel(square).reshape(2, 4, 8)),
        "conv kernel": (conv, checkpoint.conv_to_hwio(conv)),
    }


@pytest.mark.parametrize("name", list(_views()))
def test_a_permuted_view_is_transposed_by_the_backend_to_the_same_values_in_its_own_memory(name):
    import keras

    from keras_vit.weights import loading

    source, view = _views()[name]
    expected = np.array(view)  # numpy's own element-by-element copy
    tensor = loading._as_tensor(view, "float32")
    assert not isinstance(tensor, np.ndarray), name  # went through the backend's transpose
    source[...] = 0  # the checkpoint's memory changes (a mapping dropped, a file rewritten): the tensor does not
    got = keras.ops.convert_to_numpy(tensor)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_other_arrays_are_copied_and_cast_as_before():
    from keras_vit.weights import loading

    base = np.random.default_rng(3).normal(size=(6, 8))  # float64
    for array in (base, base[:, ::2], base.T[::2]):  # contiguous; strided slices that are no permutation
        got = loading._as_tensor(array, "float32")
        np.testing.assert_array_equal(got, array.astype("float32"))
        assert got.dtype == np.float32 and not np.shares_memory(got, base)
