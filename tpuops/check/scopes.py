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
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from tpuops.check.project import FunctionNode, Module, Project, dotted, last_name
from tpuops.check.pyvalues import (
    PythonValued,
    flag_params,
    is_partial_of,
    none_default_params,
    partial_traced,
    python_valued_functions,
    scalar_params,
)
from tpuops.check.regions import loop_batch, region_nodes, runs_model, uses_torch_xla
from tpuops.check.returns import TensorReturning
from tpuops.check.tensors import TensorValues

JAX_WRAPPERS = {"jit", "pjit", "pmap", "xmap", "shard_map", "filter_jit", "filter_pmap"}
TRANSFORMS = {"vmap", "grad", "value_and_grad", "checkpoint", "remat", "partial", "filter_value_and_grad",
              "filter_grad", "filter_vmap", "shard_map", "named_call", "custom_vjp", "custom_jvp", "pmap", "jit",
              "pjit", "filter_jit"}
XLA_STEP_ENDS = {"mark_step", "sync", "optimizer_step"}
DEVICE_LOADERS = {"MpDeviceLoader", "per_device_loader", "ParallelLoader"}
KERAS_STEP_METHODS = {"train_step", "test_step"}
STRATEGY_RUNS = {"run", "experimental_run_v2"}  # tf.distribute's step runner, under its TF 2.0/2.1 name too
RUNS_MODEL = "each iteration runs the model on the XLA device (a loop with no step end, e.g. evaluation)"
KIND_WORDS = {"jax": "JAX", "tf": "TensorFlow", "keras": "TensorFlow (Keras)", "torch": "PyTorch/XLA",
              "lazy": "PyTorch/XLA"}


Target = tuple[Module, FunctionNode | ast.Lambda, frozenset[str]]  # a compiled function, the names partial binds


@dataclass(frozen=True)
class Step:
    """A compiled region: a function, lambda or loop body (node None: the step lives in a library)."""

    name: str
    # "jax" | "tf" (AutoGraph converts its Python control flow) | "keras" (an overridden train_step: Keras 3 runs
    # it with autograph.experimental.do_not_convert) | "torch" (a traced PyTorch function) | "lazy" (PyTorch/XLA
    # between two step ends)
    kind: str
    how: str  # how it was recognised, e.g. "jax.jit", "step loop (xm.optimizer_step)"
    module: Module | None
    node: ast.AST | None = None
    traced: frozenset[str] = frozenset()  # names that hold tensors from the start
    guessed: frozenset[str] = frozenset()  # parameters a caller passes a value only guessed to be a tensor
    root: bool = True  # False: reached only because a step calls it

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "framework": KIND_WORDS[self.kind], "how": self.how,
                "file": self.module.rel if self.module else None, "line": self.line or None}


@dataclass
class StepFinder:
    project: Project
    steps: dict[int, Step] = field(default_factory=dict)  # id(node) -> step
    library: list[Step] = field(default_factory=list)
    _enders: set[int] = field(default_factory=set)  # functions that end a PyTorch/XLA step each time they run
    _ending_loops: dict[int, str] = field(default_factory=dict)  # loops whose every iteration ends one -> how
    _values: dict[tuple[int, frozenset[str]], TensorValues] = field(default_factory=dict)
    _regions: dict[tuple[int, str], list[ast.AST]] = field(default_factory=dict)
    _python_calls: PythonValued | None = None  # the project's functions that return Python values
    _tensor_calls: TensorReturning | None = None  # and those that return tensors
    _drivers: dict[int, bool] = field(default_factory=dict)  # function -> it runs step loops (cached)
    _owned: dict[int, tuple[list[ast.AST], list[ast.Call]]] = field(default_factory=dict)  # loops, calls

    def values(self, step: Step) -> TensorValues:
        """The tensor inference for a step (cached: a function with several step loops is read once)."""
        assert step.module is not None and step.node is not None
        scope: ast.AST = step.node
        if isinstance(step.node, ast.For | ast.AsyncFor | ast.While):
            scope = step.module.scope_of(step.node)
        key = (id(scope), step.traced, step.guessed)
        if key not in self._values:
            if self._python_calls is None:
                self._python_calls = python_valued_functions(self.project)
                self._tensor_calls = TensorReturning(self.project, self._python_calls)
            self._values[key] = TensorValues(step.module.bindings.get(id(scope), []), step.module.aliases,
                                             step.traced, self._python_calls, guessed=step.guessed,
                                             tensor_calls=self._tensor_calls or frozenset())
        return self._values[key]

    def region(self, step: Step) -> list[ast.AST]:
        key = (id(step.node), step.kind)
        if key not in self._regions:
            self._regions[key] = list(region_nodes(step))
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
                        (known.root or not step.root):
                    continue
                base = step if step.root and not known.root else known  # named as the step it is, not as a callee
                traced = known.traced | step.traced
                step = replace(base, traced=traced, guessed=(known.guessed | step.guessed) - traced,
                               root=known.root or step.root)
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
                    yield Step(node.name, "lazy", "ends a PyTorch/XLA step", module, node)
        for call in module.calls:
            yield from self._wrapped(call, module)
        for cls_node in module.classes.values():
            if any(last_name(b).endswith("Model") for b in cls_node.bases):
                # tf.keras (Keras 2) runs an overridden train_step through AutoGraph, Keras 3 does not
                kind = "tf" if _tf_keras(cls_node, module) else "keras"
                for method in cls_node.body:
                    if isinstance(method, FunctionNode) and method.name in KERAS_STEP_METHODS:
                        yield Step(f"{cls_node.name}.{method.name}", kind, "Keras train_step", module, method,
                                   frozenset(_params(method) - {"self"}))
        for loop in module.loops:
            how = self._step_loop(loop, module)
            if how == RUNS_MODEL:  # no step end: whether it iterates batches or, say, split names is a guess
                yield Step(f"loop at line {loop.lineno}", "lazy", how, module, loop, guessed=loop_batch(loop, module))
            elif how:
                yield Step(f"loop at line {loop.lineno}", "lazy", how, module, loop, loop_batch(loop, module))

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

    def _decorated(self, node: FunctionNode, module: Module) -> Iterator[Step]:
        for decorator in node.decorator_list:
            kind = compiler(decorator, module)
            if kind:
                how = _wrapper_name(decorator)
                yield Step(node.name, kind, how, module, node,
                           frozenset(_params(node) - _static(decorator, node) - flag_params(node)))

    def _wrapped(self, call: ast.Call, module: Module) -> Iterator[Step]:
        """jax.jit(f), pjit(f, ...), torch_xla.compile(f), strategy.run(f), keras compile(jit_compile=...)."""
        kind = compiler(call, module) if not isinstance(call.func, ast.Call) else compiler(call.func, module)
        how = _wrapper_name(call.func if isinstance(call.func, ast.Call) else call)
        if kind is None and last_name(call.func) in STRATEGY_RUNS and "strategy" in dotted(call.func).lower():
            kind, how = "tf", f"strategy.{last_name(call.func)}"
        if last_name(call.func) == "compile" and _keyword(call, "loss") is not None and _keras(module):
            # Keras compiles the loss into its train function (XLA on a TPU): the trainer's own loss is a step
            for target_module, target, _ in self._targets(_keyword(call, "loss"), module):
                if isinstance(target, FunctionNode):
                    yield Step(target.name, "tf", "a Keras loss (compile(loss=...))", target_module, target,
                               frozenset(_params(target) - {"self", "cls"} - flag_params(target)))
        if kind is None and last_name(call.func) == "compile" and _keyword(call, "jit_compile") is not None \
                and not _false(_keyword(call, "jit_compile")):
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
                name, traced = f"lambda at line {target.lineno}", _params(target)
            else:
                name, traced = target.name, _params(target) - _static(wrapper, target) - flag_params(target)
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
                params = [a.arg for a in target.args.posonlyargs + target.args.args]
                fixed = set(params[:len(expr.args) - 1]) | {k.arg for k in expr.keywords if k.arg}
                yield target_module, target, inner | fixed
        elif isinstance(expr, ast.Call) and last_name(expr.func) in TRANSFORMS and expr.args:
            yield from self._targets(expr.args[0], module, bound)
        elif isinstance(expr, ast.Call):  # a factory: jax.jit(make_step(...))
            for factory_module, factory in self.project.functions(expr.func, module):
                for returned in ast.walk(factory):
                    if isinstance(returned, ast.Return) and isinstance(returned.value, ast.Name | ast.Lambda):
                        yield from self._targets(returned.value, factory_module, bound)

    # ------------------------------------------------------------------------------ PyTorch/XLA steps

    def ends_step(self, function: FunctionNode, module: Module) -> bool:
        """The function ends a PyTorch/XLA step each time it runs (a boundary outside any loop of its own)."""
        return id(function) in self._enders

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
                    if name in XLA_STEP_ENDS and _is_xla(dotted(call.func)):
                        self._ends_at(call, module, f"{dotted(call.func)}()", ender_names)
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
        if id(loop) in self._ending_loops:
            return f"each iteration ends a step: {self._ending_loops[id(loop)]}"
        if isinstance(loop, ast.For | ast.AsyncFor) and self._device_loader(loop.iter, loop, module):
            return "each iteration ends a step: a device loader"
        if uses_torch_xla(module) and runs_model(loop.body, module):
            return RUNS_MODEL
        return ""

    def _device_loader(self, expr: ast.AST, loop: ast.AST, module: Module, depth: int = 0) -> bool:
        """The loop iterates a device loader (`MpDeviceLoader(...)`, `pl.ParallelLoader(...).per_device_loader`,
        an Accelerate-prepared loader), directly or through a name (`loader = tqdm(loader)` followed a few
        assignments deep, not forever)."""
        if depth > 4:
            return False
        while isinstance(expr, ast.Call) and last_name(expr.func) in {"enumerate", "tqdm", "iter", "zip"} \
                and expr.args:
            expr = expr.args[0]
        if isinstance(expr, ast.Call):
            return last_name(expr.func) in DEVICE_LOADERS
        if not isinstance(expr, ast.Name):
            return False
        scope = module.scope_of(loop)
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
        return False

    # ----------------------------------------------------------------------------------------- callees

    def _model_forwards(self, step: Step) -> Iterator[Step]:
        """The `forward` of every torch.nn.Module of the trainer's own: a PyTorch/XLA step runs the model, whose
        forward is traced into the step's graph (`model(batch)` is never resolved to a class from the source)."""
        for module in self.project.modules:
            for cls_node in module.classes.values():
                if not any(_torch_module_base(base, module) or last_name(base) in self._torch_modules
                           for base in cls_node.bases):
                    continue
                for method in cls_node.body:
                    if isinstance(method, FunctionNode) and method.name == "forward":
                        # `input_ids=None`: a forward's tensors default to None; `return_dict=True` is a setting
                        settings = (flag_params(method) - none_default_params(method)) | scalar_params(method)
                        yield Step(f"{cls_node.name}.forward", "lazy", f"the model's forward, run by {step.name}",
                                   module, method, frozenset(_params(method) - {"self"} - settings), root=False)

    @property
    def _torch_modules(self) -> set[str]:
        """Classes of the project that subclass torch.nn.Module directly (a base for the others)."""
        return {c.name for m in self.project.modules for c in m.classes.values()
                if any(last_name(b) == "Module" for b in c.bases)}

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
                    if step.kind == "lazy" and self.ends_step(callee, callee_module):
                        continue  # a step function of its own
                    yield Step(callee.name, step.kind, f"called by {step.name}", callee_module, callee,
                               frozenset(traced), frozenset(guessed), root=False)
            elif step.kind != "lazy" and isinstance(node, ast.Name | ast.Attribute) and \
                    isinstance(getattr(node, "ctx", None), ast.Load) and not _is_called(node, module):
                partial = is_partial_of(node, module.parent(node))
                for callee_module, callee in self.project.functions(node, module):  # jax.grad(loss_fn), scan(body)
                    traced = _params(callee) - {"self", "cls"} - flag_params(callee) if partial is None else \
                        partial_traced(partial, callee, isinstance(node, ast.Attribute), values.is_tensor)
                    yield Step(callee.name, step.kind, f"used by {step.name}", callee_module, callee,
                               frozenset(traced), root=False)




def compiler(expr: ast.AST, module: Module) -> str | None:
    """The framework a decorator or wrapper (call or reference) compiles with, or None."""
    call = expr if isinstance(expr, ast.Call) else None
    target = call.func if call else expr
    name, path = last_name(target), dotted(target)
    if name == "partial" and call and call.args:
        return compiler(call.args[0], module)
    root = path.split(".")[0]
    if (name in JAX_WRAPPERS or name.endswith("_jit")) and root not in {"torch", "tf", "tensorflow"}:
        return "jax"
    if name == "function" and call is not None:
        jit = _keyword(call, "jit_compile") or _keyword(call, "experimental_compile")
        return "tf" if jit is not None and not _false(jit) else None
    if name == "compile" and ("torch_xla" in path or root == "torch_xla"):
        return "torch"
    if name == "compile" and root == "torch" and call is not None:
        backend = _keyword(call, "backend")
        if isinstance(backend, ast.Constant) and str(backend.value).startswith("openxla"):
            return "torch"
    return None


def _is_xla(path: str) -> bool:
    root = path.split(".")[0]
    return root == "xm" or "xla" in root.lower()


def _wrapper_name(wrapper: ast.AST) -> str:
    """`jax.jit`, or `nnx.jit` for `partial(nnx.jit, ...)`, as the user wrote it."""
    target = wrapper.func if isinstance(wrapper, ast.Call) else wrapper
    if last_name(target) == "partial" and isinstance(wrapper, ast.Call) and wrapper.args:
        return _wrapper_name(wrapper.args[0])
    return dotted(target) or "a compiling wrapper"


def _call_site_tensors(call: ast.Call, callee: FunctionNode, values: TensorValues) -> tuple[set[str], set[str]]:
    """The callee's parameters the call passes tensors: evidently, and only by a guess (which `values.evident`
    leaves out, so that a guessed tensor does not make the callee's counters and settings tensors)."""
    params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
    if params and params[0] in {"self", "cls"} and isinstance(call.func, ast.Attribute):
        params = params[1:]
    names = set(params) | {a.arg for a in callee.args.kwonlyargs}
    passed = [*zip(params, call.args, strict=False), *((k.arg, k.value) for k in call.keywords if k.arg in names)]
    scalars = scalar_params(callee)  # `mask_ratio: Optional[float]` is a float, whatever the caller computes
    traced = {name for name, value in passed if values.evident.is_tensor(value)} - scalars
    return traced, {name for name, value in passed if values.is_tensor(value)} - traced - scalars


def _is_called(node: ast.AST, module: Module) -> bool:
    parent = module.parent(node)
    return isinstance(parent, ast.Call) and parent.func is node


def _params(function: FunctionNode | ast.Lambda) -> set[str]:
    arguments = function.args
    return {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}


def _static(wrapper: ast.AST, function: FunctionNode | None) -> set[str]:
    """Under jax.jit every argument is traced but those static_argnums/static_argnames (pmap:
    static_broadcasted_argnums) name, and self."""
    static: set[str] = {"self", "cls"}
    params = [a.arg for a in function.args.posonlyargs + function.args.args] if function else []
    for call in (n for n in ast.walk(wrapper) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            values = keyword.value.elts if isinstance(keyword.value, ast.Tuple | ast.List) else [keyword.value]
            for value in (v.value for v in values if isinstance(v, ast.Constant)):
                if keyword.arg == "static_argnames" and isinstance(value, str):
                    static.add(value)
                elif keyword.arg in {"static_argnums", "static_broadcasted_argnums"} and isinstance(value, int) \
                        and value < len(params):
                    static.add(params[value])
    return static


def _torch_module_base(base: ast.AST, module: Module) -> bool:
    """torch.nn.Module, a LightningModule, or a Hugging Face model class (`ElectraForPreTraining`,
    `GPT2PreTrainedModel`), all of them torch.nn.Modules."""
    name = last_name(base)
    if name in {"Module", "LightningModule"}:
        return True
    source = module.imported.get(dotted(base).split(".")[0], ("", None))[0]
    return source.startswith("transformers") and not name.startswith(("TF", "Flax")) and \
        (name.endswith(("PreTrainedModel", "Model")) or "For" in name)


def _tf_keras(cls_node: ast.ClassDef, module: Module) -> bool:
    """The model subclasses tf.keras.Model (`tf.keras.Model`, or `Model` imported from tensorflow.keras)."""
    for base in cls_node.bases:
        path = dotted(base)
        root = path.split(".")[0]
        source = module.imported.get(root, ("", None))[0]
        if path.startswith(("tf.", "tensorflow.")) or source.startswith("tensorflow"):
            return True
    return False


def _keras(module: Module) -> bool:
    return any(source.split(".")[0] in {"tensorflow", "keras", "tf_keras"} for source, _ in module.imported.values())


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _false(value: ast.AST | None) -> bool:
    return isinstance(value, ast.Constant) and value.value in (False, None)
