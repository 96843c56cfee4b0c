"""The GPU check's child process: runs one .tflite file on LiteRT's GPU accelerator and saves its outputs. Run as a
script (`python gpu_child.py MODEL.tflite FEED.npy OUT.npz RUN_SECONDS`), never imported: a crashing driver ends it
alone. It asks for GPU with CPU fallback; the delegate says on stderr which ops it left to the CPU."""

import sys
import time

import numpy as np


def main(model_path, feed_path, out_path, run_seconds):
    from ai_edge_litert.compiled_model import CompiledModel, HardwareAccelerator

    feed = np.load(feed_path)
    started = time.perf_counter()
    model = CompiledModel.from_file(model_path, hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU)
    (signature,) = model.get_signature_list()
    (input_detail,) = model.get_input_tensor_details(signature).values()
    if any(int(d) < 0 for d in input_detail["shape"]):  # a --dynamic-batch model: run it at batch 1
        model.resize_input_tensor(0, (1, *feed.shape[1:]))
    (output_detail,) = model.get_output_tensor_details(signature).values()
    inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    compile_s = time.perf_counter() - started
    shape = [1, *(int(d) for d in output_detail["shape"][1:])]
    dtype = np.dtype(output_detail["dtype"])
    rows = []
    for x in feed:
        inputs[0].write(np.ascontiguousarray(x[None]))
        model.run_by_index(0, inputs, outputs)
        rows.append(outputs[0].read(int(np.prod(shape)), dtype).reshape(shape))
        if time.perf_counter() - started - compile_s > float(run_seconds):
            break
    np.savez(
        out_path,
        outputs=np.concatenate(rows),
        fully_accelerated=model.is_fully_accelerated(),
        compile_s=compile_s,
        run_s=time.perf_counter() - started - compile_s,
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
