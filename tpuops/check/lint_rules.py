"""The lint rules of `tpuops check`: each a generator of (node, message) over one module.

Step rules look only inside compiled steps (see `scopes.py`); file rules look at the whole module.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuops.check.scopes import ModuleScopes, Step, TensorValues, dotted, last_name


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    why: str  # one line for --help and the README
    hint: str
    node_only: bool = False  # only for a legacy TPU Node spec


RULES: tuple[Rule, ...] = (
    Rule("XLA001", "tensor-branch", "a Python if/while on a tensor inside a compiled step: XLA cannot compile "
         "data-dependent control flow", "use jnp.where / lax.cond (JAX) or torch.where (PyTorch) instead"),
    Rule("XLA002", "dynamic-shape", "boolean-mask indexing, boolean_mask, masked_select, nonzero() in a step: "
         "the result's shape depends on the data", "multiply by a 0/1 mask or use where(mask, x, 0): fixed shapes"),
    Rule("XLA003", "host-sync", ".numpy(), .item(), .cpu(), float(t), print(t) in a step: a round trip to the host "
         "that stalls the TPU every step", "return the value from the step and read it every N steps outside it"),
    Rule("XLA004", "pad-longest", "padding to the longest example (padding='longest'/True, a collator without "
         "pad_to_multiple_of): a new shape, so a new compilation, for most batches",
         "pad to max_length, or set pad_to_multiple_of=64 (a few buckets)"),
    Rule("XLA005", "fp16", "float16 (mixed_float16, torch.float16, .half(), fp16=True): TPUs compute in bfloat16 "
         "and float16 needs loss scaling", "use bfloat16 (mixed_bfloat16, torch.bfloat16, bf16=True)"),
    Rule("XLA006", "node-host-input", "to_tf_dataset / prepare_tf_dataset / from_generator / numpy_function on a "
         "legacy TPU Node: Python input code cannot run on the Node's TPU host",
         "write TFRecords to gs:// and read them with tf.data", node_only=True),
    Rule("XLA007", "node-local-path", "a local path in tf.data on a legacy TPU Node: the TPU host cannot read the "
         "client VM's disk", "put the files in the bucket and read gs:// paths", node_only=True),
)
RULES_BY_ID = {rule.id: rule for rule in RULES}

Hit = tuple[ast.AST, str]

DYNAMIC_SHAPE_CALLS = {"boolean_mask", "masked_select", "nonzero", "argwhere", "flatnonzero", "unique"}
HOST_SYNC_METHODS = {"numpy", "item", "cpu", "tolist"}
COLLATORS = {"DataCollatorWithPadding", "DataCollatorForLanguageModeling", "DataCollatorForSeq2Seq",
             "DataCollatorForTokenClassification", "DataCollatorForWholeWordMask"}
FP16_ATTRIBUTES = {"torch.float16", "torch.half", "jnp.float16", "jax.numpy.float16", "tf.float16"}
FP16_STRINGS = {"mixed_float16", "float16", "fp16", "half"}
NODE_HOST_CALLS = {"to_tf_dataset", "prepare_tf_dataset", "from_generator", "numpy_function", "py_function"}
TF_DATA_READERS = {"TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset", "list_files"}


# ------------------------------------------------------------------------------------------- step rules


def tensor_branch(step: Step, values: TensorValues) -> Iterator[Hit]:
    if step.kind == "tf":  # AutoGraph turns an `if` on a tensor in a tf.function into tf.cond, which XLA compiles
        return
    for node in ast.walk(step.node):
        if isinstance(node, ast.If | ast.While | ast.IfExp) and values.is_tensor(node.test):
            word = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else"}[type(node)]
            yield node, f"Python `{word}` on a tensor value in compiled step `{step.name}`"


def dynamic_shape(step: Step, values: TensorValues) -> Iterator[Hit]:
    for node in ast.walk(step.node):
        if isinstance(node, ast.Call):
            name = last_name(node.func)
            method = isinstance(node.func, ast.Attribute) and values.is_tensor(node.func.value)
            if name in DYNAMIC_SHAPE_CALLS and (values.framework_call(node) or method):
                yield node, f"`{name}` in compiled step `{step.name}`: its output shape depends on the data"
            elif name == "where" and values.framework_call(node) and len(node.args) == 1 and not node.keywords:
                yield node, f"one-argument `{dotted(node.func)}` in compiled step `{step.name}` returns data-" \
                    "dependent indices"
        elif isinstance(node, ast.Subscript) and values.is_bool(node.slice):
            yield node, f"boolean-mask indexing in compiled step `{step.name}`: the result's shape depends on the data"


def host_sync(step: Step, values: TensorValues) -> Iterator[Hit]:
    for node in ast.walk(step.node):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in HOST_SYNC_METHODS and not node.args:
            yield node, f"`.{node.func.attr}()` in compiled step `{step.name}` copies the value to the host"
        elif isinstance(node.func, ast.Name) and node.func.id in {"float", "int", "bool"} and node.args \
                and values.is_tensor(node.args[0]):
            yield node, f"`{node.func.id}()` of a tensor in compiled step `{step.name}` waits for the device"
        elif isinstance(node.func, ast.Name) and node.func.id == "print" and any(
                values.is_tensor(part) for arg in node.args for part in _printed(arg)):
            yield node, f"`print` of a tensor in compiled step `{step.name}` prints a trace-time placeholder " \
                "(JAX, tf.function) or waits for the device (PyTorch/XLA)"


def _printed(arg: ast.AST) -> list[ast.AST]:
    if isinstance(arg, ast.JoinedStr):
        return [v.value for v in arg.values if isinstance(v, ast.FormattedValue)]
    return [arg]


STEP_RULES: dict[str, Callable[[Step, TensorValues], Iterator[Hit]]] = {
    "XLA001": tensor_branch, "XLA002": dynamic_shape, "XLA003": host_sync,
}


# ------------------------------------------------------------------------------------------- file rules


def pad_longest(tree: ast.Module) -> Iterator[Hit]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        padding = _keyword(node, "padding")
        if isinstance(padding, ast.Constant) and (padding.value is True or padding.value == "longest"):
            yield node, f"padding={padding.value!r} pads each batch to its longest example"
        elif last_name(node.func) in COLLATORS and _keyword(node, "pad_to_multiple_of") is None:
            yield node, f"{last_name(node.func)} without pad_to_multiple_of pads each batch to its longest example"


def fp16(tree: ast.Module) -> Iterator[Hit]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and dotted(node) in FP16_ATTRIBUTES:
            yield node, f"`{dotted(node)}`: TPUs compute in bfloat16"
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "half" and not node.args:
                yield node, "`.half()` converts to float16: TPUs compute in bfloat16"
            fp16_flag = _keyword(node, "fp16")
            if isinstance(fp16_flag, ast.Constant) and fp16_flag.value is True:
                yield node, "fp16=True: TPUs compute in bfloat16 (bf16=True)"
            for value in [*node.args, *(k.value for k in node.keywords if k.arg in {"dtype", "policy", "name"})]:
                if isinstance(value, ast.Constant) and value.value in FP16_STRINGS:
                    yield value, f"{value.value!r}: TPUs compute in bfloat16"


def node_host_input(tree: ast.Module) -> Iterator[Hit]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and last_name(node.func) in NODE_HOST_CALLS:
            yield node, f"`{last_name(node.func)}` runs Python on this VM, not on the legacy Node's TPU host"


def node_local_path(tree: ast.Module) -> Iterator[Hit]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and last_name(node.func) in TF_DATA_READERS:
            for arg in node.args[:1]:
                for text in _string_constants(arg):
                    if not text.startswith("gs://"):
                        yield node, f"`{last_name(node.func)}` reads the local path {text!r}"


def _string_constants(arg: ast.AST) -> list[str]:
    items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


FILE_RULES: dict[str, Callable[[ast.Module], Iterator[Hit]]] = {
    "XLA004": pad_longest, "XLA005": fp16, "XLA006": node_host_input, "XLA007": node_local_path,
}


def module_hits(tree: ast.Module, legacy_node: bool) -> Iterator[tuple[Rule, ast.AST, str]]:
    scopes = ModuleScopes.of(tree)
    for step in scopes.steps():
        values = TensorValues(step, scopes.aliases)
        for rule_id, check in STEP_RULES.items():
            for node, message in check(step, values):
                yield RULES_BY_ID[rule_id], node, message
    for rule_id, check in FILE_RULES.items():
        rule = RULES_BY_ID[rule_id]
        if rule.node_only and not legacy_node:
            continue
        for node, message in check(tree):
            yield rule, node, message
