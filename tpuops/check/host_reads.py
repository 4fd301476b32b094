"""XLA003 in a compiled step: what reads a device value to the host, so the host waits for the device (and, in a
PyTorch/XLA step, the graph is cut there): `.item()`, `.cpu()`, `float(t)`, a tensor formatted or printed, a
tokenizer's `decode` of device ids, a device tensor stored into a NumPy array's element. A value already in host
memory (made there, or copied there above) is read for free.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tpuops.check.host_tensors import HOST_COPIES, made_on_host, moves_to_the_host
from tpuops.check.project import Module, dotted, last_name
from tpuops.check.steps import Hit, Step
from tpuops.check.tensors import HOST_COPY_HELPERS, TensorValues, returns_host_values, tensor_test_subject
from tpuops.check.wrappers import host_callback
from tpuops.check.wrappers import keyword as _keyword

NUMPY_ARRAYS = {"zeros", "ones", "empty", "full", "array", "asarray", "zeros_like", "ones_like", "empty_like"}
# Calls that turn their arguments into text (or a logged number): a tensor given to them is read from the device.
REPORTING_CALLS = {"print", "master_print", "info", "debug", "warning", "error", "log", "write", "set_postfix",
                   "set_description", "add_scalar", "add_scalars", "log_metrics", "log_dict",
                   "add_batch"}  # (a Hugging Face `evaluate` metric's: it turns the tensors into host lists)
MATH_ROOTS = {"math", "np", "numpy", "jnp", "torch", "tf"}
TOKEN_DECODERS = {"decode", "batch_decode"}  # a tokenizer's: it turns the ids into a Python list first


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
            yield node, f"a tensor formatted into an f-string in {step.where} reads its value {every}"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_text(node.left) and \
                _on_the_device(node.right, step, values):
            yield node, f"a tensor formatted with `%` in {step.where} reads its value {every}"
        elif isinstance(node, ast.Assign | ast.AugAssign) and _stored_in_host_memory(node, step, values):
            yield node, f"a device tensor stored into a host array in {step.where} copies it to the host {every}"


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
    return values.is_tensor(value) and not values.on_host(value) and not _copied_before(value, step, values)


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
    return isinstance(value, ast.Call) and made_on_host(value)


def _on_the_device(expr: ast.AST, step: Step, values: TensorValues) -> bool:
    """Evidently a tensor (formatting a value only guessed to be one, a path or a counter, would be a false alarm),
    and not one in host memory: made there, or copied there above (`loss = loss.item()` ... `print(loss)`)."""
    return values.evident.is_tensor(expr) and not values.on_host(expr) and \
        not _copied_before(expr, step, values) and not _python_in_this_branch(expr, step)


def _host_sync_call(node: ast.Call, step: Step, values: TensorValues, every: str) -> Iterator[Hit]:
    func = node.func
    arguments = [*node.args, *(k.value for k in node.keywords)]
    copy = _copy_to_host(node, step)
    if copy and isinstance(func, ast.Attribute) and (step.kind != "lazy" or values.is_tensor(func.value)) and \
            not values.on_host(func.value) and not _copied_before(func.value, step, values):
        yield node, f"{copy} in {step.where} copies the value to the host {every}"
    elif step.kind == "jax" and host_callback(node):
        yield node, f"`{dotted(func)}` in {step.where} calls back to the host {every}"
    elif isinstance(func, ast.Name) and func.id in {"float", "int", "bool"} and node.args and \
            _on_the_device(node.args[0], step, values):
        yield node, f"`{func.id}()` of a tensor in {step.where} waits for the device {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in HOST_COPY_HELPERS and \
            last_name(func) not in step.module.defs and \
            any(values.is_tensor(a) and not values.on_host(a) for a in arguments):
        # (a library's helper: one of this module's own is read as part of the step, its `.numpy()` found there)
        yield node, f"`{last_name(func)}` of a tensor in {step.where} copies it to the host {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in TOKEN_DECODERS and _a_tokenizer(func) and \
            node.args and _on_the_device(node.args[0], step, values):
        yield node, f"`{last_name(func)}` of a device tensor in {step.where} reads its token ids {every}"
    elif isinstance(func, ast.Name) and func.id in {"format", "str", "repr"} and node.args and \
            _on_the_device(node.args[0], step, values):
        yield node, f"`{func.id}()` of a tensor in {step.where} reads its value {every}"
    elif isinstance(func, ast.Attribute) and func.attr == "format" and _is_text(func.value) and \
            any(_on_the_device(a, step, values) for a in arguments):
        yield node, f"a tensor formatted with `.format()` in {step.where} reads its value {every}"
    elif step.kind in {"lazy", "torch"} and last_name(func) in REPORTING_CALLS and not _math_log(func, values) and \
            not _kept_by_lightning(node, step) and any(_reported(a, node, step, values) for a in arguments):
        # (a traced JAX/TF function prints a placeholder once, while it is traced: no cost per step)
        yield node, f"`{last_name(func)}` of a tensor in {step.where} reads the tensor {every}"


def _copy_to_host(call: ast.Call, step: Step) -> str:
    """How the call copies its receiver to the host (`` `.item()` ``, `` `.cpu()` ``, PyTorch's `` `.to("cpu")` ``),
    or ""."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return ""
    if func.attr in HOST_COPIES and not call.args:
        return f"`.{func.attr}()`"
    return '`.to("cpu")`' if step.kind in {"lazy", "torch"} and moves_to_the_host(call) else ""


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


def formats_a_value(node: ast.AST) -> bool:
    """A read the rule reports for turning a value into text (an f-string, `%`, `.format()`, `str()`), not for
    an explicit copy (`.item()`, `.cpu()`): the value is taken for a tensor by how the code uses it."""
    if isinstance(node, ast.Call):
        func = node.func
        return (isinstance(func, ast.Name) and func.id in {"format", "str", "repr"}) or \
            (isinstance(func, ast.Attribute) and func.attr == "format" and _is_text(func.value))
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod))


def _formatted(expr: ast.AST) -> bool:
    """An f-string or `"..." % x`: the formatting is the read (reported by itself), not the call given its text."""
    return isinstance(expr, ast.JoinedStr | ast.BinOp)


def _kept_by_lightning(call: ast.Call, step: Step) -> bool:
    """`self.log("loss", loss)`, `result.log_dict(logs)` in a LightningModule: Lightning keeps the tensor on the
    device and reads it when it writes its logger (every `log_every_n_steps`, or at the epoch's end); not so with
    `sync_dist=True` (a reduction across the cores through the host, every call) or `on_step=True` in an
    evaluation step (written after every batch). In an evaluation step `self.log`'s `on_step` is off unless
    given: what it logs, synced or not, is reduced once, at the epoch's end (Lightning 1.4 on; an `EvalResult`
    of Lightning 0.9 and 1.0 syncs where it is logged)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in {"log", "log_dict"}):
        return False
    receiver = dotted(func.value)
    own = receiver == "self" and step.module is not None and func.attr in step.module.defs
    if own or not (receiver == "self" or receiver.endswith("result")):
        return False
    evaluating = any(word in step.name for word in ("val", "test", "eval"))
    per_step = _true_keyword(call, "on_step") if evaluating and receiver == "self" else \
        not _false_keyword(call, "on_step")
    if not per_step:
        return True  # accumulated on the device, reduced (and synced) once, at the epoch's end
    return not (_true_keyword(call, "sync_dist") or (evaluating and _true_keyword(call, "on_step")))


def _true_keyword(call: ast.Call, name: str) -> bool:
    value = _keyword(call, name)
    return isinstance(value, ast.Constant) and value.value is True


def _false_keyword(call: ast.Call, name: str) -> bool:
    value = _keyword(call, name)
    return isinstance(value, ast.Constant) and value.value is False


def _copied_before(expr: ast.AST, step: Step, values: TensorValues, depth: int = 0) -> bool:
    """`lens = mask.sum(1).cpu()` ... `lens[i].item()`, `logits = logits.cpu().numpy()` ... `logits.argmax()
    .tolist()`, `acc = correct / total` with both read by `.item()` above, `preds = gather(preds)` with `gather`
    returning `xm.mesh_reduce(...)`: the name was last bound, above this line, to a copy on the host (or arithmetic
    of such copies); reading it again waits for no device (the copy is reported where it is made)."""
    while isinstance(expr, ast.Subscript | ast.Call | ast.Attribute):
        expr = expr.value if not isinstance(expr, ast.Call) else expr.func
    if not isinstance(expr, ast.Name) or step.module is None or depth > 4:
        return False
    bound = step.module.bound_above(expr)
    return bound is not None and _arithmetic_of_copies(bound.value, step, values, depth)


def _arithmetic_of_copies(value: ast.AST, step: Step, values: TensorValues, depth: int) -> bool:
    if isinstance(value, ast.BinOp):
        return all(isinstance(part, ast.Constant) or _arithmetic_of_copies(part, step, values, depth)
                   for part in (value.left, value.right))
    if isinstance(value, ast.Name):
        return _copied_before(value, step, values, depth + 1)
    return _a_host_copy(value, values)


def _a_host_copy(value: ast.AST, values: TensorValues) -> bool:
    """`x.detach().cpu()`, `x.cpu().numpy()`, `x.tolist()`: a call chain that copies to the host; what a helper
    that copies (`xm.mesh_reduce(...)`, `to_numpy(x)`) or a project function returning such copies returns; or a
    dict or list of such copies (`info = {k: v.mean().item() for k, v in info.items()}`)."""
    if isinstance(value, ast.DictComp):
        return _a_host_copy(value.value, values)
    if isinstance(value, ast.ListComp):
        return _a_host_copy(value.elt, values)
    if isinstance(value, ast.Dict | ast.List | ast.Tuple):
        parts = value.values if isinstance(value, ast.Dict) else value.elts
        return bool(parts) and all(_a_host_copy(p, values) or isinstance(p, ast.Constant) for p in parts)
    if returns_host_values(value, values.python_calls):
        return True
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr in HOST_COPIES or moves_to_the_host(value):
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
        if isinstance(parent, ast.If):
            negated = isinstance(parent.test, ast.UnaryOp) and isinstance(parent.test.op, ast.Not)
            if tensor_test_subject(parent.test.operand if negated else parent.test) == expr.id and \
                    node not in (parent.orelse if negated else parent.body):
                return True
        node = parent
    return False


def _math_log(func: ast.AST, values: TensorValues) -> bool:
    """`jnp.log(x)`, `np.log(x)`, `tf.print`/`jax.debug.print`: arithmetic or the framework's own in-graph
    print, not a host read."""
    root = dotted(func).split(".")[0]
    return root in {"tf", "jax"} or (last_name(func) == "log" and (root in values.aliases or root in MATH_ROOTS))


def _is_text(expr: ast.AST) -> bool:
    return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))
