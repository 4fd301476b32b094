"""The trainer's own functions that evidently return tensors, e.g. `get_batch(split)` ending in `x.to(device)`:
a call to one is a tensor whatever its arguments (`X, Y = get_batch("train")`), where the tensor inference
would otherwise only guess from the arguments; and those that return boolean tensors (masks), whose result
indexes by a mask (`x[make_mask(ids)]`)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Container

from tpuops.check.project import FunctionNode, Module, Project
from tpuops.check.pyvalues import own_nodes
from tpuops.check.tensors import TensorValues


class TensorReturning:
    """The project's functions whose every return is a value their own body makes a tensor (a framework op, a
    model's output, `.to(device)`), with no parameter taken for a tensor and no container filled with tensors
    taken for one: `name in returning.tensors`; and those whose every return is a boolean tensor (a mask): `name
    in returning.masks`. Each name is decided on first ask, and each function's inference serves both questions."""

    def __init__(self, project: Project, python_calls: Container[str]) -> None:
        self._python_calls = python_calls
        self._inferred: dict[int, TensorValues] = {}
        self.tensors = _DecidedByName(project.definitions, lambda m, d: self._returns(m, d, TensorValues.is_tensor))
        self.masks = _DecidedByName(project.definitions, lambda m, d: self._returns(m, d, TensorValues.is_bool))

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


class _DecidedByName:
    """Asked by name (`name in decided`): true when every function of that name in the project passes `test`,
    decided on first ask (most names are never asked)."""

    def __init__(self, defs: dict[str, list[tuple[Module, FunctionNode]]],
                 test: Callable[[Module, FunctionNode], bool]) -> None:
        self._defs, self._test = defs, test
        self._known: dict[str, bool] = {}

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in self._defs:
            return False
        if name not in self._known:
            self._known[name] = False  # a recursive function answers no while it is decided
            self._known[name] = all(self._test(m, d) for m, d in self._defs[name])
        return self._known[name]
