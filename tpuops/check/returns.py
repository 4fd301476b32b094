"""The trainer's own functions that evidently return tensors, e.g. `get_batch(split)` ending in `x.to(device)`:
a call to one is a tensor whatever its arguments (`X, Y = get_batch("train")`), where the tensor inference
would otherwise only guess from the arguments; and those that return boolean tensors (masks), whose result
indexes by a mask (`x[make_mask(ids)]`)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Container

from tpuops.check.project import FunctionNode, Module, Project
from tpuops.check.pyvalues import DecidedByName, own_nodes, returns_python
from tpuops.check.tensors import TensorValues


class TensorReturning:
    """The project's functions whose every return is a value their own body makes a tensor (a framework op, a
    model's output, `.to(device)`), with no parameter taken for a tensor and no container filled with tensors
    taken for one: `name in returning.tensors`; and those whose every return is a boolean tensor (a mask): `name
    in returning.masks`. Each name is decided on first ask, and each function's inference serves both questions."""

    def __init__(self, project: Project, python_calls: Container[str]) -> None:
        self._python_calls = python_calls
        self._inferred: dict[int, TensorValues] = {}
        self.tensors = DecidedByName(project, lambda m, d: self._returns(m, d, TensorValues.is_tensor))
        self.masks = DecidedByName(project, lambda m, d: self._returns(m, d, TensorValues.is_bool))

    def own_method(self, module: Module, cls: ast.ClassDef | None) -> Callable[[str], bool | None]:
        """What `self.name()` returns in a method of `cls`: Python runs `cls`'s own `name`, whatever the other
        definitions of that name return (a mixed-precision helper's `_compute_norms` returning NumPy floats
        beside the loop's returning tensors). True: tensors, False: Python values, None: not evident, or not a
        method of `cls`."""
        methods = {s.name: s for s in cls.body if isinstance(s, FunctionNode)} if cls is not None else {}

        def returns(name: str) -> bool | None:
            method = methods.get(name)
            if method is None:
                return None
            if self._returns(module, method, TensorValues.is_tensor):
                return True
            return False if returns_python(method) else None
        return returns

    def _returns(self, module: Module, function: FunctionNode, kind: Callable[[TensorValues, ast.AST], bool]) -> bool:
        returns = [n.value for n in own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return False
        if id(function) not in self._inferred:
            # A dict the function fills (`info["loss"] = model(batch)`) holds counters and settings as well: not a
            # tensor to return.
            self._inferred[id(function)] = TensorValues(module.bindings.get(id(function), []), module.aliases, (),
                                                        self._python_calls, guesses=False, containers=False)
        values = self._inferred[id(function)]
        return all(kind(values, value) for value in returns)

