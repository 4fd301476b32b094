"""What a step runs each time (its region), and which PyTorch/XLA loops run the model each iteration."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tpuops.check.project import FunctionNode, Module, dotted, last_name, params_of
from tpuops.check.settings import attribute_read
from tpuops.check.wrappers import host_callback_target

if TYPE_CHECKING:
    from tpuops.check.settings import Settings
    from tpuops.check.steps import Step


# `% accumulation_steps`, `% args.accu_steps`, `% grad_acc`, `% update_freq`: every optimizer step, not a schedule
ACCUMULATION = re.compile(r"accum|(^|[._])accu(_|$)|grad_?acc|update_freq")


def region_nodes(step: Step, settings: Settings | None = None) -> Iterator[ast.AST]:
    """The nodes a step runs each time. A PyTorch/XLA lazy step leaves out nested functions (closures, e.g.
    for `xm.add_step_closure`), what runs only every N steps (`if step % N == 0:`, also through a name:
    `should_log = step % 100 == 0`), once (`if step == 0:`, `if preds is None: preds = ...`, a body that ends
    the loop with `break` or `return`) and when training went wrong (`if not math.isfinite(loss):`). Every step
    leaves out the branch a TPU does not take (`if use_xla: ... else: <CUDA code>`, `if not is_xla:`, `if
    torch.cuda.is_available(): ...`) and a switch that is off unless the user turns it on (`if args.debug:` with
    `--debug` store_true, `if config["check_nan"]:` False), as the trainer's command leaves it."""
    if step.node is None or isinstance(step.node, ast.Call):
        return
    module, lazy = step.module, step.kind == "lazy"
    stack: list[ast.AST] = list(reversed(step.node.body)) if lazy else [step.node]
    on_host = _host_callback_targets(step.node)
    while stack:
        node = stack.pop()
        if lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in on_host:
            continue  # `jax.debug.callback(log_metrics, metrics)`: log_metrics runs on the host, on copied values
        yield node
        if isinstance(node, ast.If):
            test = _named_test(node.test, module)
            if lazy and _all_finite(test):  # (before `_once`, which takes `== 0` for the first step)
                stack.extend(reversed(node.body))
                stack.append(node.test)
                continue
            if (lazy and _not_every_step(node, test, step.node, module)) or _tpu_skips(test) or \
                    (settings is not None and module is not None and switched_off(node.test, module, settings)):
                stack.extend(reversed(node.orelse))
                stack.append(node.test)
                continue
            if _tpu_test(test):
                stack.extend(reversed(node.body))
                stack.append(node.test)
                continue
        if lazy and isinstance(node, ast.Call) and last_name(node.func) == "add_step_closure":
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _host_callback_targets(step: ast.AST) -> set[str]:
    """The functions a step hands to a host callback: the callback is the step's read; their body is host code."""
    targets = (host_callback_target(n) for n in ast.walk(step) if isinstance(n, ast.Call))
    return {last_name(t) for t in targets if t is not None}


def _not_every_step(branch: ast.If, test: ast.AST, step: ast.AST, module: Module | None) -> bool:
    """A body a PyTorch/XLA step runs on some steps only: every N, once, or when training went wrong."""
    return _every_n_steps(test, module) or _once(test) or _first_time(branch) or _leaves(branch, step) or \
        _on_a_bad_value(test)


def switched_off(test: ast.AST, module: Module, settings: Settings) -> bool:
    """`if args.debug:`, `if FLAGS.log_grads and ...:`, `if config["check_nan"]:`: a setting whose every value
    is off (False, None, 0, "") by default or as the command passes it. Not a function's parameter: its caller
    may pass it on."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(_a_setting(part, module) and _all_off(settings.values(part, module)) or
               _set_but_unset(part, module, settings) for part in parts)


def _set_but_unset(test: ast.AST, module: Module, settings: Settings) -> bool:
    """`if args.private_output is not None:` with the option left out (None by default, not passed); also through
    a name every assignment of which reads such a setting (`out_dir = args.private_output`). Not a name that may
    hold an object (`dpo = None`, then `dpo = DPO(...)` in a branch): what it holds is not a setting's value."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) and
            isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return False
    subject = test.left
    if isinstance(subject, ast.Name):
        assigned = module.assigns_to(subject.id, module.enclosing_function(subject))
        if not assigned or not all(isinstance(a.value, ast.Attribute | ast.Subscript) for a in assigned):
            return False
    return _a_setting(subject, module) and settings.values(subject, module) == frozenset([None])


def _a_setting(expr: ast.AST, module: Module) -> bool:
    if isinstance(expr, ast.Attribute | ast.Subscript) or attribute_read(expr) is not None:
        return True
    function = module.enclosing_function(expr)
    return isinstance(expr, ast.Name) and (function is None or expr.id not in params_of(function))


def _all_off(values: frozenset[object]) -> bool:
    return bool(values) and not any(values)


def _named_test(test: ast.AST, module: Module | None) -> ast.AST:
    """`if should_log_step:` reads as the expression the name was last bound to before it."""
    if not isinstance(test, ast.Name) or module is None:
        return test
    bound = module.bound_above(test)
    return bound.value if bound is not None else test


def _every_n_steps(test: ast.AST, module: Module | None = None) -> bool:
    """`step % log_every == 0`, `not step % log_every`, `len(pending_logs) >= log_interval`; not `(i + 1) %
    accumulation_steps == 0`, which is every optimizer step, nor `if step % 100:` (or `!= 0`), which is true on
    all the other steps, nor `step % LOG_EVERY == 0` with the module's `LOG_EVERY = 1`."""
    inverted = set(map(id, _truth_of_remainders(test)))
    return any(_schedule_mod(n) and id(n) not in inverted and not _by_one(n, module) for n in ast.walk(test)) or \
        any(_remainder_compared(n, module) for n in ast.walk(test)) or \
        any(isinstance(n, ast.Compare) and isinstance(n.left, ast.Call) and last_name(n.left.func) == "len" and
            isinstance(n.ops[0], ast.GtE | ast.Gt) for n in ast.walk(test))


def _remainder_compared(node: ast.AST, module: Module | None) -> bool:
    """`report == R - 1` with `report = step % R` above: a remainder named, then compared (every R steps)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq) and
            isinstance(node.left, ast.Name) and module is not None):
        return False
    bound = module.bound_above(node.left)
    return bound is not None and _schedule_mod(bound.value) and not _by_one(bound.value, module)


def _truth_of_remainders(test: ast.AST) -> Iterator[ast.AST]:
    """Remainders the test takes as true when non-zero (`if step % 100:`, `... and i % n != 0`)."""
    if isinstance(test, ast.BinOp):
        yield test
    elif isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _truth_of_remainders(value)
    elif isinstance(test, ast.Compare) and all(isinstance(op, ast.NotEq) for op in test.ops):
        yield from (e for e in (test.left, *test.comparators) if isinstance(e, ast.BinOp))


def _schedule_mod(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and not isinstance(node.left, ast.Constant) \
        and not ACCUMULATION.search(dotted(node.right).lower())


def _by_one(remainder: ast.BinOp, module: Module | None) -> bool:
    """`x % 1` or `x % N` where the module sets `N = 1` once at its top level: true on every step."""
    divisor = remainder.right
    if isinstance(divisor, ast.Constant):
        return divisor.value == 1
    if not isinstance(divisor, ast.Name) or module is None:
        return False
    bound = module.assigns_to(divisor.id, None)
    return len(bound) == 1 and isinstance(bound[0].value, ast.Constant) and bound[0].value.value == 1


def _leaves(branch: ast.If, step: ast.AST) -> bool:
    """`if step >= total_steps: ...; break` (or `return` in a step loop): a body that ends the loop runs once.
    (In a step function, a `return` in a branch is how each step ends.)"""
    ends = (ast.Break, ast.Return) if isinstance(step, ast.For | ast.AsyncFor | ast.While) else ast.Break
    return bool(branch.body) and isinstance(branch.body[-1], ends)


NON_FINITE_CHECKS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf"}


def _on_a_bad_value(test: ast.AST) -> bool:
    """`if not math.isfinite(loss_value):`, `if torch.isnan(loss).any():`: the test reads every step (and is
    reported), the body (the message, the skip) runs only when training has gone wrong."""
    return any(isinstance(n, ast.Call) and last_name(n.func) in NON_FINITE_CHECKS for n in ast.walk(test))


def _all_finite(test: ast.AST) -> bool:
    """`if grad_norm < skip and nll_nan == 0:` (NaN counts found none): the body is the usual step, the `else`
    (skip the update, log why) runs only when training has gone wrong."""
    return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Eq) and
               isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value == 0 and
               any(word in last_name(n.left).lower() for word in ("nan", "inf")) for n in ast.walk(test))


def _first_time(branch: ast.If) -> bool:
    """`if preds is None: preds = ...`: the body fills the name once; the else branch runs every time."""
    test = branch.test
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and len(test.ops) == 1 and
            isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant) and
            test.comparators[0].value is None):
        return False
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == test.left.id
                                                  for t in n.targets) for n in branch.body)


def _words(test: ast.AST) -> list[str]:
    words = [dotted(n).lower() for n in ast.walk(test) if isinstance(n, ast.Name | ast.Attribute)]
    return words + [n.value.lower() for n in ast.walk(test) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _gpu_word(word: str) -> bool:
    return "cuda" in word or word == "gpu"


def _tpu_word(word: str) -> bool:
    return "tpu" in word or "xla" in word


def mentions_gpu(test: ast.AST) -> bool:
    """A name or string of the test names CUDA or the GPU (`torch.cuda.is_available()`, `device == "gpu"`)."""
    return any(_gpu_word(w) for w in _words(test))


def mentions_tpu(test: ast.AST) -> bool:
    """A name or string of the test names the TPU or XLA (`use_tpu`, `xm.xla_device()`, `device == "xla"`)."""
    return any(_tpu_word(w) for w in _words(test))


def _gpu_test(test: ast.AST) -> bool:
    """`if torch.cuda.is_available():`, `if device == "cuda":`: a branch a TPU never takes."""
    return not isinstance(test, ast.UnaryOp) and mentions_gpu(test)


def _tpu_test(test: ast.AST) -> bool:
    """`if self.use_xla:`, `if args.tpu:`, `if device == "xla":`: the TPU takes the body, never the else."""
    return not isinstance(test, ast.UnaryOp | ast.BoolOp) and not _denies(test) and \
        any(_tpu_word(w.split(".")[-1]) for w in _words(test))


def _denies(test: ast.AST) -> bool:
    """`args.tpu != True`, `accelerator != "tpu"`, `use_xla == False`: a comparison that holds when it is not
    the TPU (a `!=` with anything but an off value, or an `==` with one)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    other = test.comparators[0]
    off = isinstance(other, ast.Constant) and other.value in (False, None, 0)
    if isinstance(test.ops[0], ast.NotEq | ast.IsNot | ast.NotIn):
        return not off
    return isinstance(test.ops[0], ast.Eq | ast.Is) and off


def _tpu_skips(test: ast.AST) -> bool:
    """A body the TPU never runs: a GPU test, `if not is_xla:`, or an `and` one of whose parts is either
    (`if not config.USE_TPU and config.MIXED_PRECISION:`)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tpu_skips(part) for part in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _tpu_test(test.operand)
    return _gpu_test(test) or _cpu_device_test(test) or (_denies(test) and mentions_tpu(test))


def _cpu_device_test(test: ast.AST) -> bool:
    """`if device.type == "cpu":` (`logits.device.type`): an XLA device's type is "xla", never "cpu"."""
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq) and \
        isinstance(test.left, ast.Attribute) and test.left.attr == "type" and \
        last_name(test.left.value).endswith("device") and \
        isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "cpu"


COUNTER_WORDS = ("step", "iter", "epoch", "batch", "idx", "count", "update")
FIRST_STEPS = 10  # `if step < 10:` traces the start; `if step < 1000:` is every step for a long while
COUNTER_LETTERS = {"i", "j", "k", "t", "b", "n", "e", "it"}


def _once(test: ast.AST) -> bool:
    """`if batch_idx == 1:` / `if cfg.DEBUG and step == 0:`: a counter compared with a number runs the body on
    one step only (not a setting: `if num_classes == 1:`, `if rank == 0:` hold on every step); `if k <= 5:` on
    the first few (a start-up trace)."""
    return any(isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.left, ast.Name | ast.Attribute) and
               _counter(n.left) and isinstance(n.comparators[0], ast.Constant) and
               type(n.comparators[0].value) is int and _a_few(n.ops[0], n.comparators[0].value)
               for n in ast.walk(test)) and \
        not any(isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) for n in ast.walk(test))


def _a_few(op: ast.cmpop, bound: int) -> bool:
    return isinstance(op, ast.Eq) or (isinstance(op, ast.Lt | ast.LtE) and bound <= FIRST_STEPS)


def _counter(expr: ast.AST) -> bool:
    name = last_name(expr).lower()
    return name in COUNTER_LETTERS or any(word in name for word in COUNTER_WORDS)


def loop_batch(loop: ast.AST, module: Module | None = None) -> frozenset[str]:
    """A step loop's targets are the batch (tensors), but for an enumerate index (also through a name:
    `iterator = enumerate(loader)`), a range counter, or the items of a literal list (`for split in ["train",
    "val"]`)."""
    if not isinstance(loop, ast.For | ast.AsyncFor):
        return frozenset()
    target, iterable = loop.target, loop.iter
    if isinstance(iterable, ast.Name) and module is not None:
        iterable = _bound_call(iterable.id, loop, module) or iterable
    # `pbar = tqdm(range(n)) if rank == 0 else range(n)`: a counter either way
    branches = [iterable.body, iterable.orelse] if isinstance(iterable, ast.IfExp) else [iterable]
    if all(_python_items(branch) for branch in branches):
        return frozenset()
    iterable = _unwrapped(iterable)
    if isinstance(iterable, ast.Call) and last_name(iterable.func) == "enumerate" and \
            isinstance(target, ast.Tuple) and target.elts:
        target = ast.Tuple(elts=target.elts[1:], ctx=ast.Store())
    return frozenset(n.id for n in ast.walk(target) if isinstance(n, ast.Name))


def _unwrapped(iterable: ast.AST) -> ast.AST:
    while isinstance(iterable, ast.NamedExpr) or (
            isinstance(iterable, ast.Call) and last_name(iterable.func) in {"tqdm", "iter", "reversed"} and
            iterable.args):
        # `(pbar := tqdm(enumerate(loader)))`: a progress bar over the same items, kept under a name
        iterable = iterable.value if isinstance(iterable, ast.NamedExpr) else iterable.args[0]
    return iterable


def _python_items(iterable: ast.AST) -> bool:
    """A range (also in a progress bar) or a literal list: Python values, not a batch."""
    iterable = _unwrapped(iterable)
    return (isinstance(iterable, ast.Call) and last_name(iterable.func) in {"range", "trange"}) or \
        isinstance(iterable, ast.List | ast.Tuple | ast.Set)


def _bound_call(name: str, loop: ast.AST, module: Module) -> ast.Call | ast.IfExp | None:
    """The call (or the choice of two) the loop's scope last binds `name` to before the loop, if any."""
    scope = module.scope_of(loop)
    found = None
    for node in module.assigns_to(name, scope if isinstance(scope, FunctionNode) else None):
        if node.lineno < loop.lineno and isinstance(node.value, ast.Call | ast.IfExp):
            found = node.value
    return found


def each_pass(body: list[ast.stmt], sometimes: Callable[[ast.AST], bool] | None = None) -> Iterator[ast.AST]:
    """The nodes a body runs itself each time it runs, in source order: not those of a loop or a function inside
    it (they run on their own schedule), nor an `if` branch whose test `sometimes` says holds only on some
    passes (its `else` does run)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.For | ast.AsyncFor | ast.While | ast.FunctionDef | ast.AsyncFunctionDef |
                      ast.Lambda | ast.ClassDef):
            continue
        yield node
        if sometimes is not None and isinstance(node, ast.If) and sometimes(node.test):
            stack.extend(reversed(node.orelse))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
