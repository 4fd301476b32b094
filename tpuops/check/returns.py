"""The trainer's own functions that evidently return tensors, e.g. `get_batch(split)` ending in `x.to(device)`:
a call to one is a tensor whatever its arguments (`X, Y = get_batch("train")`), where the tensor inference
would otherwise only guess from the arguments; and those that return boolean tensors (masks), whose result
indexes by a mask (`x[make_mask(ids)]`)."""

from __future__ import annotations

import ast
from collections.abc import Container

from tpuops.check.project import FunctionNode, Module, Project
from tpuops.check.pyvalues import own_nodes
from tpuops.check.tensors import TensorValues


class TensorReturning:
    """Asked by name (`name in returning`), decided on first ask: every function of that name in the project
    returns a value its own body makes a tensor (a framework op, a model's output, `.to(device)`), with no
    parameter taken for a tensor and no container filled with tensors taken for one."""

    def __init__(self, project: Project, python_calls: Container[str], booleans: bool = False) -> None:
        self.booleans = booleans  # ask for functions returning boolean tensors (masks) instead
        self._defs: dict[str, list[tuple[Module, FunctionNode]]] = {}
        for module in project.modules:
            for name, defs in module.defs.items():
                self._defs.setdefault(name, []).extend((module, d) for d in defs)
        self._python_calls = python_calls
        self._known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self._defs:
            return False
        if name not in self._known:
            self._known[name] = False  # a recursive function answers no while it is decided
            self._known[name] = all(self._returns_tensor(m, d) for m, d in self._defs[name])
        return self._known[name]

    def _returns_tensor(self, module: Module, function: FunctionNode) -> bool:
        returns = [n.value for n in own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]
        if not returns:
            return False
        # A dict the function fills (`info["loss"] = model(batch)`) holds counters and settings as well: not a
        # tensor to return.
        values = TensorValues(module.bindings.get(id(function), []), module.aliases, (), self._python_calls,
                              guesses=False, containers=False)
        if self.booleans:
            return all(values.is_bool(value) for value in returns)
        return all(values.is_tensor(value) for value in returns)
