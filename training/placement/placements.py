"""What the trainer asks of a run's devices, one class per backend: `Placement`, `TensorFlowPlacement`,
`JaxPlacement`."""

import contextlib
import dataclasses
from typing import Any


@dataclasses.dataclass
class Placement:
    """The devices of a run and how the trainer uses them: `TensorFlowPlacement` or `JaxPlacement`.

    Each backend's class answers every question the trainer asks (scope, optimizer and model fixes, `jit_compile`,
    the workers' stop agreement, what metrics.json records), so no caller branches on the backend.

    Attributes:
        backend: "tensorflow" or "jax".
        name: what distributes the step ("MirroredStrategy", "DataParallel", "one device", ...).
        reason: why it was chosen (the words of `--strategy auto`'s decision).
        num_replicas: devices the global batch is split over (`num_replicas_in_sync` under tf.distribute).
        device_kind: "cpu", "gpu" or "tpu".
        is_chief: True on the process that writes files.
        num_processes, process_index: the processes of a multi-process JAX run (1 and 0 elsewhere: a
            TensorFlow multi-worker run feeds its workers through `tf.distribute`, not through these).
        local_devices: the devices of this process among the `num_replicas`.
        device_name: a GPU's name as its driver gives it ("NVIDIA H200"), which selects the GPU's backend advice
            (`training.advice`); None on CPUs and TPUs.
    """

    backend: str
    name: str
    reason: str
    num_replicas: int
    device_kind: str
    is_chief: bool = True
    num_processes: int = 1
    process_index: int = 0
    local_devices: int | None = None
    device_name: str | None = None

    @property
    def num_replicas_in_sync(self):  # the tf.distribute spelling, which the trainer's messages use
        return self.num_replicas

    @property
    def shard(self):
        """(this process's index, number of processes): which rows of every global batch this process feeds."""
        return self.process_index, self.num_processes

    def describe(self):
        """One line: backend, devices, what distributes the step and why."""
        devices = f"{self.num_replicas} {self.device_kind} device{'s' if self.num_replicas != 1 else ''}"
        notes = [self.device_name] if self.device_name else []
        if self.num_processes > 1:
            notes.append(f"{self.num_processes} processes x {self.local_devices}; this is process {self.process_index}")
        if notes:
            devices += f" ({'; '.join(notes)})"
        return f"backend {self.backend}, {devices}, {self.name} - {self.reason}"

    def metrics(self):
        """What metrics.json records about the placement."""
        return {
            "backend": self.backend,
            "strategy": self.name,
            "replicas": self.num_replicas,
            "devices": self.num_replicas,
            "device_kind": self.device_kind,
            "device_name": self.device_name,
            **self._processes(),
        }

    def whole_weights(self, model):
        """Called by every process before the chief writes model.keras: a placement whose weights no one process
        holds whole (fsdp over several processes) makes them whole here. Nothing to do elsewhere."""

    def _processes(self):
        """{"processes", "local_devices"}: JAX's processes (a TensorFlow cluster's workers: its own class)."""
        return {"processes": self.num_processes, "local_devices": self.local_devices}


@dataclasses.dataclass
class TensorFlowPlacement(Placement):
    """A `tf.distribute` strategy (`tf_strategy`), with the `training.placement.workarounds` Keras needs under it."""

    tf_strategy: Any = None

    def scope(self):
        """Where variables are created: the strategy's scope."""
        return self.tf_strategy.scope()

    def prepare_optimizer(self, optimizer):
        """The optimizer, with the replica-clipping and accumulation fixes."""
        from . import workarounds

        if optimizer.gradient_accumulation_steps and workarounds.uses_merge_call(self.tf_strategy):
            return workarounds.accumulate_across_replicas(optimizer, self.tf_strategy)  # clips after the sum too
        return workarounds.clip_after_all_reduce(optimizer, self.tf_strategy)

    def prepare_model(self, model):
        """The compiled model, with the multi-worker `fit` fix where it applies."""
        from . import workarounds

        if workarounds.needs_local_batch_build(self.tf_strategy):
            workarounds.use_local_batch_for_symbolic_build(model)
        return model

    def fit_steps_per_execution(self, steps_per_execution, accum_steps):
        """Keras `fit` steps per execution (micro-batches) for `steps_per_execution` optimiser steps."""
        from .workarounds import fit_steps_per_execution

        return fit_steps_per_execution(self.tf_strategy, steps_per_execution, accum_steps)

    def resolve_jit_compile(self, requested, measured=None):
        """(jit_compile for `Model.compile`, why): see `training.placement.strategy.resolve_jit_compile`. `measured`:
        the `training.advice.Advice` for this run, which decides "auto" on a CPU."""
        from .strategy import resolve_jit_compile

        return resolve_jit_compile(requested, self.tf_strategy, measured)

    def form(self, jit_compile):
        """The benchmark's name of this run's form: "TensorFlow" or "TensorFlow+XLA"."""
        return "TensorFlow+XLA" if jit_compile is True else "TensorFlow"

    def stop_agreement(self):
        """A function `(local_flags) -> flags of all workers`, or None when this process is the whole run.

        `local_flags` is a list of 0/1 ints (here: [non-finite loss, SIGTERM]); the result sums each over the
        workers, so every worker learns that any one of them has to stop and all stop at the same step. Under
        MultiWorkerMirroredStrategy it is one small all-reduce, which every worker must call at the same point.
        """
        from .strategy import num_workers

        if num_workers(self.tf_strategy) <= 1:
            return None
        strategy = self.tf_strategy

        def agree(local_flags):
            import tensorflow as tf

            flags = tf.constant(local_flags, tf.int32)
            # One value per local replica; only the first of this worker's replicas carries its flags.
            values = strategy.experimental_distribute_values_from_function(
                lambda context: (
                    flags
                    if context.replica_id_in_sync_group % strategy.extended._num_devices_per_worker == 0
                    else tf.zeros_like(flags)
                )
            )
            return [int(v) for v in strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None).numpy()]

        return agree

    def _processes(self):
        from .strategy import num_workers

        workers = num_workers(self.tf_strategy)
        return {"processes": workers, "local_devices": self.num_replicas // workers}


@dataclasses.dataclass
class JaxPlacement(Placement):
    """`keras.distribution.DataParallel` over the devices (`distribution`, None for one device) and, on a
    multi-process run, the processes of `training.placement.processes`."""

    distribution: Any = None

    def scope(self):
        """Where variables are created: the distribution's scope."""
        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()

    def prepare_optimizer(self, optimizer):
        return optimizer  # JAX needs neither of TensorFlow's fixes

    def prepare_model(self, model):
        return model

    def fit_steps_per_execution(self, steps_per_execution, accum_steps):
        return steps_per_execution * accum_steps  # whole updates per execution

    def resolve_jit_compile(self, requested, measured=None):
        """(jit_compile for `Model.compile`, why): every train step is a jitted XLA program whatever is asked;
        "auto" and True keep Keras' jit, False runs the step eagerly (slow, for debugging)."""
        if requested is False:
            return False, "jit_compile=False: JAX runs the step op by op"
        return True, f"jit_compile={requested}: the step is one jitted XLA program (JAX)"

    def form(self, jit_compile):
        return "JAX"

    def stop_agreement(self):
        """`training.placement.processes.agree_flags` on a multi-process run (see `TensorFlowPlacement.stop_agreement`),
        else None: one process's own flags decide."""
        if self.num_processes > 1:
            from . import processes

            return processes.agree_flags
        return None
