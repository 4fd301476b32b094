"""Which tensors of a PyTorch scope live on the host: made by a factory given no device (`torch.Tensor([2, 3])`,
`torch.zeros(n)`), copied there (`x.cpu()`), or computed from such tensors and Python values only
(`torch.min(torch.abs(steps - 1), 0)`). Reading one (`.item()`, `.tolist()`, `float()`, a format) waits for no
device, and the device's graph is not cut.

A name is on the host when every binding of it in the scope is a host tensor or a Python value, and one is a
host tensor (`x = batch[0]` and later `x = x.cpu()`: not known, so not on the host; `losses = []`: a list that
may be filled with device tensors). This is decided as a least fixed point: a name is on the host only if some
binding grounds it (`current = current[part]` alone does not).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from tpuops.check.project import dotted, last_name

# PyTorch's factories: given no `device=`, their tensor is made in host memory.
HOST_FACTORIES = {"randint", "rand", "randn", "randperm", "tensor", "zeros", "ones", "arange", "empty", "full",
                  "linspace", "logspace", "eye", "as_tensor", "from_numpy", "Tensor", "FloatTensor", "LongTensor",
                  "IntTensor", "BoolTensor", "DoubleTensor", "HalfTensor"}
HOST_COPIES = {"cpu", "numpy", "tolist", "item"}
DEVICE_MOVES = {"to", "cuda", "xla", "type_as", "to_device"}


class HostTensors:
    """`on_host(expr)` for the expressions of one scope, given its bindings and which expressions are tensors."""

    def __init__(self, bindings: list[tuple[list[ast.AST], ast.AST]], is_tensor: Callable[[ast.AST], bool],
                 traced: set[str]) -> None:
        self._is_tensor = is_tensor
        values: dict[str, list[ast.AST]] = {}
        for targets, value in bindings:
            for name, part in _pairs(targets, value):
                values.setdefault(name, []).append(part)
        candidates = set(values) - traced
        self.names: set[str] = set()
        for _ in range(8):
            found = {name for name in candidates if all(self._host_or_python(v) for v in values[name]) and
                     any(self.on_host(v) for v in values[name])}
            if found == self.names:
                break
            self.names = found

    def on_host(self, expr: ast.AST) -> bool:  # noqa: C901  one case per expression kind
        if isinstance(expr, ast.Name):
            return expr.id in self.names
        if isinstance(expr, ast.Call):
            return self._host_call(expr)
        if isinstance(expr, ast.BinOp):
            return self._of_host_values([expr.left, expr.right])
        if isinstance(expr, ast.UnaryOp):
            return self.on_host(expr.operand)
        if isinstance(expr, ast.Compare):
            return self._of_host_values([expr.left, *expr.comparators])
        if isinstance(expr, ast.Subscript | ast.Attribute | ast.Starred):
            return self.on_host(expr.value)
        if isinstance(expr, ast.Tuple | ast.List):
            return self._of_host_values(expr.elts)
        return False

    def _host_or_python(self, expr: ast.AST) -> bool:
        return self.on_host(expr) or not self._is_tensor(expr)

    def _host_call(self, call: ast.Call) -> bool:
        func = call.func
        device = next((k.value for k in call.keywords if k.arg == "device"), None)
        if device is not None:
            return isinstance(device, ast.Constant) and device.value == "cpu"
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if isinstance(func, ast.Attribute) and func.attr in HOST_COPIES:
            return True
        if isinstance(func, ast.Attribute) and func.attr in DEVICE_MOVES:
            return moves_to_the_host(call)
        if dotted(func).startswith("torch."):
            return made_on_host(call) or self._of_host_values(arguments)
        if isinstance(func, ast.Attribute) and self.on_host(func.value):  # `steps.long()`, `idx.sum(0)`
            return all(self._host_or_python(a) for a in arguments)
        return False

    def _of_host_values(self, arguments: list[ast.AST]) -> bool:
        """An op given a host tensor and Python values (not only Python values: `torch.stack(losses)` of a list
        filled with device tensors is on the device)."""
        return any(self.on_host(a) for a in arguments) and all(self._host_or_python(a) for a in arguments)


def moves_to_the_host(call: ast.Call) -> bool:
    """`x.to("cpu")`, `x.to(device="cpu")`, `x.to(torch.device("cpu"))`: a copy to host memory, like `x.cpu()`."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "to"):
        return False
    device = next((k.value for k in call.keywords if k.arg == "device"), call.args[0] if call.args else None)
    if isinstance(device, ast.Call) and dotted(device.func) in {"torch.device", "device"} and device.args:
        device = device.args[0]
    return isinstance(device, ast.Constant) and device.value == "cpu"


def made_on_host(call: ast.Call) -> bool:
    """`torch.zeros(n)`, `torch.Tensor([2, 3])`: a PyTorch factory given no device makes its tensor on the host."""
    device = next((k.value for k in call.keywords if k.arg == "device"), None)
    return dotted(call.func).startswith("torch.") and last_name(call.func) in HOST_FACTORIES and \
        (device is None or (isinstance(device, ast.Constant) and device.value == "cpu"))


def _pairs(targets: list[ast.AST], value: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Each name a binding makes, with the part of the value it gets (`a, b = x.cpu(), y.cpu()`: element by
    element; `tmp, idx = torch.min(...)`: the whole value)."""
    for target in targets:
        if isinstance(target, ast.Name):
            yield target.id, value
        elif isinstance(target, ast.Tuple | ast.List):
            parts = value.elts if isinstance(value, ast.Tuple | ast.List) and \
                len(value.elts) == len(target.elts) else [value] * len(target.elts)
            for element, part in zip(target.elts, parts, strict=True):
                yield from _pairs([element], part)
        elif isinstance(target, ast.Starred):
            yield from _pairs([target.value], value)
