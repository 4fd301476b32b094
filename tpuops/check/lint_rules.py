"""The lint rules of `tpuops check`: each a generator of (node, message).

Step rules (XLA001-002 here, XLA003 in `host_reads.py`) look only inside compiled steps (see `scopes.py`); file
rules (XLA004-007, in `file_rules.py`) look at a whole module, with the context that decides whether a pattern is a
hazard there.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tpuops.check.host_reads import host_sync
from tpuops.check.project import Module, dotted, last_name, params_of
from tpuops.check.pyvalues import none_default_params
from tpuops.check.steps import Hit, Step
from tpuops.check.tensors import TensorValues
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
RANDOM_MODULES = ("random.", "np.random.", "numpy.random.", "rng.", "rs.")  # Python's and NumPy's, not torch's


# ------------------------------------------------------------------------------------------- step rules


def tensor_branch(step: Step, values: TensorValues, nodes: list[ast.AST]) -> Iterator[Hit]:
    if step.kind == "tf":  # AutoGraph turns an `if` on a tensor in a tf.function into tf.cond, which XLA compiles
        return
    evident = values.evident
    for node in nodes:
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert) and evident.is_tensor(node.test) and \
                not _field_test(node.test, evident) and not _schedule_test(node.test) and \
                not _truth_of_names(node.test, step, evident) and not _only_in_float16(node.test) and \
                not _mode_switch(node.test, step):
            word = {ast.If: "if", ast.While: "while", ast.IfExp: "... if ... else", ast.Assert: "assert"}[type(node)]
            yield node, f"Python `{word}` on a tensor value in {step.where}"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.If | ast.While) and \
                _sizes_a_data_shaped_result(node.test, step, values):
            yield node, f"Python `if` on the size of a result whose shape depends on the data (boolean-mask " \
                        f"indexing, nonzero) in {step.where}: only the device knows it, so the host waits for it"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in {"max", "min"} and node.func.id not in step.module.defs and \
                any(evident.is_tensor(a) for a in node.args):
            yield node, f"Python `{node.func.id}()` of a tensor in {step.where} compares its values on the host"


# Calls that keep the number of elements of what they are called on: `torch.nonzero(m).squeeze()` is as long
# as the nonzero result.
COUNT_KEEPING = {"squeeze", "flatten", "view", "reshape", "long", "float", "int", "detach", "contiguous", "t"}


def _sizes_a_data_shaped_result(test: ast.AST, step: Step, values: TensorValues) -> bool:
    """`if len(kept) == 0:` with `kept = y[y != ignore_index]`, `if rows.numel() == 0:` with `rows =
    torch.nonzero(mask).squeeze()`: the size of a result whose shape depends on the data."""
    return any(subject is not None and _data_shaped(subject, step, values)
               for subject in map(_sized, ast.walk(test)))


def _sized(node: ast.AST) -> ast.AST | None:
    """What `len(x)`, `x.numel()`, `x.nelement()`, `x.size(0)` or `x.shape[0]` measures."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and node.args:
        return node.args[0]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in {"numel", "nelement", "size"}:
        return node.func.value
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return node.value.value
    return None


def _indexed_by_data_shaped(node: ast.Subscript, step: Step, values: TensorValues) -> bool:
    """`logits[mask_indices]` or `x[idx] = y` with `mask_indices = torch.nonzero(mask, as_tuple=True)`: indices a
    name holds, as many as the data makes."""
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return values.is_tensor(node.value) and \
        any(isinstance(p, ast.Name) and _data_shaped(p, step, values) for p in parts)


def _data_shaped(expr: ast.AST, step: Step, values: TensorValues, depth: int = 0) -> bool:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in COUNT_KEEPING:
        expr = expr.func.value
    if isinstance(expr, ast.Call):
        return _dynamic_shape_call(expr, values)
    if isinstance(expr, ast.Subscript) and _masked(expr, values):
        return values.evident.is_tensor(expr.value) and not values.on_host(expr.value)
    if isinstance(expr, ast.Name) and step.module is not None and depth < 3:
        bound = step.module.bound_above(expr)
        return bound is not None and _data_shaped(bound.value, step, values, depth + 1)
    return False


def _only_in_float16(test: ast.AST) -> bool:
    """`if x.dtype == torch.float16 and torch.isinf(x).any():` (a float16 model's overflow clamp): the tensor
    is tested only in a float16 model, which on a TPU is a problem of its own (XLA005)."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return False
    first = test.values[0]
    return isinstance(first, ast.Compare) and isinstance(first.left, ast.Attribute) and first.left.attr == "dtype" \
        and isinstance(first.ops[0], ast.Eq | ast.Is) and last_name(first.comparators[0]) in {"float16", "half"}


def _mode_switch(test: ast.AST, step: Step) -> bool:
    """`if test == 1:` with `def forward(self, x, test=None)`: an optional argument compared with a number or a
    string selects a mode; a tensor handed in that way is compared elementwise, not tested with `if`."""
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1 and
            isinstance(test.ops[0], ast.Eq | ast.NotEq) and isinstance(test.comparators[0], ast.Constant) and
            isinstance(test.comparators[0].value, int | str) and step.module is not None):
        return False
    function = step.module.enclosing_function(test)
    return function is not None and test.left.id in none_default_params(function) and \
        not any(b.lineno < test.lineno for b in step.module.assigns_to(test.left.id, function))


def _schedule_test(test: ast.AST) -> bool:
    """`if i % checkpoint_every == 0:`: a counter's schedule; a tensor's value is not tested with a modulo."""
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.BinOp) and isinstance(test.left.op, ast.Mod)


def _truth_of_names(test: ast.AST, step: Step, evident: TensorValues) -> bool:
    """`if train and use_dropout:`: each part is a name's truth (see below) or no tensor at all."""
    if isinstance(test, ast.BoolOp):  # `(train and use_dropout) or force_ids is not None` too
        return all(_truth_of_names(v, step, evident) or _field_test(v, evident) or not evident.is_tensor(v)
                   for v in test.values)
    return _truth_of_a_name(test, step)


def _truth_of_a_name(test: ast.AST, step: Step) -> bool:
    """`if not captured:` (a list), `if pos_encoding:` (an argument of a PyTorch/XLA step: a module, a flag or
    None): whether a list has items or an argument was given; a tensor's value is tested by comparing or calling
    something. Not so for a name the step computes from a tensor (`done = reward > 0` ... `if done:`), nor for
    an argument of a jitted function, which is traced."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Subscript) and isinstance(test.slice, ast.Constant) and \
            isinstance(test.slice.value, str):
        return True  # `if outputs["aux_losses"]:` whether a dict holds a (non-empty) entry
    if not isinstance(test, ast.Name) or step.module is None or step.node is None:
        return False
    function = step.node if isinstance(step.node, ast.FunctionDef | ast.AsyncFunctionDef) else \
        step.module.enclosing_function(step.node)
    bound = [b for b in step.module.assigns_to(test.id, function) if b.lineno < test.lineno]
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
            if _dynamic_shape_call(node, values):
                yield node, f"`{name}` in {step.where}: its output shape depends on the data"
            elif name in STEP_PADDING_CALLS and step.kind in {"lazy", "torch"}:
                yield node, f"`{name}` in {step.where} pads to this step's longest sequence: a new shape per step"
            elif name == "pack_padded_sequence" and step.kind in {"lazy", "torch"}:
                yield node, f"`{name}` in {step.where} packs by this step's lengths (read on the host): its " \
                            "shape depends on the data"
            elif name == "pad_packed_sequence" and step.kind in {"lazy", "torch"} and \
                    _keyword(node, "total_length") is None:
                yield node, f"`{name}` without `total_length=` in {step.where} pads to this step's longest " \
                            "sequence: a new shape per step"
            elif name == "where" and values.framework_call(node) and len(node.args) == 1 and not node.keywords:
                yield node, f"one-argument `{dotted(node.func)}` in {step.where} returns data-dependent indices"
            elif name == "repeat_interleave" and _repeats_by_data(node, method, values):
                yield node, f"`{name}` by a tensor of counts in {step.where}: its length is their sum, the data's"
            elif step.kind in {"lazy", "torch"} and _sized_by_data(node, method, step, values):
                yield node, f"`{name}` sized by a value read from a tensor in {step.where}: a new shape, and a new " \
                            "graph, whenever the value changes"
        elif _masked(node, values):
            yield node, f"boolean-mask indexing in {step.where}: the result's shape depends on the data"
        elif step.kind in {"lazy", "torch"} and step.module is not None and isinstance(node, ast.Assign) and \
                isinstance(node.value, ast.Call) and grows_by_concatenation(node, step.module) and \
                values.framework_call(node.value):
            yield node, f"`{ast.unparse(node.targets[0])}` grown by concatenation in {step.where}: a new shape, " \
                        "and a new graph, each time round its loop"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.Subscript) and \
                _indexed_by_data_shaped(node, step, values):
            yield node, f"indexing by indices whose number depends on the data (`nonzero`, a mask) in " \
                        f"{step.where}: so does the result's shape"
        elif step.kind in {"lazy", "torch"} and isinstance(node, ast.Subscript) and _sliced_by_data(node, step, values):
            yield node, f"a slice bounded by a value read from a tensor (or drawn at random) in {step.where}: " \
                        "a new graph for each new bound"


CONCATENATIONS = {"cat", "concat", "concatenate", "hstack", "vstack", "column_stack"}


def grows_by_concatenation(node: ast.AST, module: Module) -> bool:
    """`tokens = torch.cat([tokens, next_ids], dim=1)` in a loop that binds `tokens` nowhere else: the tensor
    grows each time round (generated tokens, a cache, predictions gathered on the device)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and
            isinstance(node.value, ast.Call) and last_name(node.value.func) in CONCATENATIONS and node.value.args and
            isinstance(node.value.args[0], ast.List | ast.Tuple)):
        return False
    name = node.targets[0].id
    if not any(isinstance(e, ast.Name) and e.id == name for e in node.value.args[0].elts):
        return False
    loop = _innermost_loop(node, module)
    return loop is not None and not any(other is not node and _innermost_loop(other, module) is loop
                                        for other in module.assigns_to(name, module.enclosing_function(node)))


def _innermost_loop(node: ast.AST, module: Module) -> ast.AST | None:
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, ast.For | ast.AsyncFor | ast.While):
            return ancestor
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return None
    return None


def _dynamic_shape_call(call: ast.Call, values: TensorValues) -> bool:
    """`torch.nonzero(m)`, `x.masked_select(m)`, `tf.boolean_mask(...)`: a framework's call whose output shape
    depends on the data (not `jnp.nonzero(x, size=k)`, a fixed shape)."""
    method = isinstance(call.func, ast.Attribute) and values.is_tensor(call.func.value)
    operand = call.func.value if method and isinstance(call.func, ast.Attribute) else \
        (call.args[0] if call.args else None)
    return last_name(call.func) in DYNAMIC_SHAPE_CALLS and (values.framework_call(call) or method) and \
        not any(k.arg == "size" for k in call.keywords) and \
        not (operand is not None and values.on_host(operand))  # `torch.unique(ids.cpu())`: on the host


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


# Calls whose arguments are sizes (`torch.arange(n)`, `x.expand(b, n, d)`, `torch.topk(x, k)`).
SIZED_CALLS = {"arange", "zeros", "ones", "empty", "rand", "randn", "full", "new_zeros", "new_ones", "new_empty",
               "new_full", "expand", "repeat", "topk", "narrow"}


def _sized_by_data(call: ast.Call, method: bool, step: Step, values: TensorValues) -> bool:
    """`torch.arange(0, max_len)` with `max_len = lengths.max()`, `torch.topk(cost, k=ks[i])`, `vec.expand(n,
    -1)` with `n` an element of a tensor: a size read from a tensor, so the shape follows the data."""
    name = last_name(call.func)
    if name not in SIZED_CALLS or not (method or values.framework_call(call)):
        return False
    sizes = list(call.args)
    if name in {"topk", "narrow"} and not method:
        sizes = sizes[1:]  # (`torch.topk(x, k)`: the first is the input)
    if name in {"full", "new_full"}:
        sizes = sizes[:1]  # (the fill value may be a tensor)
    sizes += [k.value for k in call.keywords if k.arg in {"k", "size", "length", "end"}]
    parts = [e for size in sizes for e in (size.elts if isinstance(size, ast.Tuple | ast.List) else [size])]
    return any(_read_from_a_tensor(part, step, values) for part in parts)


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
    if values.evident.is_tensor(bound):
        return True  # `n = lengths.max()`: a tensor, read to the host to size or bound anything
    bound_to = step.module.bound_above(bound)
    return bound_to is not None and isinstance(bound_to.value, ast.Call | ast.Subscript) and \
        _read_from_a_tensor(bound_to.value, step, values)


def _masked(node: ast.AST, values: TensorValues) -> bool:
    """`x[mask]` read or written (`x[mask] = 0`, `weights[target == pad] *= w`): PyTorch turns a boolean index
    into the indices of its True elements (`nonzero`), whose number depends on the data."""
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript):
        return _a_mask_index(node.target.slice, values)
    return isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load | ast.Store) and \
        _a_mask_index(node.slice, values)


def _a_mask_index(index: ast.AST, values: TensorValues) -> bool:
    """`mask`, or a mask on one axis among slices and integer indices (`cost[:, keep]`, `m[rows, keep]`)."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    return any(values.is_bool(part) for part in parts)


STEP_RULES: dict[str, Callable[[Step, TensorValues, list[ast.AST]], Iterator[Hit]]] = {
    "XLA001": tensor_branch, "XLA002": dynamic_shape, "XLA003": host_sync,
}
