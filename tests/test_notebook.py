"""notebooks/colab_tpu.ipynb, executed top to bottom in its smoke mode, as CI runs it (no TPU, no network).

The parameter cell is followed by an injected cell (papermill's convention) that sets SMOKE = True and points the
paths at things made here: a CIFAR-10-shaped data set prepared for TFDS's own `cifar10` builder, the tiny
reference checkpoint, and a local workdir. Every cell
then runs as a Colab user would run it: devices, an interrupted fine-tune, the resume, evaluation, TFLite export
and the inspection figures.
"""

import pathlib

import pytest

from tests.support.tfds_fakes import prepare_fake_cifar10

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "colab_tpu.ipynb"


def _outputs(cell):
    texts, images = [], 0
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output["text"])
        elif "data" in output:
            texts.append(output["data"].get("text/plain", ""))
            images += "image/png" in output["data"]
    return "".join(texts), images


def test_the_parameter_cell_is_tagged_and_defaults_to_a_real_run():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    assert "SMOKE = False" in cells[0].source and 'ROUTE = "jax"' in cells[0].source


@pytest.mark.slow
@pytest.mark.parametrize("route", ["tensorflow", "jax"])
def test_colab_notebook_runs_top_to_bottom_in_smoke_mode(tmp_path, fixtures_dir, route):
    import nbformat
    from nbclient import NotebookClient

    data_dir = prepare_fake_cifar10(tmp_path / "tensorflow_datasets")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    # A local workdir: the export cell runs `python -m export` in a process of its own, which a ram:// URL (memory
    # of the kernel's process) would not reach. URL workdirs are covered by tests/test_remote_paths.py.
    workdir = str(tmp_path / "runs" / "cifar10")
    injected = nbformat.v4.new_code_cell(
        f"SMOKE = True\nROUTE = {route!r}\nPACKAGE = {str(ROOT)!r}\nWORKDIR = {workdir!r}\n"
        f"DATA_DIR = {str(data_dir)!r}\nINIT = {str(fixtures_dir / 'vit_tiny_official.npz')!r}\nINSTALL = False\n",
        metadata={"tags": ["injected-parameters"]},
    )
    nb.cells.insert(index + 1, injected)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    text = "".join(_outputs(c)[0] for c in nb.cells)
    images = sum(_outputs(c)[1] for c in nb.cells)
    assert f"backend {route}" in text
    assert "stopped: interrupted at step 6" in text
    assert "resuming from step 6 of 12" in text  # the checkpoint written at step 6, before the interrupt
    assert "'steps': 12" in text and "'resumed_from_step': 6" in text
    assert "'top1':" in text and "'num_heldout': 24" in text  # the evaluate cell
    assert "status: PASSED" in text and "model_int8_matmul.tflite" in text
    assert images >= 4  # the inspection figures, read back from the workdir
    # The notebook ran on the package pip installed (with its data files), not on the checkout.
    assert (tmp_path / "smoke-site-packages" / "keras_vit" / "training" / "backend_advice.json").is_file()
