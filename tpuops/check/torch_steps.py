"""PyTorch/XLA's lazy steps: the code between two step ends (a loop each of whose iterations ends a step, or a
function that ends one), the loops that only run the model (evaluation), and the model's own forward, which a step
traces into its graph."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tpuops.check.class_steps import hf_trainer_class
from tpuops.check.model_calls import runs_model
from tpuops.check.project import (
    TORCH_XLA_ROOTS,
    FunctionNode,
    Module,
    dotted,
    last_name,
    params_of,
    positional_params,
)
from tpuops.check.pyvalues import flag_params, none_default_params, scalar_params
from tpuops.check.regions import loop_batch
from tpuops.check.steps import Step
from tpuops.check.wrappers import compiler

if TYPE_CHECKING:
    from tpuops.check.project import Project

XLA_STEP_ENDS = {"mark_step", "sync", "optimizer_step"}
DEVICE_LOADERS = {"MpDeviceLoader", "per_device_loader", "ParallelLoader"}
RUNS_MODEL = "each iteration runs the model on the XLA device (a loop with no step end, e.g. evaluation)"
RUNS_BACKWARD = "each iteration runs the model and its backward pass on the XLA device (a training step's micro-steps)"


class TorchXlaSteps:
    """The PyTorch/XLA half of the step finder (mixed into `StepFinder`, whose fields it uses)."""

    project: Project
    _enders: set[int]  # functions that end a PyTorch/XLA step each time they run
    _ending_loops: dict[int, str]  # loops whose every iteration ends one -> how
    _drivers: dict[int, bool]  # function -> it runs step loops (cached)
    _owned: dict[int, tuple[list[ast.AST], list[ast.Call]]]  # loops, calls
    _forwards_queued: set[bool]  # the `sure` of the steps that queued the model's forwards (see _model_forwards)
    _on_xla: set[int] | None  # modules that run on the XLA device (decided once)
    _data_parallel_runs: set[int] | None  # the loop functions torch_xla's old DataParallel runs (decided once)

    def ends_step(self, function: FunctionNode, module: Module) -> bool:
        """The function ends a PyTorch/XLA step each time it runs (a boundary outside any loop of its own)."""
        return id(function) in self._enders

    def _a_batch_step(self, step: Step, callee: FunctionNode, module: Module) -> bool:
        """A function called for each batch of a device loader that ends a step and also runs step loops of its
        own (a GAN's `train(x, y)`: a loop of discriminator steps, then the generator's): what it does outside
        those loops runs every step, unlike an epoch's `train` that runs them over a loader."""
        loop = step.node
        return isinstance(loop, ast.For | ast.AsyncFor) and step.module is not None and \
            self._device_loader(loop.iter, loop, step.module) and self.ends_step(callee, module) and \
            self._drives_steps(callee, module)

    def _find_step_ends(self) -> None:
        """From the calls up: a boundary call (xm.mark_step() & co) ends a step for the loop right around it, or,
        outside any loop, for its function; a call to such a function does the same, to a fixed point."""
        ender_names: set[str] = set()
        for module in self.project.modules:
            for defs in module.defs.values():
                for function in defs:
                    if any(compiler(d, module) == "torch" for d in function.decorator_list):
                        self._enders.add(id(function))
                        ender_names.add(function.name)
        for _ in range(4):  # a step ended three calls deep is found; deeper is rare
            before = len(self._enders)
            self._drivers.clear()
            for module in self.project.modules:
                for call in module.calls:
                    name = last_name(call.func)
                    alias = _step_end_alias(call, module)
                    if name in XLA_STEP_ENDS and _is_xla(dotted(call.func)):
                        self._ends_at(call, module, f"{dotted(call.func)}()", ender_names)
                    elif alias:
                        self._ends_at(call, module, f"{name}() ({name} = {alias})", ender_names)
                    elif name in ender_names:
                        callee = next((c for m, c in self.project.functions(call.func, module)
                                       if id(c) in self._enders and not self._drives_steps(c, m)), None)
                        if callee is not None:
                            self._ends_at(call, module, f"{callee.name}()", ender_names)
            if len(self._enders) == before:
                break

    def _ends_at(self, call: ast.Call, module: Module, how: str, ender_names: set[str]) -> None:
        owner, loop = module.context[id(call)]
        if loop is not None:
            self._ending_loops.setdefault(id(loop), how)
        elif isinstance(owner, FunctionNode):
            self._enders.add(id(owner))
            ender_names.add(owner.name)

    def _step_loop(self, loop: ast.For | ast.AsyncFor | ast.While, module: Module) -> str:
        if loop.body and isinstance(loop.body[-1], ast.Break | ast.Return):
            return ""  # `for batch in loader: ...; break`: one batch, once (a smoke test, a sample)
        if id(loop) in self._ending_loops:
            return f"each iteration ends a step: {self._ending_loops[id(loop)]}"
        if isinstance(loop, ast.For | ast.AsyncFor) and self._device_loader(loop.iter, loop, module):
            return "each iteration ends a step: a device loader"
        on_xla = self.runs_on_xla(module) or self._given_the_device(loop, module) or \
            self._inherits_the_device(loop, module)
        batch = loop_batch(loop, module)
        counted = isinstance(loop, ast.For | ast.AsyncFor) and not batch  # `for level in range(10)`
        if on_xla and runs_model(loop.body, module, batch=batch, project=self.project, counted=counted):
            return RUNS_MODEL
        return ""

    def trains_itself(self, loop: ast.AST, module: Module) -> bool:
        """The loop's own body (not a loop inside it, but for one over its optimizers: `for opt in optimizers:
        opt.step()`) takes an optimizer step (`xm.optimizer_step(optimizer)`, `optimizer.step()`): a training loop,
        even if it runs an evaluation loop every N steps, or a loop of micro-steps before it."""
        for call in module.calls:
            inner = module.context[id(call)][1]
            if inner is loop and _an_optimizer_step(call):
                return True
            if inner is not None and module.context[id(inner)][1] is loop and _steps_each_optimizer(inner, call):
                return True
        return False

    def backpropagates(self, loop: ast.AST, module: Module) -> bool:
        """The loop's own body calls `backward` (`loss.backward()`, `accelerator.backward(loss)`): training, which
        runs in every step, unlike an evaluation loop (gradient accumulation's micro-steps, say)."""
        return any(module.context[id(call)][1] is loop and last_name(call.func) == "backward" for call in module.calls)

    def runs_on_xla(self, module: Module) -> bool:
        """The module uses PyTorch/XLA (or Accelerate), or imports one of the project's functions that give the XLA
        device (`from utils import get_device`, whose body returns `xm.xla_device()`): its tensors are there. (What
        a PyTorch/XLA script imports is not enough: a TPU script borrowing helpers from its GPU twin is common.)"""
        if self._on_xla is None:
            devices = self._xla_device_functions()
            self._on_xla = {id(m) for m in self.project.modules if m.imports_any(TORCH_XLA_ROOTS) or any(
                (id(self.project.module_named(source, m)), attribute) in devices
                for source, attribute in m.imported.values() if source.split(".")[0] in self.project.roots)}
        return id(module) in self._on_xla

    def _given_the_device(self, node: ast.AST, module: Module, depth: int = 0) -> bool:
        """The function that holds `node`, or the object whose method it is, is given its device by code on the
        XLA device (`evaluate_model(model, data, config, device)` called from the TPU script, `NNet(name, device,
        args)` built there, or by a function given it so, a few calls deep), in a module that never names XLA."""
        function, cls = module.enclosing_function(node), module.enclosing_class(node)
        init = next((s for s in cls.body if isinstance(s, FunctionNode) and s.name == "__init__"), None) \
            if cls is not None else None
        given_to = [(function, self.project.callers(function))] if function is not None else []
        if init is not None and cls is not None:
            given_to.append((init, self.project.calls_by_name.get(cls.name, [])))
        return any(self._device_given(callee, calls, depth) for callee, calls in given_to)

    def _inherits_the_device(self, loop: ast.AST, module: Module) -> bool:
        """The loop is in a method of a class whose base (a few bases up) is defined in a module on the XLA device
        (`class PPOTrainer(AccelerateRLTrainer)`, the base setting up Accelerate for its subclasses), or is a
        Hugging Face Trainer or TrainerCallback (the Trainer puts the model and the batches there on a TPU)."""
        own = module.enclosing_class(loop)
        if own is not None and hf_trainer_class(own, module, callbacks=True):
            return True
        owners = [(module, own)]
        for _ in range(3):
            owners = [found for home, cls in owners if cls is not None for base in cls.bases
                      if (found := self.project.class_named(last_name(base), home)) is not None]
            if any(self.runs_on_xla(home) for home, _ in owners):
                return True
        return False

    def _device_given(self, function: FunctionNode, calls: list[tuple[Module, ast.Call]], depth: int) -> bool:
        params = positional_params(function, method=True)
        devices = {p for p in params_of(function) if "device" in p.lower()}
        for caller_module, call in calls if devices else ():
            given = [k.value for k in call.keywords if k.arg in devices]
            given += [a for p, a in zip(params, call.args, strict=False) if p in devices]
            if any("device" in last_name(value).lower() for value in given) and (self.runs_on_xla(caller_module) or (
                    depth < 3 and self._given_the_device(call, caller_module, depth + 1))):
                return True
        return False

    def _xla_device_functions(self) -> set[tuple[int, str | None]]:
        """(module, name) of the project's functions that give the XLA device (`def get_device(): return
        xm.xla_device()`)."""
        return {(id(module), function.name) for module in self.project.modules if module.imports_any(TORCH_XLA_ROOTS)
                for defs in module.defs.values() for function in defs
                if any(isinstance(n, ast.Call) and last_name(n.func) == "xla_device" for n in ast.walk(function))}

    def _device_loader(self, expr: ast.AST, loop: ast.AST, module: Module, depth: int = 0) -> bool:
        """The loop iterates a device loader (`MpDeviceLoader(...)`, `pl.ParallelLoader(...).per_device_loader`,
        an Accelerate-prepared loader), directly, through a helper given it first (`log_every(loader, 100)`) or
        through a name (`loader = tqdm(loader)` followed a few assignments deep, not forever). `loop`: where
        `expr` is read (a loop, a call), or the function whose code reads it."""
        if depth > 4:
            return False
        while isinstance(expr, ast.Call) and last_name(expr.func) in {"enumerate", "tqdm", "iter", "zip"} \
                and expr.args:
            expr = expr.args[0]
        if isinstance(expr, ast.Call):
            if last_name(expr.func) in DEVICE_LOADERS or self._returns_device_loader(expr, [], "", module, depth):
                return True  # (or `device_batches(batches)`, a function of the project returning one)
            # `metric_logger.log_every(loader, 100)`: a progress helper yielding the device loader's batches
            return bool(expr.args) and self._device_loader(expr.args[0], loop, module, depth + 1)
        if not isinstance(expr, ast.Name):
            return False
        scope = loop if isinstance(loop, FunctionNode) else module.scope_of(loop)
        scope = scope if isinstance(scope, FunctionNode) else None
        for node in module.assigns:
            if scope is not None and not scope.lineno <= node.lineno <= (scope.end_lineno or 0):
                continue
            if isinstance(node.value, ast.Call) and any(
                    isinstance(n, ast.Name) and n.id == expr.id for t in node.targets for n in ast.walk(t)):
                called = last_name(node.value.func)
                if called in DEVICE_LOADERS or (called == "prepare" and "accel" in dotted(node.value.func)):
                    return True
                if called in {"tqdm", "enumerate"} and self._device_loader(node.value, loop, module, depth + 1):
                    return True
                # `progress = progress_bar(itr, ...)`: a helper wrapping the device loader, as iterated directly
                if node.value.args and self._device_loader(node.value.args[0], loop, module, depth + 1):
                    return True
                if self._returns_device_loader(node.value, node.targets, expr.id, module, depth):
                    return True
        return scope is not None and self._given_device_loader(scope, expr.id, depth)

    def _returns_device_loader(self, call: ast.Call, targets: list[ast.expr], name: str, module: Module,
                               depth: int) -> bool:
        """`_, train_loader, _ = build_datasets(cfg, device)` where the project's `build_datasets` returns
        `pl.MpDeviceLoader(...)` (or a name bound to one) in that place of its tuple."""
        target = targets[0] if len(targets) == 1 else None
        place = None
        if isinstance(target, ast.Tuple):
            place = next((i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name), None)
            if place is None:
                return False
        for callee_module, callee in self.project.functions(call.func, module):
            for node in ast.walk(callee):
                if not isinstance(node, ast.Return) or node.value is None:
                    continue
                value = node.value
                if place is not None:
                    if not isinstance(value, ast.Tuple) or place >= len(value.elts):
                        continue
                    value = value.elts[place]
                if self._device_loader(value, callee, callee_module, depth + 1):
                    return True
        return False

    def _given_device_loader(self, function: FunctionNode, param: str, depth: int) -> bool:
        """`def evaluate(self, dataloader)` called as `evaluator.evaluate(pl.MpDeviceLoader(...))` (or a name
        bound to one) somewhere in the project: the parameter is a device loader."""
        params = positional_params(function)
        if param not in params_of(function):
            return False
        position = params.index(param) if param in params else None
        if position is not None and params[:1] in (["self"], ["cls"]):
            position -= 1
        for module, call in self.project.callers(function):
            given = [k.value for k in call.keywords if k.arg == param]
            if position is not None and 0 <= position < len(call.args):
                given.append(call.args[position])
            if any(self._device_loader(value, call, module, depth + 1) for value in given):
                return True
        return position == 1 and id(function) in self._run_by_data_parallel()

    def _run_by_data_parallel(self) -> set[int]:
        """The functions torch_xla's old `DataParallel` runs: `model_parallel = dp.DataParallel(...)` ...
        `model_parallel(train_loop_fn, loader)` calls `train_loop_fn(model, device_loader, device, context)`."""
        if self._data_parallel_runs is None:
            self._data_parallel_runs = set()
            for module in self.project.modules:
                for call in module.calls if module.imports_any(TORCH_XLA_ROOTS) else ():
                    if call.args and isinstance(call.func, ast.Name) and any(
                            isinstance(a.value, ast.Call) and last_name(a.value.func) == "DataParallel"
                            for scope in {module.enclosing_function(call), None}
                            for a in module.assigns_to(call.func.id, scope)):
                        self._data_parallel_runs |= {id(f) for _, f in self.project.functions(call.args[0], module)}
        return self._data_parallel_runs

    def _drives_steps(self, function: FunctionNode, module: Module, depth: int = 0) -> bool:
        """The function runs step loops, its own or a callee's (a `main` that also ends a step once, after
        loading): it drives the steps, it is not one; the loops are the steps."""
        if id(function) in self._drivers:
            return self._drivers[id(function)]
        self._drivers[id(function)] = False  # a recursive call answers no while this one is decided
        loops, calls = self._owned_by(function, module)
        drives = any(id(loop) in self._ending_loops for loop in loops) or (depth < 3 and any(
            self._drives_steps(c, m, depth + 1)
            for call in calls for m, c in self.project.functions(call.func, module)))
        self._drivers[id(function)] = drives
        return drives

    def _owned_by(self, function: FunctionNode, module: Module) -> tuple[list[ast.AST], list[ast.Call]]:
        if not self._owned:
            for each in self.project.modules:
                for node in [*each.loops, *each.calls]:
                    owned = self._owned.setdefault(id(each.context[id(node)][0]), ([], []))
                    (owned[1] if isinstance(node, ast.Call) else owned[0]).append(node)
        return self._owned.get(id(function), ([], []))

    def _model_forwards(self, step: Step) -> Iterator[Step]:
        """The `forward` of every torch.nn.Module of the trainer's own: a PyTorch/XLA step runs the model, whose
        forward is traced into the step's graph (`model(batch)` is never resolved to a class from the source); and
        the `step` of every optimizer of its own, which `xm.optimizer_step(optimizer)` calls.
        Queued with the first step that runs the model, and again with the first sure one if that was a guess:
        every later one would queue the same."""
        if True in self._forwards_queued or step.sure in self._forwards_queued:
            return
        self._forwards_queued.add(step.sure)
        direct = {c.name for m in self.project.modules for c in m.classes.values()
                  if any(last_name(b) == "Module" for b in c.bases)}  # bases for the project's other modules
        for module in self.project.modules:
            for cls_node in module.classes.values():
                optimizer = any(last_name(base) == "Optimizer" for base in cls_node.bases)
                if not optimizer and not any(_torch_module_base(base, module) or last_name(base) in direct
                                             for base in cls_node.bases):
                    continue
                for method in cls_node.body:
                    if isinstance(method, FunctionNode) and method.name == ("step" if optimizer else "forward"):
                        # `input_ids=None`: a forward's tensors default to None; `return_dict=True` is a setting
                        settings = (flag_params(method) - none_default_params(method)) | scalar_params(method)
                        how = f"the model's forward, run by {step.name}" if not optimizer else \
                            f"the optimizer's step, run by {step.name}"
                        yield Step(f"{cls_node.name}.{method.name}", "lazy", how, module, method,
                                   frozenset(params_of(method) - {"self"} - settings), root=False, sure=step.sure,
                                   called=True)


def _an_optimizer_step(call: ast.Call) -> bool:
    """`xm.optimizer_step(optimizer)`, `optimizer.step()`, `self.d_optim.step()`, `opt.step()`, `opt_g.step()`."""
    name = last_name(call.func)
    receiver = dotted(call.func.value).lower() if isinstance(call.func, ast.Attribute) else ""
    return name == "optimizer_step" or (name == "step" and (
        "optim" in receiver or "opt" in re.split(r"[_.\d]", receiver)))


def _steps_each_optimizer(loop: ast.AST, call: ast.Call) -> bool:
    """`for opt in optimizers: opt.step()`: the call steps each optimizer the loop takes."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and "optim" in dotted(loop.iter).lower()):
        return False
    return isinstance(call.func, ast.Attribute) and call.func.attr == "step" and \
        isinstance(call.func.value, ast.Name) and call.func.value.id == loop.target.id


def _step_end_alias(call: ast.Call, module: Module) -> str:
    """`synchronize = xm.mark_step` (one of its bindings, in the call's function or the module's own code) ...
    `synchronize()`: the step end a name is bound to, or ""."""
    if not isinstance(call.func, ast.Name):
        return ""
    scopes = {module.enclosing_function(call), None}
    for scope in scopes:
        for assign in module.assigns_to(call.func.id, scope):
            path = dotted(assign.value) if isinstance(assign.value, ast.Attribute) else ""
            if last_name(assign.value) in XLA_STEP_ENDS and path and _is_xla(path):
                return path
    return ""


def _is_xla(path: str) -> bool:
    root = path.split(".")[0]
    return root.lstrip("_") == "xm" or "xla" in root.lower()  # `_xm`: a module global set by a lazy import


def _torch_module_base(base: ast.AST, module: Module) -> bool:
    """torch.nn.Module, a LightningModule, or a Hugging Face model class (`ElectraForPreTraining`,
    `GPT2PreTrainedModel`), all of them torch.nn.Modules."""
    name = last_name(base)
    if name in {"Module", "LightningModule"}:
        return True
    source = module.imported.get(dotted(base).split(".")[0], ("", None))[0]
    return source.startswith("transformers") and not name.startswith(("TF", "Flax")) and \
        (name.endswith(("PreTrainedModel", "Model")) or "For" in name)


def backpropagated(scope: ast.AST, module: Module) -> frozenset[str]:
    """Names whose `.backward()` the scope calls (`G_loss.backward()`): tensors, whatever made them (not the
    `accelerator` of `accelerator.backward(loss)`, given the tensor)."""
    return frozenset(call.func.value.id for call in module.calls
                     if module.context[id(call)][0] is scope and isinstance(call.func, ast.Attribute) and
                     call.func.attr == "backward" and isinstance(call.func.value, ast.Name) and not call.args)
