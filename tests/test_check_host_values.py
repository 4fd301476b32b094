"""What the lint takes for values in host memory: tensors PyTorch made there, copies, and what helpers return."""

from __future__ import annotations

import ast
import textwrap

from tpuops.check.project import Module, Project
from tpuops.check.pyvalues import python_valued_functions
from tpuops.check.tensors import TensorValues


def scope_values(source: str, traced: set[str]) -> tuple[TensorValues, ast.FunctionDef]:
    """The tensor inference of the first function of `source`, its parameters in `traced` taken for tensors."""
    source = textwrap.dedent(source)
    module = Module.of("train.py", ast.parse(source), source)
    function = next(n for n in ast.walk(module.tree) if isinstance(n, ast.FunctionDef))
    values = TensorValues(module.bindings.get(id(function), []), module.aliases, traced)
    return values, function


def name_in(function: ast.FunctionDef, name: str) -> ast.Name:
    return next(n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name)


def test_factories_without_a_device_and_what_is_computed_from_them_are_on_the_host() -> None:
    values, function = scope_values("""
        import torch

        def grid(features):
            ratios = torch.Tensor([2, 3, 4])
            spans = (features.size(3) - 1) / (ratios - 1)
            _, best = torch.min(torch.abs(spans - 0.4), 0)
            moved = ratios.to(features.device)
            on_device = torch.zeros(4, device=features.device)
            mixed = ratios * features.mean()
            n_items, index = features.sum().cpu(), features.argmax().cpu()
            return best, moved, on_device, mixed, n_items, index
        """, {"features"})
    host = {name: values.on_host(name_in(function, name))
            for name in ("ratios", "spans", "best", "moved", "on_device", "mixed", "n_items", "index", "features")}
    assert host == {"ratios": True, "spans": True, "best": True, "moved": False, "on_device": False,
                    "mixed": False, "n_items": True, "index": True, "features": False}


def test_a_name_is_on_the_host_only_if_some_binding_puts_it_there() -> None:
    """`losses = []` may be filled with device tensors; `current = current[part]` holds whatever it started as;
    a name bound once to a device tensor and once to a copy is not known to be either."""
    values, function = scope_values("""
        import torch

        def walk(batch, parts):
            losses = []
            stacked = torch.stack(losses)
            current = batch
            for part in parts:
                current = current[part]
            x = batch[0]
            x = x.cpu()
            return stacked, current, x
        """, {"batch"})
    assert not any(values.on_host(name_in(function, name)) for name in ("losses", "stacked", "current", "x"))


def test_helpers_returning_averages_and_math_of_them_return_python_numbers() -> None:
    """`total, n = 0.0, 0`, `total / n if n > 0 else 0.0` and `math.exp(min(average, 20.0))` of `.item()` sums
    are Python numbers."""
    source = textwrap.dedent("""
        import math

        def validate(model, loader):
            total, batches = 0.0, 0
            for x, y in loader:
                total += model(x, y).item()
                batches += 1
            average = total / batches if batches > 0 else 0.0
            return average, math.exp(min(average, 20.0))

        def validate_on_device(model, loader):
            total = 0.0
            for x, y in loader:
                total += model(x, y)
            average = total if total is not None else 0.0
            return average, math.exp(1.0)
        """)
    python = python_valued_functions(Project([Module.of("train.py", ast.parse(source), source)]))
    assert "validate" in python and "validate_on_device" not in python


def test_the_last_binding_above_a_line_is_the_last_in_the_source() -> None:
    """The module's one walk does not visit statements in source order; `bound_above` must still give the
    binding nearest above."""
    source = textwrap.dedent("""
        def evaluate(logits, mask):
            with torch.no_grad():
                hits = (logits.argmax(-1) == 1).any(dim=-1)
                total = mask.sum().item()
                hits = hits[mask].sum().item()
                rate = hits / total
            return rate
        """)
    module = Module.of("train.py", ast.parse(source), source)
    read = next(n for n in ast.walk(module.tree) if isinstance(n, ast.Name) and n.id == "hits" and
                isinstance(n.ctx, ast.Load) and n.lineno == 7)
    bound = module.bound_above(read)
    assert bound is not None and bound.lineno == 6
