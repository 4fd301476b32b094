"""Whether anything the trainer's command runs refers to a function or a class. A file rule's finding (a padding
call, float16) inside a function that no code of the command's scope names, nor a class it builds, runs only if
something reaches it by a name the source does not hold (a registry, `getattr`): a note the run may settle. (Asked
only when the command names its scripts: without them, any code may be called from outside.)"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from tpuops.check.project import FunctionNode, Module, Project

# Methods a framework calls by their names: never named by the trainer's code, yet they run.
FRAMEWORK_HOOKS = {"forward", "call", "build", "train_step", "test_step", "predict_step", "training_step",
                   "validation_step", "configure_optimizers", "setup", "prepare_data", "collate", "compute_loss",
                   "get_config", "from_config", "main", "run", "step"}
HOOK_PREFIXES = ("on_", "_on_", "__")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def referenced_names(project: Project) -> frozenset[str]:
    """Every name the project's code reads (a call, a reference, an attribute) or writes in a string (a registry's
    "models.Net", a `getattr(self, "encode")`)."""
    names: set[str] = set()
    for module in project.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                names.update(WORD.findall(node.value))
    return frozenset(names)


def unreferenced_owner(node: ast.AST, module: Module, referenced: frozenset[str]) -> str | None:
    """The innermost function or class around `node` that nothing names, if one is (module-level code runs on
    import; a decorated definition, a framework hook or a dunder method is taken to be called)."""
    for owner in _owners(node, module):
        if owner.decorator_list or owner.name in FRAMEWORK_HOOKS or owner.name.startswith(HOOK_PREFIXES):
            continue
        if owner.name not in referenced:
            return owner.name
    return None


def _owners(node: ast.AST, module: Module) -> Iterator[FunctionNode | ast.ClassDef]:
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode | ast.ClassDef):
            yield ancestor
