"""The SavedModel format: `saved_model/` with `serving_default` (raw uint8 images, resized and scaled inside) and
`model_space` signatures, reloaded with TensorFlow and judged both ways. A classifier's serves its logits,
probabilities and top k with its labels (export/saved_model.py); feature maps serve every output by name."""

from .. import commit, runtime
from ..entry import record
from ..feature_maps_artifacts import save_saved_model as save_named
from ..runners import MODEL_SPACE, SIGNATURE, SavedModelRunner
from ..saved_model import save_saved_model

NAME = "saved_model"
KINDS = ("classifier", "feature_maps")  # the kinds of model it writes (an embedder's vector has no serving form here)
OWNED = ("saved_model",)  # the names it writes at the top of `out`, `{stem}` the kind's (regular expressions)
SUFFIXES = ()  # a directory, not a file: `load_runner` opens any directory with saved_model.pb


def open(path, num_threads=1):
    """The runner of a written file (`load_runner`)."""
    return SavedModelRunner(path)


def modes(plan):
    return (None,)


def entry(plan, mode, v, staging, out, options):
    """Writes `saved_model/`, reloads it and judges both signatures; its report entry."""
    kind, classifier = plan.kind, plan.labels is not None
    if classifier:
        path = save_saved_model(plan.model, staging / NAME, plan.description, top_k=options.top_k)
    else:
        path = save_named(plan.model, staging / NAME)
    commit.fault_point("saved_model staged")
    runner = SavedModelRunner(path)
    found = kind.figures(runner.outputs(v.x), v.reference, v.truth)
    # The signature users call: raw uint8 images in, resize and scaling inside the graph.
    served = kind.figures(runner.outputs_from_images(v.images), v.reference, v.truth)
    budget = kind.BUDGETS[NAME]
    failures = kind.check_budget(found, budget) + [f"serving_default: {f}" for f in kind.check_budget(served, budget)]
    if classifier:
        fields = {"serving_default_max_abs_logit_diff": served["max_abs_logit_diff"]}
    else:
        fields = {"serving_default": served, "signatures": [SIGNATURE, MODEL_SPACE]}
    size = runtime.dir_bytes(path)
    return record(plan, v, options, NAME, NAME, None, out, size, found, runner, budget, failures, **fields)
