"""The lint rules of `tpuops check`: each a generator of (node, message).

Step rules (XLA001-003) look only inside compiled steps (see `scopes.py`); file rules (XLA004-007) look at a
whole module, with the context that decides whether a pattern is a hazard there (see `settings.py`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuops.check.project import FunctionNode, Module, dotted, last_name
from tpuops.check.scopes import Step
from tpuops.check.settings import Settings
from tpuops.check.tensors import TensorValues


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
    Rule("XLA003", "host-sync", ".numpy(), .item(), .cpu(), float(t), print(t), a tensor formatted into a string "
         "in a step: a round trip to the host that stalls the TPU every step",
         "return the value from the step and read it every N steps outside it (PyTorch/XLA: xm.add_step_closure)"),
    Rule("XLA004", "pad-longest", "padding to the longest example (padding='longest'/True, a collator without "
         "pad_to_multiple_of, tf.data padded_batch without padded_shapes, pad_sequence in a PyTorch/XLA input "
         "pipeline): a new shape, so a new compilation, "
         "for most batches", "pad to max_length, or set pad_to_multiple_of=64 (a few buckets); tf.data: "
         "padded_batch(..., padded_shapes=...)"),
    Rule("XLA005", "fp16", "float16 as the compute dtype (autocast dtype, .half(), a mixed_float16 policy, "
         "fp16=True): TPUs compute in bfloat16 and float16 needs loss scaling",
         "use bfloat16 (mixed_bfloat16, torch.bfloat16, bf16=True)"),
    Rule("XLA006", "node-host-input", "to_tf_dataset / prepare_tf_dataset / from_generator / numpy_function on a "
         "legacy TPU Node: Python input code cannot run on the Node's TPU host",
         "write TFRecords to gs:// and read them with tf.data", node_only=True),
    Rule("XLA007", "node-local-path", "a local path in tf.data on a legacy TPU Node: the TPU host cannot read the "
         "client VM's disk", "put the files in the bucket and read gs:// paths", node_only=True),
)
RULES_BY_ID = {rule.id: rule for rule in RULES}
STEP_RULE_IDS = ("XLA001", "XLA002", "XLA003")

Hit = tuple[ast.AST, str]

DYNAMIC_SHAPE_CALLS = {"boolean_mask", "masked_select", "nonzero", "argwhere", "flatnonzero", "unique"}
# In a step, these pad a list of tensors to the longest one: the shape depends on this step's data.
STEP_PADDING_CALLS = {"pad_sequence"}
HOST_SYNC_METHODS = {"numpy", "item", "cpu", "tolist"}
TORCH_FACTORIES = {"randint", "rand", "randn", "randperm", "tensor", "zeros", "ones", "arange", "empty", "full"}
# Calls that turn their arguments into text (or a logged number): a tensor given to them is read from the device.
REPORTING_CALLS = {"print", "master_print", "info", "debug", "warning", "error", "log", "write", "set_postfix",
                   "set_description", "add_scalar", "add_scalars", "log_metrics", "log_dict"}
COLLATORS = {"DataCollatorWithPadding", "DataCollatorForLanguageModeling", "DataCollatorForSeq2Seq",
             "DataCollatorForTokenClassification", "DataCollatorForWholeWordMask"}
FP16_ATTRIBUTES = {"torch.float16", "torch.half", "jnp.float16", "jax.numpy.float16", "tf.float16", "np.float16"}
FP16_STRINGS = {"mixed_float16", "float16", "fp16", "half"}
DTYPE_KEYWORDS = {"dtype", "torch_dtype", "param_dtype", "compute_dtype", "policy", "mixed_precision"}
DTYPE_SETTERS = {"to", "astype", "type", "autocast", "set_global_policy", "Policy", "set_policy",
                 "set_default_dtype", "set_dtype_policy", "DTypePolicy"}
FP16_FLAGS = {"fp16", "half_precision", "use_fp16"}
NODE_HOST_CALLS = {"to_tf_dataset", "prepare_tf_dataset", "from_generator", "numpy_function", "py_function"}
EXPORT_CALLS = {"save_pretrained", "save", "save_file", "push_to_hub", "save_model"}
TRAINING_CALLS = {"backward", "apply_gradients", "value_and_grad", "grad", "optimizer_step", "fit", "minimize",
                  "step", "train", "train_step", "GradientTape"}
MATH_ROOTS = {"math", "np", "numpy", "jnp", "torch", "tf"}
TF_DATA_READERS = {"TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset", "list_files"}


# ------------------------------------------------------------------------------------------- step rules


def tensor_branch(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    if step.kind == "tf":  # AutoGraph turns an `if` on a tensor in a tf.function into tf.cond, which XLA compiles
        return
    evident = values.evident
    for node in nodes:
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert) and evident.is_tensor(node.test) and \
                not _field_test(node.test, evident):
            word = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(node)]
            yield node, f"Python `{word}` on a tensor value in {_where(step)}"


def _field_test(test: ast.AST, values: TensorValues) -> bool:
    """`if state.dynamic_scale:` / `if not dynamic_scale:`: whether an optional field of a structure is set (None
    or an object), decided at trace time; a branch on a tensor's value compares or calls something."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return isinstance(test, ast.Attribute) or (isinstance(test, ast.Name) and test.id in values.fields)


def dynamic_shape(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    for node in nodes:
        if isinstance(node, ast.Call):
            name = last_name(node.func)
            method = isinstance(node.func, ast.Attribute) and values.is_tensor(node.func.value)
            sized = any(k.arg == "size" for k in node.keywords)  # jnp.nonzero(x, size=k): a fixed shape
            if name in DYNAMIC_SHAPE_CALLS and (values.framework_call(node) or method) and not sized:
                yield node, f"`{name}` in {_where(step)}: its output shape depends on the data"
            elif name in STEP_PADDING_CALLS and step.kind in {"lazy", "torch"}:
                yield node, f"`{name}` in {_where(step)} pads to this step's longest sequence: a new shape per step"
            elif name == "where" and values.framework_call(node) and len(node.args) == 1 and not node.keywords:
                yield node, f"one-argument `{dotted(node.func)}` in {_where(step)} returns data-dependent indices"
        elif _masked(node, values):
            yield node, f"boolean-mask indexing in {_where(step)}: the result's shape depends on the data"


def _masked(node: ast.AST, values: TensorValues) -> bool:
    """`x[mask]` read or written (`x[mask] = 0`, `weights[target == pad] *= w`): PyTorch turns a boolean index
    into the indices of its True elements (`nonzero`), whose number depends on the data."""
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
        return values.is_bool(node.target.slice)
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load | ast.Store) and \
        values.is_bool(node.slice)


def host_sync(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    every = "every step" if step.kind == "lazy" else "in the step"
    evident = values.evident  # formatting a value guessed to be a tensor (a path, a counter) would be a false alarm
    messages = {id(n) for node in nodes if isinstance(node, ast.Assert) and node.msg is not None
                for n in ast.walk(node.msg)}  # an assert's message is formatted only when it fails
    for node in nodes:
        if id(node) in messages:
            continue
        if isinstance(node, ast.Call):
            yield from _host_sync_call(node, step, values, every)
        elif step.kind not in {"lazy", "torch"}:
            continue  # a traced JAX/TF function formats a placeholder once, while it is traced: no cost per step
        elif isinstance(node, ast.JoinedStr) and any(
                evident.is_tensor(v.value) for v in node.values if isinstance(v, ast.FormattedValue)):
            yield node, f"a tensor formatted into an f-string in {_where(step)} reads its value {every}"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_text(node.left) and \
                evident.is_tensor(node.right):
            yield node, f"a tensor formatted with `%` in {_where(step)} reads its value {every}"


def _host_sync_call(node: ast.Call, step: Step, values: TensorValues, every: str) -> Iterator[Hit]:
    func, evident = node.func, values.evident
    if isinstance(func, ast.Attribute) and func.attr in HOST_SYNC_METHODS and not node.args and \
            (step.kind != "lazy" or values.is_tensor(func.value)) and not _made_on_host(func.value):
        yield node, f"`.{func.attr}()` in {_where(step)} copies the value to the host {every}"
    elif dotted(func).split(".")[-2:] in (["debug", "print"], ["debug", "callback"]) and step.kind == "jax":
        yield node, f"`{dotted(func)}` in {_where(step)} calls back to the host {every}"
    elif isinstance(func, ast.Name) and func.id in {"float", "int", "bool"} and node.args and \
            evident.is_tensor(node.args[0]):
        yield node, f"`{func.id}()` of a tensor in {_where(step)} waits for the device {every}"
    elif isinstance(func, ast.Name) and func.id in {"format", "str", "repr"} and node.args and \
            evident.is_tensor(node.args[0]):
        yield node, f"`{func.id}()` of a tensor in {_where(step)} reads its value {every}"
    elif isinstance(func, ast.Attribute) and func.attr == "format" and _is_text(func.value) and \
            any(evident.is_tensor(a) for a in [*node.args, *(k.value for k in node.keywords)]):
        yield node, f"a tensor formatted with `.format()` in {_where(step)} reads its value {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in REPORTING_CALLS and not _math_log(func, values) and \
            any(evident.is_tensor(a) and not isinstance(a, ast.JoinedStr | ast.BinOp)
                for a in [*node.args, *(k.value for k in node.keywords)]):
        # (a traced JAX/TF function prints a placeholder once, while it is traced: no cost per step)
        yield node, f"`{last_name(func)}` of a tensor in {_where(step)} reads the tensor {every}"


def _made_on_host(expr: ast.AST) -> bool:
    """`torch.randint(1, n, (1,)).item()`: a tensor a PyTorch factory made on the CPU (no `device=`); reading it
    waits for nothing."""
    return isinstance(expr, ast.Call) and dotted(expr.func).startswith("torch.") and \
        last_name(expr.func) in TORCH_FACTORIES and _keyword(expr, "device") is None


def _math_log(func: ast.AST, values: TensorValues) -> bool:
    """`jnp.log(x)`, `np.log(x)`, `tf.print`/`jax.debug.print`: arithmetic or the framework's own in-graph
    print, not a host read."""
    root = dotted(func).split(".")[0]
    return root in {"tf", "jax"} or (last_name(func) == "log" and (root in values.aliases or root in MATH_ROOTS))


def _is_text(expr: ast.AST) -> bool:
    return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))


def _where(step: Step) -> str:
    if step.kind == "lazy":
        return f"PyTorch/XLA step `{step.name}`" if not step.name.startswith("loop") else \
            f"the PyTorch/XLA step loop at line {step.line}"
    return f"compiled step `{step.name}`"


STEP_RULES: dict[str, Callable[[Step, TensorValues, list[ast.AST]], Iterator[Hit]]] = {
    "XLA001": tensor_branch, "XLA002": dynamic_shape, "XLA003": host_sync,
}


# ------------------------------------------------------------------------------------------- file rules


def pad_longest(module: Module, settings: Settings) -> Iterator[Hit]:
    fixed_blocks = _fixed_blocks(module, settings)
    for node in module.calls:
        padding = _keyword(node, "padding")
        values = settings.values(padding, module) if padding is not None else frozenset()
        if any(v is True or v == "longest" for v in values) and not fixed_blocks and \
                not _padded_again(node, module) and \
                not _runs_once(node, module) and not _bucketed(node, module, settings) and \
                not _fixed_features(node, module):  # module-level code outside any loop pads one batch: one shape
            shown = ast.unparse(padding) if padding is not None else ""
            source = "" if isinstance(padding, ast.Constant) else " (its default)"
            yield node, f"padding={shown} pads each batch to its longest example{source}"
        elif padding is None and _tokenizer_pad(node) and not _fixed_data(module) and \
                _unset(_keyword(node, "pad_to_multiple_of")):
            yield node, "tokenizer.pad() without padding= pads each batch to its longest example (padding=True " \
                        "is its default)"
        elif last_name(node.func) in COLLATORS and not fixed_blocks and _unset(_keyword(node, "pad_to_multiple_of")):
            yield node, f"{last_name(node.func)} without pad_to_multiple_of pads each batch to its longest example"
        elif last_name(node.func) == "padded_batch" and len(node.args) < 2 and \
                _unset(_keyword(node, "padded_shapes")):
            yield node, "padded_batch without padded_shapes pads each batch to its longest element"
        elif last_name(node.func) == "pad_sequence" and settings.torch_xla and not _in_forward(node, module) and \
                not _padded_again(node, module):
            yield node, "pad_sequence pads each batch to its longest sequence"


def _in_forward(node: ast.AST, module: Module) -> bool:
    """Inside a model's forward: a step's own ops (the step rules' business), not the input pipeline."""
    function = module.enclosing_function(node)
    return function is not None and function.name.startswith("forward")


def _bucketed(call: ast.Call, module: Module, settings: Settings) -> bool:
    """`pad_to_multiple_of=` given a value that can be set (`self.pad_input_to_multiple_of`, 64): batches fall
    into a few lengths, which the run mode counts if they are still too many."""
    multiple = _keyword(call, "pad_to_multiple_of")
    return not _unset(multiple) and None not in settings.values(multiple, module)


def _fixed_features(call: ast.Call, module: Module) -> bool:
    """A Whisper feature extractor's `pad`: its log-mel features are already 3000 frames long, so padding them
    to the longest changes no shape."""
    return isinstance(call.func, ast.Attribute) and "feature_extractor" in dotted(call.func.value) and \
        "whisper" in module.source.lower()


def _fixed_blocks(module: Module, settings: Settings) -> bool:
    """The module cuts its data to fixed blocks (group_texts) or pads to max_length: its collators pad nothing."""
    if _fixed_data(module):
        return True
    for node in module.calls:
        padding = _keyword(node, "padding")
        if padding is not None and settings.values(padding, module) == frozenset(["max_length"]):
            return True
    return False


def _runs_once(node: ast.Call, module: Module) -> bool:
    owner, loop = module.context[id(node)]
    return owner is module.tree and loop is None


def _tokenizer_pad(node: ast.Call) -> bool:
    """`tokenizer.pad(features)` / `self.processor.tokenizer.pad(...)`: a Hugging Face tokenizer's pad."""
    return isinstance(node.func, ast.Attribute) and node.func.attr == "pad" and \
        "tokenizer" in dotted(node.func.value).lower()


def _fixed_data(module: Module) -> bool:
    """The examples already have one length: cut into blocks (group_texts), or parsed from fixed-length
    tf.data features (FixedLenFeature([max_length]))."""
    return any("group_texts" in name for name in module.defs) or \
        any(last_name(c.func) == "FixedLenFeature" and _shaped(c) for c in module.calls)


def _shaped(call: ast.Call) -> bool:
    shape = call.args[0] if call.args else _keyword(call, "shape")
    return isinstance(shape, ast.List | ast.Tuple) and bool(shape.elts)


def _padded_again(node: ast.Call, module: Module) -> bool:
    """The function pads the result again by hand to a set length (it reads the length, `.shape[1]`, and
    pads/concatenates up to a fixed one), so the longest-in-batch length does not reach a compiled function."""
    function = module.enclosing_function(node)
    if function is None:
        return False
    parts = list(ast.walk(function))
    reads_length = any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and
                       n.value.attr == "shape" for n in parts)
    pads = any(isinstance(n, ast.Call) and last_name(n.func) in {"pad", "full", "concatenate"} for n in parts)
    return reads_length and pads


def fp16(module: Module, settings: Settings) -> Iterator[Hit]:
    if _export_module(module):
        return
    for node in module.calls:
        hit = _fp16_call(node, module, settings)
        if hit is not None and not _behind_fp16_switch(hit[0], module, settings):
            yield hit


def _export_module(module: Module) -> bool:
    """A conversion or export script: it saves a model and trains nothing, so float16 there is a storage dtype."""
    names = {last_name(c.func) for c in module.calls}
    return bool(names & EXPORT_CALLS) and not names & TRAINING_CALLS


def _fp16_call(node: ast.Call, module: Module, settings: Settings) -> Hit | None:
    func = node.func
    if _stored(node):
        return None
    if isinstance(func, ast.Attribute) and func.attr == "half" and not node.args:
        return node, "`.half()` converts to float16: TPUs compute in bfloat16"
    for keyword in node.keywords:
        if keyword.arg in DTYPE_KEYWORDS and _fp16_value(keyword.value):
            shown = _shown(keyword.value) if isinstance(keyword.value, ast.Attribute) else \
                f"{keyword.arg}={_shown(keyword.value)}"
            return keyword.value, f"{shown}: TPUs compute in bfloat16"
        if keyword.arg in FP16_FLAGS and any(v is True for v in settings.values(keyword.value, module)):
            return node, f"{keyword.arg}={ast.unparse(keyword.value)}: TPUs compute in bfloat16 (bf16=True)"
    if last_name(func) in DTYPE_SETTERS:
        for arg in node.args:
            if _fp16_value(arg):
                return arg, f"{_shown(arg)}: TPUs compute in bfloat16"
    return None


def _stored(call: ast.Call) -> bool:
    """`preds.detach().to(torch.float16)`, `x.cpu().half()`: a result kept in float16 to save memory, not a
    dtype anything computes in."""
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
        if receiver.func.attr in {"detach", "cpu", "numpy"}:
            return True
        receiver = receiver.func.value
    return False


def _fp16_value(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Attribute):
        return dotted(expr) in FP16_ATTRIBUTES
    return isinstance(expr, ast.Constant) and expr.value in FP16_STRINGS


def _shown(expr: ast.AST) -> str:
    return f"`{dotted(expr)}`" if isinstance(expr, ast.Attribute) else repr(getattr(expr, "value", ""))


def _behind_fp16_switch(node: ast.AST, module: Module, settings: Settings) -> bool:
    """Inside `if args.fp16:` / `if precision == "fp16":` / `if FLAGS.use_mixed_precision:` whose setting is off
    by default (a user's choice), inside `if torch.cuda.is_available():` / `if device == "gpu":` or the `else`
    of `if use_tpu:` (branches a TPU never takes), or in a helper named for float16 (`def apply_half(t)`), which
    runs where the code chooses float16."""
    child = node
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode) and any(w in ancestor.name.lower() for w in ("half", "fp16")):
            return True
        if isinstance(ancestor, ast.If):
            if _gpu_only(ancestor.test) or (_mentions_tpu(ancestor.test) and _in_orelse(child, ancestor)):
                return True
            switch = _fp16_switch(ancestor.test, module, settings)
            if switch is not None:
                return switch
        child = ancestor
    return False


def _fp16_switch(test: ast.AST, module: Module, settings: Settings) -> bool | None:
    """Whether an `if` test is a switch that is off by default (None: not a switch)."""
    for part in ast.walk(test):
        if isinstance(part, ast.Name | ast.Attribute) and any(w in last_name(part).lower()
                                                              for w in ("fp16", "half", "float16", "mixed")):
            defaults = settings.values(part, module)
            if "mixed" not in last_name(part).lower():
                return not any(v is True for v in defaults)
            if defaults and not defaults - {False, None}:
                return True  # `if FLAGS.use_mixed_precision:`, off by default
            continue
        if isinstance(part, ast.Compare) and any(_fp16_value(c) for c in [part.left, *part.comparators]):
            setting = next((c for c in [part.left, *part.comparators] if not _fp16_value(c)), None)
            defaults = settings.values(setting, module) if setting is not None else frozenset()
            return not any(isinstance(v, str) and v in FP16_STRINGS for v in defaults)
    return None


def _mentions_tpu(test: ast.AST) -> bool:
    words = [dotted(n) for n in ast.walk(test) if isinstance(n, ast.Name | ast.Attribute)]
    words += [n.value for n in ast.walk(test) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return any("tpu" in w.lower() or "xla" in w.lower() for w in words)


def _in_orelse(child: ast.AST, branch: ast.If) -> bool:
    return any(child is n for n in branch.orelse)


def _gpu_only(test: ast.AST) -> bool:
    words = [dotted(n) for n in ast.walk(test) if isinstance(n, ast.Name | ast.Attribute)]
    words += [n.value for n in ast.walk(test) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return any("cuda" in w.lower() or w.lower() == "gpu" for w in words)


def node_host_input(module: Module, settings: Settings) -> Iterator[Hit]:
    for node in module.calls:
        if last_name(node.func) in NODE_HOST_CALLS:
            yield node, f"`{last_name(node.func)}` runs Python on this VM, not on the legacy Node's TPU host"


def node_local_path(module: Module, settings: Settings) -> Iterator[Hit]:
    for node in module.calls:
        if last_name(node.func) in TF_DATA_READERS:
            for arg in node.args[:1]:
                for text in _string_constants(arg):
                    if not text.startswith("gs://"):
                        yield node, f"`{last_name(node.func)}` reads the local path {text!r}"


def _string_constants(arg: ast.AST) -> list[str]:
    items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _unset(value: ast.AST | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and value.value is None)


FILE_RULES: dict[str, Callable[[Module, Settings], Iterator[Hit]]] = {
    "XLA004": pad_longest, "XLA005": fp16, "XLA006": node_host_input, "XLA007": node_local_path,
}
