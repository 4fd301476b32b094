"""Steps a library runs from methods of the trainer's classes: a LightningModule's steps and the hooks Lightning
calls around each batch, a Keras model's overridden `train_step` and a Keras metric's `update_state`, and the
per-batch methods a Hugging Face `Trainer` subclass overrides (`compute_loss`, `training_step`,
`prediction_step`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tpuops.check.project import (
    KERAS_ROOTS,
    LIGHTNING_ROOTS,
    FunctionNode,
    Module,
    dotted,
    last_name,
    params_of,
    positional_params,
)
from tpuops.check.pyvalues import flag_params
from tpuops.check.steps import Step

KERAS_STEP_METHODS = {"train_step", "test_step"}
# Keras runs these of a custom metric inside its compiled train and test functions, on every batch.
KERAS_METRIC_METHODS = {"update_state", "result"}
LIGHTNING_STEP_METHODS = {"training_step", "validation_step", "test_step", "predict_step"}
# The hooks Lightning calls around every batch (a LightningModule's and a Callback's): step code too.
LIGHTNING_BATCH_HOOKS = {"on_train_batch_start", "on_train_batch_end", "on_validation_batch_start",
                         "on_validation_batch_end", "on_before_backward", "on_after_backward",
                         "on_before_optimizer_step", "training_step_end", "validation_step_end"}
LIGHTNING_HOOK_TENSORS = frozenset({"batch", "outputs", "loss", "step_output"})  # what such hooks are handed
# What a Hugging Face Trainer (or TRL's, built on it) calls for every training or evaluation batch, handing it
# the batch as `inputs`; on a TPU the Trainer has put the model and the batch on the XLA device.
HF_TRAINER_BATCH_METHODS = {"compute_loss", "training_step", "prediction_step"}
HF_TRAINER_ROOTS = {"transformers", "trl"}


def class_steps(cls_node: ast.ClassDef, module: Module) -> Iterator[Step]:
    lightning = _lightning_class(cls_node, module)
    hf_trainer = hf_trainer_class(cls_node, module)
    for method in cls_node.body:
        if not isinstance(method, FunctionNode):
            continue
        name = f"{cls_node.name}.{method.name}"
        # Lightning runs these on the XLA device, one per batch, with the batch on the device
        if lightning == "module" and method.name in LIGHTNING_STEP_METHODS:
            yield Step(name, "lazy", "a Lightning step", module, method, _first_argument(method))
        elif lightning and method.name in LIGHTNING_BATCH_HOOKS:
            yield Step(name, "lazy", "a Lightning hook run every batch", module, method,
                       frozenset(params_of(method)) & LIGHTNING_HOOK_TENSORS)
        elif hf_trainer and method.name in HF_TRAINER_BATCH_METHODS:
            # the Trainer may run on a GPU as well: what it finds there is a note the run settles
            yield Step(name, "lazy", "a Hugging Face Trainer's per-batch method", module, method,
                       frozenset(params_of(method)) & {"inputs"}, sure=False)
    if any(last_name(b).endswith("Model") for b in cls_node.bases):
        # tf.keras (Keras 2) runs an overridden train_step through AutoGraph, Keras 3 does not
        kind = "tf" if _tf_keras(cls_node, module) else "keras"
        for method in cls_node.body:
            if isinstance(method, FunctionNode) and method.name in KERAS_STEP_METHODS:
                yield Step(f"{cls_node.name}.{method.name}", kind, "Keras train_step", module, method,
                           frozenset(params_of(method) - {"self"}))
    if module.imports_any(KERAS_ROOTS) and any(last_name(b) == "Metric" for b in cls_node.bases):
        kind = "tf" if _tf_keras(cls_node, module) else "keras"
        for method in cls_node.body:
            if isinstance(method, FunctionNode) and method.name in KERAS_METRIC_METHODS:
                yield Step(f"{cls_node.name}.{method.name}", kind, "a Keras metric (run by fit every batch)",
                           module, method, frozenset(params_of(method) - {"self"} - flag_params(method)))


def _lightning_class(cls_node: ast.ClassDef, module: Module) -> str:
    """"module" for a LightningModule (also one of a library built on it: `NeuronLTModule` imported from
    `neuronx_distributed.lightning`), "callback" for a Lightning Callback, else ""."""
    for base in cls_node.bases:
        name = last_name(base)
        source = module.imported.get(dotted(base).split(".")[0], ("", None))[0]
        from_lightning = "lightning" in source.split(".") or source.split(".")[0] in LIGHTNING_ROOTS
        if name == "LightningModule" or (from_lightning and name.endswith("Module")):
            return "module"
        if name == "Callback" and from_lightning:
            return "callback"
    return ""


def hf_trainer_class(cls_node: ast.ClassDef, module: Module, callbacks: bool = False) -> bool:
    """The class subclasses a Hugging Face Trainer (`Trainer`, `Seq2SeqTrainer`, TRL's `SFTTrainer`), or with
    `callbacks` a `TrainerCallback` (which the Trainer calls with its model, on its device)."""
    for base in cls_node.bases:
        source = module.imported.get(dotted(base).split(".")[0], ("", None))[0]
        name = last_name(base)
        if (name.endswith("Trainer") or (callbacks and name == "TrainerCallback")) and \
                source.split(".")[0] in HF_TRAINER_ROOTS:
            return True
    return False


def _first_argument(method: FunctionNode) -> frozenset[str]:
    """The batch a Lightning step gets: its first argument after self (`batch_idx` is a count)."""
    names = [name for name in positional_params(method) if name != "self"]
    return frozenset(names[:1])


def _tf_keras(cls_node: ast.ClassDef, module: Module) -> bool:
    """The model subclasses tf.keras.Model (`tf.keras.Model`, or `Model` imported from tensorflow.keras)."""
    for base in cls_node.bases:
        path = dotted(base)
        root = path.split(".")[0]
        source = module.imported.get(root, ("", None))[0]
        if path.startswith(("tf.", "tensorflow.")) or source.startswith("tensorflow"):
            return True
    return False
