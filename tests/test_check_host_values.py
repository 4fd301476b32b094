"""What the lint takes for values in host memory: tensors PyTorch made there, copies, and what helpers return."""

from __future__ import annotations

import ast
import textwrap

from tpuops.check.project import Module, Project
from tpuops.check.pyvalues import python_valued_functions
from tpuops.check.returns import TensorReturning
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


def test_a_dict_of_python_values_is_a_python_value() -> None:
    """A step that hands back `{"loss": float(loss.item()), "lr": ...}` (or `{}`) returns Python values; one that
    hands back the loss tensor in its dict, or a dict it filled after making it empty, does not."""
    source = textwrap.dedent("""
        def train(model, images, optimizer):
            loss = model(images)
            out = {"loss": float(loss.item()), "steps": 1}
            return out

        def dummy(images):
            return {}

        def train_on_device(model, images):
            loss = model(images)
            return {"loss": loss, "steps": 1}

        def losses(model, images):
            terms = {}
            terms["loss"] = model(images)
            return terms
        """)
    python = python_valued_functions(Project([Module.of("train.py", ast.parse(source), source)]))
    assert "train" in python and "dummy" in python
    assert "train_on_device" not in python and "losses" not in python


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


def test_self_calls_take_what_the_class_own_method_returns_whatever_other_classes_of_the_name_return() -> None:
    """Two classes define `_norms`: the loop's returns device tensors, the half-precision helper's NumPy floats.
    Decided by the name alone, neither verdict holds for both; `self._norms()` in each class runs its own."""
    source = textwrap.dedent("""
        import numpy as np
        import torch

        class Loop:
            def step(self, batch):
                grad_norm, weight_norm = self._norms()
                loss = self.score(batch)
                return grad_norm, weight_norm, loss

            def _norms(self):
                return torch.stack(self.grads).norm(), torch.stack(self.weights).norm()

        class Helper:
            def report(self):
                grad_norm, weight_norm = self._norms()
                return grad_norm, weight_norm

            def _norms(self):
                return np.sqrt(self.grad_sum), np.sqrt(self.weight_sum)
        """)
    module = Module.of("train.py", ast.parse(source), source)
    project = Project([module])
    python = python_valued_functions(project)
    returning = TensorReturning(project, python)
    assert "_norms" not in returning.tensors and "_norms" not in python
    for cls_name, on_device in (("Loop", True), ("Helper", False)):
        cls = next(n for n in module.tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
        function = cls.body[0]
        values = TensorValues(module.bindings.get(id(function), []), module.aliases, (), python, guesses=False,
                              tensor_calls=returning.tensors, own_method=returning.own_method(module, cls))
        assert values.is_tensor(name_in(function, "grad_norm")) is on_device, cls_name
        assert values.is_tensor(name_in(function, "weight_norm")) is on_device, cls_name
    assert returning.own_method(module, None)("_norms") is None


def test_a_getter_of_a_model_hands_the_model_back_not_its_output() -> None:
    """`self.get_model()` returns the model (LLaVA's `get_model().get_vision_tower()`), so what is read off it is
    no tensor; calling the model gives one."""
    values, function = scope_values("""
        def encode(self, images):
            tower = self.get_model().get_vision_tower()
            side = tower.num_patches_per_side
            features = self.model(images)
            return side, features
        """, {"images"})
    assert not values.is_tensor(name_in(function, "tower")) and not values.is_tensor(name_in(function, "side"))
    assert values.is_tensor(name_in(function, "features"))
