"""Which code of the trainer XLA compiles (the "steps"), found with `ast` across the whole code directory.

- Traced functions: under `jax.jit`/`pjit`/`pmap`/`nnx.jit`/`eqx.filter_jit`/any `*_jit` wrapper (levanter's
  `named_jit`), as a decorator, through `functools.partial(jax.jit, ...)`, or as the argument of such a call,
  also through transformations (`jax.jit(jax.vmap(f))`), factories (`jax.jit(make_step())`) and imports (a step
  defined in another module); `tf.function(jit_compile=...)`, `strategy.run(fn)`, a Keras model's overridden
  `train_step`; `torch_xla.compile(fn)` and `torch.compile(fn, backend="openxla")`.
- PyTorch/XLA lazy steps: the code between two step boundaries. A loop is a step loop when each iteration ends a
  step (`xm.mark_step()`, `torch_xla.sync()`, `xm.optimizer_step()`, a call to a function or method that ends
  one, or iterating a device loader: `MpDeviceLoader`, `per_device_loader`, an Accelerate-prepared loader); a
  function that ends a step outside any loop is a step function.
- Library steps (nothing of ours to read, but a step): Keras `compile(jit_compile=...)` + `fit`,
  `torch.compile(model, backend="openxla")`.
Every function a step calls is traced too; its parameters are tensors where the call passes tensors (all of
them when the function is handed to a transformation rather than called).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from tpuops.check.class_steps import class_steps
from tpuops.check.project import (
    KERAS_ROOTS,
    FunctionNode,
    Module,
    Project,
    dotted,
    last_name,
    params_of,
    positional_params,
)
from tpuops.check.pyvalues import (
    DecidedByName,
    flag_params,
    is_partial_of,
    partial_traced,
    python_valued_functions,
    scalar_params,
    static_fields,
)
from tpuops.check.regions import loop_batch, region_nodes
from tpuops.check.returns import TensorReturning
from tpuops.check.settings import Settings
from tpuops.check.steps import Step
from tpuops.check.tensors import TensorValues
from tpuops.check.torch_steps import RUNS_BACKWARD, RUNS_MODEL, TorchXlaSteps, backpropagated
from tpuops.check.wrappers import compiler, host_callback_target, is_false, keyword, wrapper_name

TRANSFORMS = {"vmap", "grad", "value_and_grad", "checkpoint", "remat", "partial", "filter_value_and_grad",
              "filter_grad", "filter_vmap", "shard_map", "named_call", "custom_vjp", "custom_jvp", "pmap", "jit",
              "pjit", "filter_jit"}
STRATEGY_RUNS = {"run", "experimental_run_v2"}  # tf.distribute's step runner, under its TF 2.0/2.1 name too


Target = tuple[Module, FunctionNode | ast.Lambda, frozenset[str]]  # a compiled function, the names partial binds


@dataclass
class StepFinder(TorchXlaSteps):
    project: Project
    given: Mapping[str, frozenset[object]] = field(default_factory=dict)  # the options the command passes
    steps: dict[int, Step] = field(default_factory=dict)  # id(node) -> step
    library: list[Step] = field(default_factory=list)
    _enders: set[int] = field(default_factory=set)  # functions that end a PyTorch/XLA step each time they run
    _ending_loops: dict[int, str] = field(default_factory=dict)  # loops whose every iteration ends one -> how
    _values: dict[tuple[int, frozenset[str]], TensorValues] = field(default_factory=dict)
    _regions: dict[tuple[int, str], list[ast.AST]] = field(default_factory=dict)
    _python_calls: DecidedByName | None = None  # the project's functions that return Python values
    _returning: TensorReturning | None = None  # and those that return tensors, or boolean tensors (masks)
    _drivers: dict[int, bool] = field(default_factory=dict)  # function -> it runs step loops (cached)
    _owned: dict[int, tuple[list[ast.AST], list[ast.Call]]] = field(default_factory=dict)  # loops, calls
    _forwards_queued: set[bool] = field(default_factory=set)  # the `sure` of the steps that queued forwards
    _on_xla: set[int] | None = None  # modules that run on the XLA device (torch_xla's, and those given its device)
    _data_parallel_runs: set[int] | None = None  # the loop functions torch_xla's old DataParallel runs

    def values(self, step: Step) -> TensorValues:
        """The tensor inference for a step (cached: a function with several step loops is read once)."""
        assert step.module is not None and step.node is not None
        scope: ast.AST = step.node
        if isinstance(step.node, ast.For | ast.AsyncFor | ast.While):
            scope = step.module.scope_of(step.node)
        key = (id(scope), step.traced, step.guessed)
        if key not in self._values:
            if self._python_calls is None or self._returning is None:
                self._python_calls = python_valued_functions(self.project)
                self._returning = TensorReturning(self.project, self._python_calls)
            cls = step.module.parent(scope)
            traced = step.traced | backpropagated(scope, step.module) if step.kind in {"lazy", "torch"} else \
                step.traced
            self._values[key] = TensorValues(step.module.bindings.get(id(scope), []), step.module.aliases,
                                             traced, self._python_calls, guessed=step.guessed,
                                             tensor_calls=self._returning.tensors, bool_calls=self._returning.masks,
                                             static=self.static_fields,
                                             own_method=self._returning.own_method(
                                                 step.module, cls if isinstance(cls, ast.ClassDef) else None))
        return self._values[key]

    @cached_property
    def static_fields(self) -> frozenset[str]:
        return static_fields(self.project)

    @cached_property
    def settings(self) -> Settings:
        return Settings.of(self.project, self.given)

    def region(self, step: Step) -> list[ast.AST]:
        key = (id(step.node), step.kind)
        if key not in self._regions:
            self._regions[key] = list(region_nodes(step, self.settings))
        return self._regions[key]

    def find(self) -> list[Step]:
        self._find_step_ends()
        self._drivers.clear()  # decided again on the final step loops
        queue = [s for m in self.project.modules for s in self._roots(m)]
        while queue:
            step = queue.pop()
            known = self.steps.get(id(step.node))
            if known is not None:
                if step.traced <= known.traced and step.guessed <= known.guessed | known.traced and \
                        (known.root or not step.root) and (known.sure or not step.sure) and \
                        (step.called or not known.called):
                    continue
                base = step if step.root and not known.root else known  # named as the step it is, not as a callee
                traced = known.traced | step.traced
                step = replace(base, traced=traced, guessed=(known.guessed | step.guessed) - traced,
                               root=known.root or step.root, sure=known.sure or step.sure,
                               called=known.called and step.called)
            self.steps[id(step.node)] = step
            queue.extend(self._callees(step))
        return [*self.steps.values(), *self.library]

    # ----------------------------------------------------------------------------------------- roots

    def _roots(self, module: Module) -> Iterator[Step]:
        for defs in module.defs.values():
            for node in defs:
                yield from self._decorated(node, module)
                if self.ends_step(node, module) and not any(compiler(d, module) for d in node.decorator_list) \
                        and not self._drives_steps(node, module):
                    yield Step(node.name, "lazy", "ends a PyTorch/XLA step", module, node, sure=False)
        for call in module.calls:
            yield from self._wrapped(call, module)
            yield from self._engine_steps(call, module)
        for cls_node in module.classes.values():
            yield from class_steps(cls_node, module)
        hows = {id(loop): self._step_loop(loop, module) for loop in module.loops}
        # loops around a step loop (epochs, chunks): what they run besides runs once per epoch; not so a training
        # loop that runs an evaluation loop now and then
        around = set()
        for loop in module.loops:
            outer = module.context[id(loop)][1]
            while hows[id(loop)] and outer is not None and id(outer) not in around:
                around.add(id(outer))
                outer = module.context[id(outer)][1]
        for loop in module.loops:
            how = hows[id(loop)]
            if how and id(loop) in around and not self.trains_itself(loop, module):
                continue
            if how == RUNS_MODEL and self._calls_a_driver(loop, module):
                continue  # `for shard in shards: train_shard(model, shard)`: it drives the step loops, is none
            if how == RUNS_MODEL and self.backpropagates(loop, module):  # a training step's micro-steps
                yield Step(f"loop at line {loop.lineno}", "lazy", RUNS_BACKWARD, module, loop,
                           guessed=loop_batch(loop, module))
            elif how == RUNS_MODEL:  # no step end: whether it iterates batches or, say, split names is a guess
                yield Step(f"loop at line {loop.lineno}", "lazy", how, module, loop, guessed=loop_batch(loop, module),
                           sure=False)
            elif how:
                yield Step(f"loop at line {loop.lineno}", "lazy", how, module, loop, loop_batch(loop, module))


    def _calls_a_driver(self, loop: ast.AST, module: Module) -> bool:
        """The loop calls a function that runs step loops (its own or a callee's), or has torch_xla's old
        `DataParallel` run one (`model_parallel(train_loop_fn, loader)`)."""
        calls = [node for node in ast.walk(loop) if isinstance(node, ast.Call)]
        return any(self._drives_steps(callee, callee_module)
                   for node in calls for callee_module, callee in self.project.functions(node.func, module)) or \
            any(id(function) in self._run_by_data_parallel()
                for node in calls if node.args for _, function in self.project.functions(node.args[0], module))

    def _decorated(self, node: FunctionNode, module: Module) -> Iterator[Step]:
        for decorator in node.decorator_list:
            kind = compiler(decorator, module)
            if kind:
                how = wrapper_name(decorator)
                yield Step(node.name, kind, how, module, node,
                           frozenset(params_of(node) - _static(decorator, node) - flag_params(node)))

    def _engine_steps(self, call: ast.Call, module: Module) -> Iterator[Step]:
        """`Engine(train_step)` of PyTorch-Ignite: the engine calls the function once per batch, with the batch on
        the device (Ignite picks XLA by its backend, `idist.Parallel(backend="xla-tpu")`, not by an import)."""
        if last_name(call.func) != "Engine" or not call.args or not module.imports_any({"ignite"}):
            return
        for target_module, target, _ in self._targets(call.args[0], module):
            if isinstance(target, FunctionNode):
                yield Step(target.name, "lazy", "run by an Ignite Engine, once per batch", target_module, target,
                           frozenset(params_of(target) - {"self", "engine"} - flag_params(target)))

    def _wrapped(self, call: ast.Call, module: Module) -> Iterator[Step]:
        """jax.jit(f), pjit(f, ...), torch_xla.compile(f), strategy.run(f), keras compile(jit_compile=...)."""
        kind = compiler(call, module) if not isinstance(call.func, ast.Call) else compiler(call.func, module)
        how = wrapper_name(call.func if isinstance(call.func, ast.Call) else call)
        if kind is None and last_name(call.func) in STRATEGY_RUNS and "strategy" in dotted(call.func).lower():
            kind, how = "tf", f"strategy.{last_name(call.func)}"
        if last_name(call.func) == "compile" and keyword(call, "loss") is not None and module.imports_any(KERAS_ROOTS):
            # Keras compiles the loss into its train function (XLA on a TPU): the trainer's own loss is a step
            for target_module, target, _ in self._targets(keyword(call, "loss"), module):
                if isinstance(target, FunctionNode):
                    yield Step(target.name, "tf", "a Keras loss (compile(loss=...))", target_module, target,
                               frozenset(params_of(target) - {"self", "cls"} - flag_params(target)))
        if kind is None and last_name(call.func) == "compile" and keyword(call, "jit_compile") is not None \
                and not is_false(keyword(call, "jit_compile")):
            self.library.append(Step("Keras fit (compile(jit_compile=...))", "tf", "Keras compile + fit", module,
                                     call, root=True))
            return
        if kind is None or not call.args:
            return
        wrapper = call.func if isinstance(call.func, ast.Call) else call
        targets = list(self._targets(call.args[0], module))
        if not targets and kind == "torch":
            self.library.append(Step(f"{ast.unparse(call.args[0])} (compiled module)", kind, how, module, call))
        for target_module, target, bound in targets:
            if isinstance(target, ast.Lambda):
                name, traced = f"lambda at line {target.lineno}", params_of(target)
            else:
                name, traced = target.name, params_of(target) - _static(wrapper, target) - flag_params(target)
            yield Step(name, kind, how, target_module, target, frozenset(traced - bound - {"self", "cls"}))

    def _targets(self, expr: ast.AST, module: Module, bound: frozenset[str] = frozenset()) -> Iterator[Target]:
        """The functions a wrapper compiles, with the parameters `functools.partial` binds (Python values, not
        traced arguments)."""
        if isinstance(expr, ast.Lambda):
            yield module, expr, bound
        elif isinstance(expr, ast.Name | ast.Attribute):
            for target_module, target in self.project.functions(expr, module):
                yield target_module, target, bound
        elif isinstance(expr, ast.Call) and last_name(expr.func) == "partial" and expr.args:
            for target_module, target, inner in self._targets(expr.args[0], module, bound):
                params = positional_params(target)
                fixed = set(params[:len(expr.args) - 1]) | {k.arg for k in expr.keywords if k.arg}
                yield target_module, target, inner | fixed
        elif isinstance(expr, ast.Call) and last_name(expr.func) in TRANSFORMS and expr.args:
            yield from self._targets(expr.args[0], module, bound)
        elif isinstance(expr, ast.Call):  # a factory: jax.jit(make_step(...))
            for factory_module, factory in self.project.functions(expr.func, module):
                for returned in ast.walk(factory):
                    if isinstance(returned, ast.Return) and isinstance(returned.value, ast.Name | ast.Lambda):
                        yield from self._targets(returned.value, factory_module, bound)

    # ----------------------------------------------------------------------------------------- callees


    def _callees(self, step: Step) -> Iterator[Step]:
        if step.node is None or step.module is None or isinstance(step.node, ast.Call):
            return
        if step.kind in {"lazy", "torch"} and step.root:
            yield from self._model_forwards(step)
        module = step.module
        values = self.values(step)
        for node in self.region(step):
            if isinstance(node, ast.Call):
                for callee_module, callee in self.project.functions(node.func, module):
                    traced, guessed = _call_site_tensors(node, callee, values)
                    if step.kind == "lazy" and (self.ends_step(callee, callee_module) or
                                                self._drives_steps(callee, callee_module)) and \
                            not self._a_batch_step(step, callee, callee_module):
                        continue  # a step function of its own, or one running step loops (an epoch's `train`)
                    yield Step(callee.name, step.kind, f"called by {step.name}", callee_module, callee,
                               frozenset(traced), frozenset(guessed), root=False, sure=step.sure, called=True)
            elif step.kind != "lazy" and isinstance(node, ast.Name | ast.Attribute) and \
                    isinstance(getattr(node, "ctx", None), ast.Load) and not _is_called(node, module) and \
                    not _handed_to_a_host_callback(node, module):
                partial = is_partial_of(node, module.parent(node))
                for callee_module, callee in self.project.functions(node, module):  # jax.grad(loss_fn), scan(body)
                    traced = params_of(callee) - {"self", "cls"} - flag_params(callee) if partial is None else \
                        partial_traced(partial, callee, isinstance(node, ast.Attribute), values.is_tensor)
                    yield Step(callee.name, step.kind, f"used by {step.name}", callee_module, callee,
                               frozenset(traced), root=False, sure=step.sure)


def _call_site_tensors(call: ast.Call, callee: FunctionNode, values: TensorValues) -> tuple[set[str], set[str]]:
    """The callee's parameters the call passes tensors: evidently, and only by a guess (which `values.evident`
    leaves out, so that a guessed tensor does not make the callee's counters and settings tensors)."""
    params = positional_params(callee, method=isinstance(call.func, ast.Attribute))
    names = set(params) | {a.arg for a in callee.args.kwonlyargs}
    passed = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords if k.arg in names)]
    scalars = scalar_params(callee)  # `mask_ratio: Optional[float]` is a float, whatever the caller computes
    traced = {name for name, value in passed if values.evident.is_tensor(value)} - scalars
    return traced, {name for name, value in passed if values.is_tensor(value)} - traced - scalars


def _handed_to_a_host_callback(node: ast.AST, module: Module) -> bool:
    """`io_callback(report, ...)`, `jax.debug.callback(log, x)`, `partial(jax.debug.callback, log)`: the function
    runs in Python on the host, given concrete values; it is not traced into the step."""
    parent = module.parent(node)
    callers = (parent, module.parent(parent) if parent is not None else None)  # (`io_callback(partial(f, a), ...)`)
    return any(isinstance(c, ast.Call) and host_callback_target(c) is node for c in callers)


def _is_called(node: ast.AST, module: Module) -> bool:
    parent = module.parent(node)
    return isinstance(parent, ast.Call) and parent.func is node


def _static(wrapper: ast.AST, function: FunctionNode | None) -> set[str]:
    """Under jax.jit every argument is traced but those static_argnums/static_argnames (pmap:
    static_broadcasted_argnums) name, and self."""
    static: set[str] = {"self", "cls"}
    params = positional_params(function) if function else []
    for call in (n for n in ast.walk(wrapper) if isinstance(n, ast.Call)):
        for given in call.keywords:
            values = given.value.elts if isinstance(given.value, ast.Tuple | ast.List) else [given.value]
            for value in (v.value for v in values if isinstance(v, ast.Constant)):
                if given.arg == "static_argnames" and isinstance(value, str):
                    static.add(value)
                elif given.arg in {"static_argnums", "static_broadcasted_argnums"} and isinstance(value, int) \
                        and value < len(params):
                    static.add(params[value])
    return static
