"""Which values in a compiled step are device tensors: a small local type inference, `ast` only.

Tensors are the step's traced arguments, what the model, a loss object or a framework op returns, a device
loader's batch, and what is computed from those (attributes, indexing, arithmetic, methods, a call given a
tensor). Python values are everything else: counters, configs, rank and world-size helpers (`xm.get_ordinal`,
`xr.world_size`, `xm.is_master_ordinal`), `len()`, `.shape`, what `.item()`/`.tolist()` return, what a
load returns (`torch.load(path)["iter_num"]`), and a comparison with a string (`sample == "DUMMY"`).

Evidence has two strengths. A call of a function nobody here knows (a helper of the trainer's own, say) given a
tensor is taken to return one (`loss = compute_loss(logits)`), but that is a guess: `info = forward(model,
batch, info)` returns a dict of counters and settings as often as a tensor. `evident` leaves such guesses out;
the rules that would report a Python value as a tensor (a branch, a formatted value) ask it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Container, Iterable, Iterator

from tpuops.check.host_tensors import HostTensors
from tpuops.check.project import dotted, last_name

# PyTorch/XLA's helper modules return Python values (ordinals, devices, rates) but for the collectives.
XLA_HELPER_ROOTS = {"xm", "xla_model", "xr", "runtime", "pl", "xmp", "met", "xu", "xla_env_vars", "torch_xla",
                    "test_utils", "debug_metrics"}
XLA_TENSOR_CALLS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute", "send",
                    "recv", "compile"}
# Framework calls that return Python values (or objects that are not tensors), not tensors.
PYTHON_VALUED = {"device_count", "local_device_count", "process_index", "process_count", "default_backend",
                 "devices", "local_devices", "is_available", "executing_eagerly", "is_tensor", "get_rank",
                 "world_size", "global_ordinal", "xla_device", "get_world_size", "is_grad_enabled", "no_grad",
                 "manual_seed", "save", "device", "Generator", "set_default_dtype", "DataLoader", "key",
                 "PRNGKey", "get_ordinal", "is_master_ordinal", "local_ordinal", "get_local_ordinal", "load",
                 "loads", "shape", "ndim"}  # (np.shape(x), jnp.ndim(x): Python ints)
PYTHON_PREFIXES = ("torch.utils.", "torch.cuda.", "torch.distributed.", "torch.backends.", "torch.optim.",
                   "tf.config.", "tf.distribute.", "tf.data.", "jax.config.", "jax.distributed.", "tf.io.")
PYTHON_ATTRIBUTES = {"shape", "ndim", "dtype", "device", "requires_grad", "is_cuda", "name", "rank", "training",
                     "size_in_bytes", "sharding", "size",  # (`x.size` uncalled: a JAX/NumPy array's element count)
                     "num_processes", "process_index", "local_process_index", "is_main_process",
                     "is_local_main_process"}  # (an Accelerator's: Python ints and bools)
PYTHON_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "get_shape", "__len__", "element_size",
                  "keys", "rate", "global_rate", "format", "get_last_lr", "state_dict", "train", "eval",
                  "zero_grad", "ndimension", "nelement",
                  "startswith", "endswith", "lower", "upper", "isdigit"}  # (the last five: a tensor has none)
PYTHON_BUILTINS = {"len", "int", "float", "bool", "str", "range", "enumerate", "isinstance", "print", "round",
                   "repr", "format", "type", "hasattr", "getattr", "callable", "id", "hash", "open", "super",
                   "iter", "next", "sorted", "reversed", "vars", "dir", "zip"}
DEVICE_MOVES = {"to_device", "send_to_device", "move_to_device"}
# An Accelerator's collectives: given a device tensor, they hand back one (on a TPU, xm.all_gather's).
ACCELERATOR_COLLECTIVES = {"gather", "gather_for_metrics", "reduce", "pad_across_processes"}
# Methods that shape a tensor again and keep its dtype: of a boolean mask, a boolean mask.
WEIGHT_ITERATORS = {"parameters", "named_parameters", "buffers", "named_buffers"}
SHAPE_SUFFIX = re.compile(r"_[A-Z][A-Za-z0-9]{0,5}$")  # `pred_BxC`, `mask_NxC`, `ids_BT`: the tensor's axes
BOOL_CALLS = {"isnan", "isinf", "isfinite", "isposinf", "isneginf", "isin", "isclose", "bool", "not_equal", "equal",
              "greater", "greater_equal", "less", "less_equal", "eq", "ne", "gt", "ge", "lt", "le"}
MASK_KEEPING = {"view", "reshape", "squeeze", "unsqueeze", "expand", "expand_as", "flatten", "contiguous", "permute",
                "transpose", "detach", "repeat"}
TORCH_TENSOR_METHODS = {"detach", "contiguous", "unsqueeze", "masked_fill", "bfloat16", "requires_grad_"}
# Helpers (the trainer's or a library's, e.g. pytorch_toolbelt's `to_numpy`) named for copying a tensor to the
# host: what they return is a host value.
HOST_COPY_HELPERS = {"to_numpy", "to_np", "tonumpy", "as_numpy", "asnumpy", "tensor2numpy", "tensor_to_numpy",
                     "to_cpu", "tensor2np", "detach_to_numpy", "save_image",  # (torchvision's: writes a PNG)
                     # torch_xla's (and the Trainers' built on it): move their data to the CPU (to reduce it across
                     # the cores, or to hand it to a function on some cores)
                     "mesh_reduce", "nested_xla_mesh_reduce", "do_on_ordinals", "_maybe_convert_to_cpu",
                     "_xla_markstep_and_send_to_cpu"}
# `xm = importlib.import_module("torch_xla.core.xla_model")`: a module, not a tensor (nor a model).
MODULE_LOADERS = {"import_module", "__import__", "reload"}
# Predicates named `is_*` answer with a Python bool (`torch.jit.is_scripting()`, `dist.is_initialized()`,
# `t.is_floating_point()`), but for TensorFlow's elementwise ones.
TENSOR_PREDICATES = {"is_nan", "is_inf", "is_finite", "is_non_decreasing", "is_strictly_increasing"}
MODEL_WORDS = ("model", "net", "module", "criterion", "loss_fn", "lossfn", "apply_fn")
TENSOR_CLASSES = {"Tensor", "Variable", "Parameter", "FloatTensor", "LongTensor", "Array"}


class TensorValues:
    """Decides whether an expression in one scope (a function or the module) is a tensor.

    `traced`: names that are tensors from the start (a jitted function's arguments, a step loop's batch);
    `guessed`: parameters a caller passes a value guessed to be a tensor (tensors here, but not to `evident`);
    the scope's `bindings` (assignments, `for` and comprehension targets) are followed to a fixed point.
    """

    def __init__(self, bindings: list[tuple[list[ast.AST], ast.AST]], aliases: set[str],
                 traced: Iterable[str] = (), python_calls: Container[str] = frozenset(),
                 guesses: bool = True, guessed: Iterable[str] = (),
                 tensor_calls: Container[str] = frozenset(), containers: bool = True,
                 bool_calls: Container[str] = frozenset(), static: Container[str] = frozenset(),
                 own_method: Callable[[str], bool | None] = lambda name: None) -> None:
        self.aliases = aliases
        self.own_method = own_method  # `self.name()`: what the enclosing class's own method returns (returns.py)
        self.static = static  # attributes declared static in the project's JAX structures: Python values
        self.tensor_calls = tensor_calls  # the project's functions that return tensors (returns.py)
        self.bool_calls = bool_calls  # and those that return boolean tensors (masks)
        self.guesses = guesses  # an unknown function given a tensor returns one
        self.python_calls = python_calls  # the project's functions that return Python values (pyvalues.py)
        # Names bound to a plain attribute (`dynamic_scale = state.dynamic_scale`): a field of a structure, which
        # may be None or an object; `if field:` tests which, at trace time.
        self.fields = {t[0].id for t, v in bindings if isinstance(v, ast.Attribute) and len(t) == 1
                       and isinstance(t[0], ast.Name)}
        self.names: set[str] = set(traced) | (set(guessed) if guesses else set())
        self.python_names = _python_names(bindings, python_calls)
        self.bool_names: set[str] = set()
        self.objects: set[str] = set()  # models, loss objects, optimizers: called they give tensors, but are none
        single = [(targets[0].id, value) for targets, value in bindings
                  if len(targets) == 1 and isinstance(targets[0], ast.Name)]
        # To a fixed point, whatever the order the bindings come in: `loss = LOSS_FN(x, y)` calls an object when
        # `LOSS_FN = nn.CrossEntropyLoss()` comes after it in that order; `net = model` names one.
        for _ in range(4):
            before, self.objects = self.objects, {name for name, value in single if self._object(value)}
            if self.objects == before:
                break
        self.names -= self.objects
        # Dicts that hold tensors under some keys (`info["grad_norm"] = norm`) and counters under others
        # (`info["batch_idx"]`): key -> which keys hold tensors; a name bound whole to a tensor is dropped here.
        self.keyed: dict[str, set[object]] = {}
        whole: set[str] = set(self.names)
        bindings = sorted((part for binding in bindings for part in _unpacked(binding)),
                          key=lambda binding: getattr(binding[1], "lineno", 0))  # in the order they run
        for _ in range(8):  # to a fixed point: a loop body can use a name assigned further down
            before = len(self.names) + len(self.bool_names) + sum(map(len, self.keyed.values()))
            for targets, value in bindings:
                if self.is_tensor(value) and not (len(targets) == 1 and isinstance(targets[0], ast.Name)
                                                  and targets[0].id in self.objects):
                    names = {name for t in targets for name in _bound_names(t, containers)}
                    self.names |= names
                    whole |= {name for t in targets if not isinstance(t, ast.Subscript)
                              for name in _bound_names(t, containers)}
                    for target in targets:
                        if _keyed_target(target):
                            self.keyed.setdefault(target.value.id, set()).add(target.slice.value)
                    if self.is_bool(value):
                        self.bool_names |= names
            for name in whole & set(self.keyed):
                del self.keyed[name]
            if len(self.names) + len(self.bool_names) + sum(map(len, self.keyed.values())) == before:
                break
        self.evident = TensorValues(bindings, aliases, traced, python_calls, guesses=False, tensor_calls=tensor_calls,
                                    bool_calls=bool_calls, static=static, own_method=own_method) if guesses else self
        self._bindings, self._traced = bindings, set(traced)
        self._host: HostTensors | None = None

    def on_host(self, expr: ast.AST) -> bool:
        """A tensor in host memory (see host_tensors.py): reading it waits for no device."""
        if self._host is None:
            self._host = HostTensors(self._bindings, self.is_tensor, self._traced)
        return self._host.on_host(expr)

    # ------------------------------------------------------------------------------------------ calls

    def _object(self, value: ast.AST) -> bool:
        """An instance of a class (GPT(...), nn.Linear(...), optim.AdamW(...)), a model moved or wrapped
        (`model.to(device)`, `torch.compile(model)`), or another name for one."""
        if isinstance(value, ast.Name):
            return value.id in self.objects or any(w in value.id.lower() for w in MODEL_WORDS)
        if not isinstance(value, ast.Call):
            return False
        if isinstance(value.func, ast.Name) and value.func.id in self.objects:
            return False  # `loss = LOSS_FN(logits, labels)`: calling a loss object, not building one
        name = last_name(value.func)
        if name[:1].isupper() and name not in TENSOR_CLASSES:
            return True
        if _a_getter(name):
            return True  # `self.get_adapter_module(name)`: a getter hands a module back (or None), not its output
        if name in {"from_pretrained", "compile", "prepare_model"}:
            return True
        receiver = value.func.value if isinstance(value.func, ast.Attribute) else None
        return name in {"to", "cuda", "train", "eval", "half", "float", "bfloat16"} and receiver is not None and \
            self._object(receiver)

    def framework_call(self, call: ast.Call) -> bool:
        """A call into a framework module (jnp.sum, torch.where, tf.boolean_mask) that returns a tensor."""
        path = dotted(call.func)
        if not path or path.split(".")[0] not in self.aliases:
            return False
        name = path.rsplit(".", 1)[-1]
        if path.split(".")[0] in XLA_HELPER_ROOTS or ".core.xla_model" in path:
            return name in XLA_TENSOR_CALLS
        return name not in PYTHON_VALUED and not path.startswith(PYTHON_PREFIXES)

    def _call(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name) and func.id == "next" and call.args:
            return self.guesses  # `input_ids, labels = next(train_iter)`: a batch, as a guess
        if isinstance(func, ast.Name) and func.id in PYTHON_BUILTINS:
            return False
        called = last_name(func)
        if called in MODULE_LOADERS | HOST_COPY_HELPERS or \
                (called.startswith("is_") and called not in TENSOR_PREDICATES) or _layout_getter(called):
            return False
        own = self.own_method(func.attr) if isinstance(func, ast.Attribute) and dotted(func.value) == "self" else None
        if own is not None:
            return own
        if isinstance(func, ast.Name | ast.Attribute) and last_name(func) in self.python_calls:
            return False
        if isinstance(func, ast.Name | ast.Attribute) and last_name(func) in self.tensor_calls:
            return True
        path = dotted(func)
        if path and path.split(".")[0] in self.aliases:
            return self.framework_call(call)
        if isinstance(func, ast.Attribute):
            if func.attr in WEIGHT_ITERATORS and not call.args:
                return True  # `for p in model.parameters()`: the model's weights, on its device
            if func.attr in PYTHON_METHODS:
                return False
            if func.attr == "read_value":  # a TensorFlow variable's value (a Keras metric's or layer's weight)
                return True
            if func.attr == "generate" and self._object(func.value):
                return True  # a model's generated token ids
            if func.attr in ACCELERATOR_COLLECTIVES and "accelerator" in dotted(func.value).lower() and call.args:
                return self.is_tensor(call.args[0])  # gathered across the cores, still on the device
            if func.attr in TORCH_TENSOR_METHODS and not (isinstance(func.value, ast.Name) and
                                                          func.value.id in self.python_names):
                return True  # what no Python value or NumPy array has
            if self.is_tensor(func.value) or (func.attr == "to" and not self._object(func.value)):
                return True
            if func.attr in DEVICE_MOVES and call.args:
                return True  # fabric.to_device(batch.codes), send_to_device(batch, device)
        if self._object(func) or self.is_tensor(func) or \
                (any(w in last_name(func).lower() for w in MODEL_WORDS) and not _a_getter(last_name(func))):
            return True  # calling a model or a loss object (`self.get_model()` hands the model back instead)
        if isinstance(func, ast.Attribute) and dotted(func.value) == "self" and func.attr.lower().endswith("loss"):
            return True  # `self.loss(preds, targets)`: the module's loss object
        if self._object(call):
            return False
        if isinstance(func, ast.Call) and self._call(func):
            return True  # jax.value_and_grad(f)(params)
        arguments = [*call.args, *(k.value for k in call.keywords)]
        return self.guesses and any(self.is_tensor(a) for a in arguments)  # a tensor in, a tensor out

    # ------------------------------------------------------------------------------------ expressions

    def is_tensor(self, expr: ast.AST | None) -> bool:  # noqa: C901  one case per expression kind
        if expr is None:
            return False
        if isinstance(expr, ast.Name):
            return expr.id in self.names and expr.id not in self.objects
        if isinstance(expr, ast.Attribute):
            return expr.attr not in PYTHON_ATTRIBUTES and expr.attr not in self.static and self.is_tensor(expr.value)
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, ast.Name) and expr.value.id in self.keyed and \
                    isinstance(expr.slice, ast.Constant):
                return expr.slice.value in self.keyed[expr.value.id]
            return self.is_tensor(expr.value)
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Compare):
            if all(isinstance(op, ast.Is | ast.IsNot | ast.In | ast.NotIn) for op in expr.ops):
                return False
            if any(isinstance(e, ast.Constant) and (isinstance(e.value, str) or e.value is None)
                   for e in [expr.left, *expr.comparators]):
                return False  # `split == "train"`, `g != None`: a tensor never equals a string or None
            return any(self.is_tensor(e) for e in [expr.left, *expr.comparators])
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, ast.Mod) and isinstance(expr.left, ast.Constant | ast.JoinedStr):
                return False  # "%f" % x is a string
            return self.is_tensor(expr.left) or self.is_tensor(expr.right)
        if isinstance(expr, ast.UnaryOp):
            return self.is_tensor(expr.operand)
        if isinstance(expr, ast.BoolOp):
            return any(self.is_tensor(v) for v in expr.values)
        if isinstance(expr, ast.IfExp):
            if _converts_tensors(expr):  # `v.item() if torch.is_tensor(v) else v`
                return self.is_tensor(expr.body)
            return self.is_tensor(expr.body) or self.is_tensor(expr.orelse)
        if isinstance(expr, ast.Tuple | ast.List | ast.Set):
            return any(self.is_tensor(e) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return any(self.is_tensor(v) for v in expr.values)
        if isinstance(expr, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.is_tensor(expr.elt)
        if isinstance(expr, ast.DictComp):
            return self.is_tensor(expr.value)
        if isinstance(expr, ast.Starred | ast.NamedExpr):
            return self.is_tensor(expr.value)
        return False

    def is_bool(self, expr: ast.AST) -> bool:
        """A boolean tensor: a comparison of tensors, logical_*/isnan/..., x.bool(), or a name holding one."""
        if isinstance(expr, ast.Name):  # a tensor named `mask`, `target_mask`: a boolean mask, as masks are
            return expr.id in self.bool_names or (_a_mask_name(expr.id) and self.is_tensor(expr))
        if isinstance(expr, ast.Compare):
            return self.is_tensor(expr)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Invert | ast.Not):
            return self.is_bool(expr.operand)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitAnd | ast.BitOr | ast.BitXor):
            return self.is_bool(expr.left) or self.is_bool(expr.right)
        if isinstance(expr, ast.Subscript):
            return self.is_bool(expr.value)  # `mask[:n, :, 2:]`: part of a mask
        if isinstance(expr, ast.Call):
            name = last_name(expr.func)
            if name in self.bool_calls:
                return True  # a mask one of the trainer's functions makes
            if isinstance(expr.func, ast.Attribute) and name in MASK_KEEPING:
                return self.is_bool(expr.func.value)  # `mask.unsqueeze(-1)`: the same mask, shaped again
            # `hits.any(dim=1)`: a mask over the other axes (with no axis, one boolean: a test, not a mask)
            reduced = name in {"any", "all"} and (bool(expr.args) or any(k.arg in {"dim", "axis"}
                                                                           for k in expr.keywords))
            return (name.startswith("logical_") or name in BOOL_CALLS or reduced) and self.is_tensor(expr)
        return False


def _unpacked(binding: tuple[list[ast.AST], ast.AST]) -> Iterator[tuple[list[ast.AST], ast.AST]]:
    """`for key, value in metrics.items()`: the keys are names (strings), only the values may be tensors; `for i,
    row in enumerate(ids)`: the index is a Python int, the row a tensor when `ids` is one; `for x, y in zip(xs,
    ys)`: each name gets what its own sequence holds."""
    targets, value = binding
    pair = targets[0].elts if len(targets) == 1 and isinstance(targets[0], ast.Tuple) else []
    call = value if isinstance(value, ast.Call) and not value.keywords else None
    if call is not None and len(pair) == 2 and isinstance(call.func, ast.Attribute) and call.func.attr == "items" \
            and not call.args:
        yield [pair[1]], call.func.value
    elif call is not None and len(pair) == 2 and isinstance(call.func, ast.Attribute) and \
            call.func.attr in WEIGHT_ITERATORS and call.func.attr.startswith("named_"):
        yield [pair[1]], call  # `for name, p in model.named_parameters()`: the name is a string
    elif call is not None and len(pair) == 2 and isinstance(call.func, ast.Name) and call.func.id == "enumerate" \
            and len(call.args) == 1:
        yield [pair[1]], call.args[0]
    elif call is not None and pair and isinstance(call.func, ast.Name) and call.func.id == "zip" and \
            len(call.args) == len(pair):
        for target, sequence in zip(pair, call.args, strict=True):
            yield [target], sequence
    else:
        yield binding


def _converts_tensors(expr: ast.IfExp) -> bool:
    """`x.item() if torch.is_tensor(x) else x`, `... if isinstance(x, torch.Tensor) else x`: the `else` is taken
    only by what is no tensor."""
    subject = tensor_test_subject(expr.test)
    return subject is not None and isinstance(expr.orelse, ast.Name) and expr.orelse.id == subject


def tensor_test_subject(test: ast.AST) -> str | None:
    """The name `torch.is_tensor(x)` or `isinstance(x, torch.Tensor)` tests, or None for another test."""
    if not (isinstance(test, ast.Call) and test.args and isinstance(test.args[0], ast.Name)):
        return None
    tested = last_name(test.func) == "is_tensor" or (
        last_name(test.func) == "isinstance" and len(test.args) == 2 and last_name(test.args[1]) == "Tensor")
    return test.args[0].id if tested else None


def _a_mask_name(name: str) -> bool:
    """`mask`, `target_masks`, `active_mask_Bx` (a shape suffix: batch by ...), and a replay batch's `dones`
    (`values[dones] = 0.0` in a DQN loss): the names boolean tensors go by."""
    name = SHAPE_SUFFIX.sub("", name).lower()
    return name.endswith(("mask", "masks")) or name in {"done", "dones", "terminal", "terminals"}


def _a_getter(name: str) -> bool:
    """`get_model`, `get_adapter_module`: a function handing back a model or a module, not its output."""
    return name.startswith("get_") and name.endswith(MODEL_WORDS)


def returns_host_values(value: ast.AST, python_calls: Container[str]) -> bool:
    """A call handing back values on the host: `.item()`/`.tolist()`, a helper that copies (`xm.mesh_reduce`,
    `to_numpy`), or a function of the project returning Python values (`step_and_reduce(...)`, `gather(preds)`
    returning `xm.mesh_reduce` results)."""
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name | ast.Attribute) and (
        last_name(value.func) in python_calls or last_name(value.func) in {"item", "tolist"} | HOST_COPY_HELPERS)


def _python_names(bindings: list[tuple[list[ast.AST], ast.AST]], python_calls: Container[str]) -> set[str]:
    """Names every binding of which is what `returns_host_values` says hands back host values."""
    verdicts: dict[str, bool] = {}
    for targets, value in bindings:
        python = returns_host_values(value, python_calls)
        for name in (n for t in targets for n in _bound_names(t, containers=False)):
            verdicts[name] = verdicts.get(name, True) and python
    return {name for name, python in verdicts.items() if python}


def _bound_names(target: ast.AST, containers: bool = True) -> Iterator[str]:
    """The names an assignment to `target` makes hold its value: `x`, `a, *b`, and (with `containers`) `d` for
    `d["loss"] = ...`, a container of tensors; not `self` for `self.last = ...` (an attribute makes no object a
    tensor)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _bound_names(element, containers)
    elif isinstance(target, ast.Starred) or (containers and isinstance(target, ast.Subscript)):
        yield from _bound_names(target.value, containers)


def _keyed_target(target: ast.AST) -> bool:
    """`info["loss"] = ...`: a constant key of a named dict."""
    return isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and \
        isinstance(target.slice, ast.Constant)


def _layout_getter(name: str) -> bool:
    """`get_context_model_parallel_size()`, `get_data_parallel_rank()`: a process group's size or rank, a
    Python int set at start-up (a model word in the name does not make it a model's call)."""
    return name.startswith("get_") and name.endswith(("_size", "_rank", "_count"))
