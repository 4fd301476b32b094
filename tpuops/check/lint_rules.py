"""The lint rules of `tpuops check`: each a generator of (node, message).

Step rules (XLA001-003, here) look only inside compiled steps (see `scopes.py`); file rules (XLA004-007, in
`file_rules.py`) look at a whole module, with the context that decides whether a pattern is a hazard there.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuops.check.host_tensors import HOST_FACTORIES
from tpuops.check.project import Module, dotted, last_name, params_of
from tpuops.check.steps import Hit, Step
from tpuops.check.tensors import HOST_COPY_HELPERS, TensorValues
from tpuops.check.wrappers import host_callback
from tpuops.check.wrappers import keyword as _keyword


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


DYNAMIC_SHAPE_CALLS = {"boolean_mask", "masked_select", "nonzero", "argwhere", "flatnonzero", "unique"}
# In a step, these pad a list of tensors to the longest one: the shape depends on this step's data.
STEP_PADDING_CALLS = {"pad_sequence"}
HOST_SYNC_METHODS = {"numpy", "item", "cpu", "tolist"}
NUMPY_ARRAYS = {"zeros", "ones", "empty", "full", "array", "asarray", "zeros_like", "ones_like", "empty_like"}
# Calls that turn their arguments into text (or a logged number): a tensor given to them is read from the device.
REPORTING_CALLS = {"print", "master_print", "info", "debug", "warning", "error", "log", "write", "set_postfix",
                   "set_description", "add_scalar", "add_scalars", "log_metrics", "log_dict",
                   "add_batch"}  # (a Hugging Face `evaluate` metric's: it turns the tensors into host lists)
MATH_ROOTS = {"math", "np", "numpy", "jnp", "torch", "tf"}
TOKEN_DECODERS = {"decode", "batch_decode"}  # a tokenizer's: it turns the ids into a Python list first
RANDOM_MODULES = ("random.", "np.random.", "numpy.random.", "rng.", "rs.")  # Python's and NumPy's, not torch's


# ------------------------------------------------------------------------------------------- step rules


def tensor_branch(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    if step.kind == "tf":  # AutoGraph turns an `if` on a tensor in a tf.function into tf.cond, which XLA compiles
        return
    evident = values.evident
    for node in nodes:
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert) and evident.is_tensor(node.test) and \
                not _field_test(node.test, evident) and not _schedule_test(node.test) and \
                not _truth_of_names(node.test, step, evident):
            word = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(node)]
            yield node, f"Python `{word}` on a tensor value in {_where(step)}"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in {"max", "min"} and node.func.id not in step.module.defs and \
                any(evident.is_tensor(a) for a in node.args):
            yield node, f"Python `{node.func.id}()` of a tensor in {_where(step)} compares its values on the host"


def _schedule_test(test: ast.AST) -> bool:
    """`if i % checkpoint_every == 0:`: a counter's schedule; a tensor's value is not tested with a modulo."""
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.BinOp) and isinstance(test.left.op, ast.Mod)


def _truth_of_names(test: ast.AST, step: Step, evident: TensorValues) -> bool:
    """`if train and use_dropout:`: each part is a name's truth (see below) or no tensor at all."""
    if isinstance(test, ast.BoolOp):
        return all(_truth_of_a_name(v, step) or _field_test(v, evident) or not evident.is_tensor(v)
                   for v in test.values)
    return _truth_of_a_name(test, step)


def _truth_of_a_name(test: ast.AST, step: Step) -> bool:
    """`if not captured:` (a list), `if pos_encoding:` (an argument of a PyTorch/XLA step: a module, a flag or
    None): whether a list has items or an argument was given; a tensor's value is tested by comparing or calling
    something. Not so for a name the step computes from a tensor (`done = reward > 0` ... `if done:`), nor for
    an argument of a jitted function, which is traced."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if not isinstance(test, ast.Name) or step.module is None or step.node is None:
        return False
    function = step.node if isinstance(step.node, ast.FunctionDef | ast.AsyncFunctionDef) else \
        step.module.enclosing_function(step.node)
    bound = step.module.assigns_to(test.id, function)
    if bound:
        return all(isinstance(b.value, ast.List | ast.Tuple | ast.Dict | ast.Set | ast.ListComp | ast.DictComp)
                   for b in bound)
    if step.kind != "lazy" or function is None:
        return False  # a jitted function's argument is traced: `if training:` cannot be decided at trace time
    return test.id in params_of(function)


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
            elif name == "pack_padded_sequence" and step.kind in {"lazy", "torch"}:
                yield node, f"`{name}` in {_where(step)} packs by this step's lengths (read on the host): its " \
                            "shape depends on the data"
            elif name == "pad_packed_sequence" and step.kind in {"lazy", "torch"} and \
                    _keyword(node, "total_length") is None:
                yield node, f"`{name}` without `total_length=` in {_where(step)} pads to this step's longest " \
                            "sequence: a new shape per step"
            elif name == "where" and values.framework_call(node) and len(node.args) == 1 and not node.keywords:
                yield node, f"one-argument `{dotted(node.func)}` in {_where(step)} returns data-dependent indices"
            elif name == "repeat_interleave" and _repeats_by_data(node, method, values):
                yield node, f"`{name}` by a tensor of counts in {_where(step)}: its length is their sum, the data's"
        elif _masked(node, values):
            yield node, f"boolean-mask indexing in {_where(step)}: the result's shape depends on the data"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.Subscript) and _sliced_by_data(node, step, values):
            yield node, f"a slice bounded by a value read from a tensor (or drawn at random) in {_where(step)}: " \
                        "a new graph for each new bound"


def _repeats_by_data(call: ast.Call, method: bool, values: TensorValues) -> bool:
    """`x.repeat_interleave(durations, dim=1)`, `torch.repeat_interleave(x, counts)`: repeated by a tensor, with no
    `output_size=` to fix the length (a Python int repeats by a constant: a fixed shape)."""
    if any(k.arg == "output_size" for k in call.keywords) or not (method or values.framework_call(call)):
        return False
    repeats = next((k.value for k in call.keywords if k.arg == "repeats"), None)
    if repeats is None:
        positional = call.args[0:1] if method else call.args[1:2]
        repeats = positional[0] if positional else None
    return repeats is not None and values.evident.is_tensor(repeats)


def _sliced_by_data(node: ast.Subscript, step: Step, values: TensorValues) -> bool:
    """`embeds[i][:length]` with `length = lengths[i].item()`, `mels[:, start:start + n]` with a random start: a
    slice whose bounds change from step to step (a fixed length, or bounds from shapes and settings, is one
    shape)."""
    if not values.evident.is_tensor(node.value):
        return False  # (a NumPy array or a list sliced on the host)
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    bounds = [b for p in parts if isinstance(p, ast.Slice) for b in (p.lower, p.upper) if b is not None]
    return any(_read_from_a_tensor(b, step, values) for b in bounds)


def _read_from_a_tensor(bound: ast.AST, step: Step, values: TensorValues) -> bool:
    """`lengths[i]` (an element of a tensor), `lengths[i].item()`, `int(n)` of a tensor, a random number
    (`np.random.randint(0, n - width)`: PyTorch/XLA bakes slice bounds into the graph), or a name bound to one of
    them above in the step's function."""
    if isinstance(bound, ast.Subscript):
        return values.evident.is_tensor(bound.value) and not isinstance(bound.slice, ast.Slice)
    if isinstance(bound, ast.Call) and dotted(bound.func).startswith(RANDOM_MODULES):
        return True
    if isinstance(bound, ast.Call):
        func = bound.func
        return (isinstance(func, ast.Attribute) and func.attr == "item" and values.evident.is_tensor(func.value)) or \
            (isinstance(func, ast.Name) and func.id == "int" and len(bound.args) == 1 and
             values.evident.is_tensor(bound.args[0]))
    if isinstance(bound, ast.BinOp):
        return _read_from_a_tensor(bound.left, step, values) or _read_from_a_tensor(bound.right, step, values)
    if not isinstance(bound, ast.Name) or step.module is None:
        return False
    bound_to = step.module.bound_above(bound)
    return bound_to is not None and isinstance(bound_to.value, ast.Call | ast.Subscript) and \
        _read_from_a_tensor(bound_to.value, step, values)


def _masked(node: ast.AST, values: TensorValues) -> bool:
    """`x[mask]` read or written (`x[mask] = 0`, `weights[target == pad] *= w`): PyTorch turns a boolean index
    into the indices of its True elements (`nonzero`), whose number depends on the data."""
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
        return values.is_bool(node.target.slice)
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load | ast.Store) and \
        values.is_bool(node.slice)


def host_sync(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    every = "every step" if step.kind == "lazy" else "in the step"
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
                _on_the_device(v.value, step, values) for v in node.values if isinstance(v, ast.FormattedValue)):
            yield node, f"a tensor formatted into an f-string in {_where(step)} reads its value {every}"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_text(node.left) and \
                _on_the_device(node.right, step, values):
            yield node, f"a tensor formatted with `%` in {_where(step)} reads its value {every}"
        elif isinstance(node, ast.Assign | ast.AugAssign) and _stored_in_host_memory(node, step, values):
            yield node, f"a device tensor stored into a host array in {_where(step)} copies it to the host {every}"


def _stored_in_host_memory(node: ast.Assign | ast.AugAssign, step: Step, values: TensorValues) -> bool:
    """`losses[k] = loss` with `losses = torch.zeros(n)`, `self.tp_arr[i] += tp` with `self.tp_arr =
    np.zeros(bins)`: an element of an array in host memory set to a device tensor copies it there."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if not (len(targets) == 1 and isinstance(targets[0], ast.Subscript)) or step.module is None:
        return False
    array = targets[0].value
    if not (values.on_host(array) or _bound_to_host_arrays(array, step.module)):
        return False
    value = node.value
    return values.is_tensor(value) and not values.on_host(value) and not _copied_before(value, step) and \
        not isinstance(value, ast.Constant)


def _bound_to_host_arrays(array: ast.AST, module: Module) -> bool:
    """A name (in its function) or an attribute of `self` (in its class) every assignment of which makes a NumPy
    array or a PyTorch tensor on the host."""
    if isinstance(array, ast.Name):
        assigns = module.assigns_to(array.id, module.enclosing_function(array))
    elif isinstance(array, ast.Attribute) and isinstance(array.value, ast.Name) and array.value.id == "self":
        owner = module.enclosing_class(array)
        assigns = [n for n in (ast.walk(owner) if owner is not None else ()) if isinstance(n, ast.Assign) and
                   any(isinstance(t, ast.Attribute) and t.attr == array.attr and isinstance(t.value, ast.Name) and
                       t.value.id == "self" for t in n.targets)]
    else:
        return False
    return bool(assigns) and all(_a_host_array(a.value) for a in assigns)


def _a_host_array(value: ast.AST) -> bool:
    path = dotted(value.func) if isinstance(value, ast.Call) else ""
    if path.split(".")[0] in {"np", "numpy"}:
        return last_name(value.func) in NUMPY_ARRAYS
    return path.startswith("torch.") and last_name(value.func) in HOST_FACTORIES and \
        _keyword(value, "device") is None


def _on_the_device(expr: ast.AST, step: Step, values: TensorValues) -> bool:
    """Evidently a tensor (formatting a value only guessed to be one, a path or a counter, would be a false alarm),
    and not one in host memory: made there, or copied there above (`loss = loss.item()` ... `print(loss)`)."""
    return values.evident.is_tensor(expr) and not values.on_host(expr) and not _copied_before(expr, step) and \
        not _python_in_this_branch(expr, step)


def _host_sync_call(node: ast.Call, step: Step, values: TensorValues, every: str) -> Iterator[Hit]:
    func = node.func
    arguments = [*node.args, *(k.value for k in node.keywords)]
    if isinstance(func, ast.Attribute) and func.attr in HOST_SYNC_METHODS and not node.args and \
            (step.kind != "lazy" or values.is_tensor(func.value)) and not values.on_host(func.value) and \
            not _copied_before(func.value, step):
        yield node, f"`.{func.attr}()` in {_where(step)} copies the value to the host {every}"
    elif step.kind == "jax" and host_callback(node):
        yield node, f"`{dotted(func)}` in {_where(step)} calls back to the host {every}"
    elif isinstance(func, ast.Name) and func.id in {"float", "int", "bool"} and node.args and \
            _on_the_device(node.args[0], step, values):
        yield node, f"`{func.id}()` of a tensor in {_where(step)} waits for the device {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in HOST_COPY_HELPERS and \
            last_name(func) not in step.module.defs and any(values.is_tensor(a) for a in node.args):
        # (a library's helper: one of this module's own is read as part of the step, its `.numpy()` found there)
        yield node, f"`{last_name(func)}` of a tensor in {_where(step)} copies it to the host {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in TOKEN_DECODERS and _a_tokenizer(func) and \
            node.args and _on_the_device(node.args[0], step, values):
        yield node, f"`{last_name(func)}` of a device tensor in {_where(step)} reads its token ids {every}"
    elif isinstance(func, ast.Name) and func.id in {"format", "str", "repr"} and node.args and \
            _on_the_device(node.args[0], step, values):
        yield node, f"`{func.id}()` of a tensor in {_where(step)} reads its value {every}"
    elif isinstance(func, ast.Attribute) and func.attr == "format" and _is_text(func.value) and \
            any(_on_the_device(a, step, values) for a in arguments):
        yield node, f"a tensor formatted with `.format()` in {_where(step)} reads its value {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in REPORTING_CALLS and not _math_log(func, values) and \
            not _kept_by_lightning(node, step) and any(_reported(a, node, step, values) for a in arguments):
        # (a traced JAX/TF function prints a placeholder once, while it is traced: no cost per step)
        yield node, f"`{last_name(func)}` of a tensor in {_where(step)} reads the tensor {every}"


def _a_tokenizer(func: ast.AST) -> bool:
    """`tokenizer.decode`, `self.processor.batch_decode`: not an autoencoder's `decode` of latents."""
    receiver = dotted(func.value).lower() if isinstance(func, ast.Attribute) else ""
    return any(word in receiver for word in ("tokenizer", "processor", "tok"))


def _reported(argument: ast.AST, call: ast.Call, step: Step, values: TensorValues) -> bool:
    """A device tensor handed to a reporting call, or any tensor handed to Lightning's `log(...,
    sync_dist=True)`, which reduces it across the cores on the device and reads the result."""
    if _formatted(argument):
        return False
    return _on_the_device(argument, step, values) or \
        (_true_keyword(call, "sync_dist") and values.evident.is_tensor(argument))


def _formatted(expr: ast.AST) -> bool:
    """An f-string or `"..." % x`: the formatting is the read (reported by itself), not the call given its text."""
    return isinstance(expr, ast.JoinedStr | ast.BinOp)


def _kept_by_lightning(call: ast.Call, step: Step) -> bool:
    """`self.log("loss", loss)`, `result.log_dict(logs)` in a LightningModule: Lightning keeps the tensor on the
    device and reads it when it writes its logger (every `log_every_n_steps`, or at the epoch's end); not so with
    `sync_dist=True` (a reduction across the cores through the host, every call) or `on_step=True` in an
    evaluation step (written after every batch)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in {"log", "log_dict"}):
        return False
    receiver = dotted(func.value)
    own = receiver == "self" and step.module is not None and func.attr in step.module.defs
    if own or not (receiver == "self" or receiver.endswith("result")):
        return False
    evaluating = any(word in step.name for word in ("val", "test", "eval"))
    return not (_true_keyword(call, "sync_dist") or (evaluating and _true_keyword(call, "on_step")))


def _true_keyword(call: ast.Call, name: str) -> bool:
    value = _keyword(call, name)
    return isinstance(value, ast.Constant) and value.value is True


def _copied_before(expr: ast.AST, step: Step, depth: int = 0) -> bool:
    """`lens = mask.sum(1).cpu()` ... `lens[i].item()`, `logits = logits.cpu().numpy()` ... `logits.argmax()
    .tolist()`, `acc = correct / total` with both read by `.item()` above: the name was last bound, above this
    line, to a copy on the host (or arithmetic of such copies); reading it again waits for no device (the copy is
    reported where it is made)."""
    while isinstance(expr, ast.Subscript | ast.Call | ast.Attribute):
        expr = expr.value if not isinstance(expr, ast.Call) else expr.func
    if not isinstance(expr, ast.Name) or step.module is None or depth > 4:
        return False
    bound = step.module.bound_above(expr)
    return bound is not None and _arithmetic_of_copies(bound.value, step, depth)


def _arithmetic_of_copies(value: ast.AST, step: Step, depth: int) -> bool:
    if isinstance(value, ast.BinOp):
        return all(isinstance(part, ast.Constant) or _arithmetic_of_copies(part, step, depth)
                   for part in (value.left, value.right))
    if isinstance(value, ast.Name):
        return _copied_before(value, step, depth + 1)
    return _a_host_copy(value)


def _a_host_copy(value: ast.AST) -> bool:
    """`x.detach().cpu()`, `x.cpu().numpy()`, `x.tolist()`: a call chain that copies to the host; or a dict or
    list of such copies (`info = {k: v.mean().item() for k, v in info.items()}`)."""
    if isinstance(value, ast.DictComp):
        return _a_host_copy(value.value)
    if isinstance(value, ast.ListComp):
        return _a_host_copy(value.elt)
    if isinstance(value, ast.Dict | ast.List | ast.Tuple):
        parts = value.values if isinstance(value, ast.Dict) else value.elts
        return bool(parts) and all(_a_host_copy(p) or isinstance(p, ast.Constant) for p in parts)
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr in {"cpu", "numpy", "tolist", "item"}:
            return True
        value = value.func.value
    return False


def _python_in_this_branch(expr: ast.AST, step: Step) -> bool:
    """`if not torch.is_tensor(norm): norm = torch.tensor(float(norm))`: in this branch the name holds a Python
    number (also the `else` of `if isinstance(x, torch.Tensor):`)."""
    if not isinstance(expr, ast.Name) or step.module is None:
        return False
    node: ast.AST = expr
    for parent in step.module.ancestors(expr):
        if parent is step.node:
            return False
        if isinstance(parent, ast.If) and _tests_tensor(parent.test, expr.id) is not None:
            tensor_branch = parent.body if _tests_tensor(parent.test, expr.id) else parent.orelse
            if node not in tensor_branch:
                return True
        node = parent
    return False


def _tests_tensor(test: ast.AST, name: str) -> bool | None:
    """True for `torch.is_tensor(name)` or `isinstance(name, torch.Tensor)`, False for their negation, None for
    another test."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    call = test.operand if negated else test
    if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Name) and
            call.args[0].id == name):
        return None
    tensor_test = last_name(call.func) == "is_tensor" or (
        last_name(call.func) == "isinstance" and len(call.args) == 2 and last_name(call.args[1]) == "Tensor")
    return None if not tensor_test else not negated


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
