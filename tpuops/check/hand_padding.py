"""Padding written by hand in an input pipeline: a helper that pads a list of examples to the longest of them
(`max_len = max(len(x) for x in inputs)`, then `np.pad`/`F.pad`/`np.zeros((n, max_len))`), called by a collate
function. Every batch then has its own length, and a compiled step a new shape (XLA004), as with a collator's
`padding="longest"`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from tpuops.check.project import FunctionNode, Module, dotted, last_name

# (`torch.LongTensor(len(batch), max_len)` then `.zero_()`: the legacy constructors make the padded batch too)
PAD_CALLS = {"pad", "zeros", "full", "ones", "empty", "new_full", "new_zeros", "stack", "FloatTensor", "LongTensor",
             "IntTensor", "BoolTensor"}
LENGTH_WORDS = ("len", "max")  # a parameter that fixes the length (`maxlen=None`, `max_length`) when given


def longest_padders(modules: Iterable[Module]) -> frozenset[str]:
    """The names of the functions that pad their examples to the longest one."""
    return frozenset(name for module in modules for name, defs in module.defs.items()
                     if any(_pads_to_longest(d) for d in defs))


def collate_names(modules: Iterable[Module]) -> frozenset[str]:
    """Functions handed to a loader as `collate_fn=`."""
    return frozenset(last_name(k.value) for module in modules for call in module.calls for k in call.keywords
                     if k.arg == "collate_fn" and last_name(k.value))


def in_collate_function(node: ast.AST, module: Module, collators: frozenset[str]) -> bool:
    """Inside a collate function: one handed over as `collate_fn=`, one named for it, or a collator class's."""
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode) and (ancestor.name in collators or "collate" in ancestor.name.lower()):
            return True
        if isinstance(ancestor, ast.ClassDef) and "collat" in ancestor.name.lower():
            return True
    return False


def fixes_the_length(call: ast.Call) -> bool:
    """`pad_2D(mels, max_len)`, `pad(x, mel_max_length=n)`: the caller gives the length."""
    return len(call.args) > 1 or any(k.arg and any(w in k.arg.lower() for w in LENGTH_WORDS) for k in call.keywords)


def pads_to_longest_here(call: ast.Call, function: FunctionNode) -> bool:
    """`torch.zeros((n, max_len))`, `F.pad(spec, (0, max_len - spec.size(-1)))` in a collate function, where
    `max_len` is the longest of the batch's examples (or computed from it): the padding itself."""
    if last_name(call.func) not in PAD_CALLS:
        return False
    longest = _longest_names(function)
    return bool(longest) and any(isinstance(n, ast.Name) and n.id in longest for n in ast.walk(call))


def lists_padded_to_longest(function: FunctionNode) -> Iterator[ast.BinOp]:
    """`ids + [pad_id] * (longest - len(ids))`: a Python list padded by hand to the batch's longest example."""
    longest = _longest_names(function)
    for node in ast.walk(function) if longest else ():
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and \
                any(isinstance(side, ast.List) for side in (node.left, node.right)):
            count = node.right if isinstance(node.left, ast.List) else node.left
            if any(isinstance(n, ast.Name) and n.id in longest for n in ast.walk(count)):
                yield node


def longest_taken(function: FunctionNode) -> Iterator[ast.Assign]:
    """`max_len = max(len(x) for x in batch)` in a function that pads to it: where each batch's length is set."""
    if not _pads_to_longest(function) and next(lists_padded_to_longest(function), None) is None:
        return
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                _longest_of(node.value):
            yield node


def _longest_names(function: FunctionNode) -> set[str]:
    """The names bound to the longest of the examples, or to what is computed from it (`padding = (0, longest -
    x.size(-1))`)."""
    assigns = [(node.targets[0].id, node.value) for node in ast.walk(function) if isinstance(node, ast.Assign)
               and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    longest = {name for name, value in assigns if _longest_of(value)}
    while longest:
        more = {name for name, value in assigns if name not in longest and
                any(isinstance(n, ast.Name) and n.id in longest for n in ast.walk(value))}
        if not more:
            break
        longest |= more
    return longest


def _pads_to_longest(function: FunctionNode) -> bool:
    longest = _longest_names(function)
    if not longest:
        return False
    return any(isinstance(node, ast.Call) and pads_to_longest_here(node, function) for node in ast.walk(function)) \
        or _passed_to_padding(function, longest)


def _passed_to_padding(function: FunctionNode, longest: set[str]) -> bool:
    """`pad_data(x, max_len)` where the nested `pad_data` pads: the length handed to a padding call inside."""
    inner = [n for n in ast.walk(function) if isinstance(n, FunctionNode) and n is not function]
    pads = {f.name for f in inner if any(isinstance(c, ast.Call) and last_name(c.func) in PAD_CALLS
                                         for c in ast.walk(f))}
    return any(isinstance(node, ast.Call) and last_name(node.func) in pads and
               any(isinstance(a, ast.Name) and a.id in longest for a in node.args)
               for node in ast.walk(function))


def _longest_of(value: ast.AST) -> bool:
    """`max(len(x) for x in xs)`, `max([x.size(0) for x in xs])`, `max(x.shape[0] for x in xs)`,
    `max(map(len, xs))`, `max(seq_lengths)`, `lengths.max()`, `mel_lengths.amax()`, `max(xs, key=...)`: the longest
    of the examples."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in {"max", "amax"} \
            and not value.args and "len" in dotted(value.func.value).lower():
        return True
    if isinstance(value, ast.Subscript):  # `max(batch, key=...)[0]`: a part of the longest example
        return _longest_of(value.value)
    if not (isinstance(value, ast.Call) and last_name(value.func) == "max" and len(value.args) == 1):
        return False
    if any(k.arg == "key" for k in value.keywords):
        return True  # `max(batch, key=lambda item: item[0].size(0))`: the longest example itself
    argument = value.args[0]
    if isinstance(argument, ast.Name):
        return "len" in argument.id.lower()  # `max(seq_lengths)`: the lengths of the batch's examples
    if isinstance(argument, ast.Call) and last_name(argument.func) == "map" and argument.args:
        return last_name(argument.args[0]) == "len"
    if isinstance(argument, ast.GeneratorExp | ast.ListComp):
        return _length_like(argument.elt)
    return False


def _length_like(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Call):
        return last_name(expr.func) in {"len", "size"}
    return isinstance(expr, ast.Subscript) and (
        (isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape") or
        (isinstance(expr.value, ast.Call) and last_name(expr.value.func) == "shape"))
