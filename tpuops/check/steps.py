"""A compiled region of the trainer, as the lint names it to the user."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tpuops.check.project import Module

Hit = tuple[ast.AST, str]  # a node a rule flags, and what it says of it

KIND_WORDS = {"jax": "JAX", "tf": "TensorFlow", "keras": "TensorFlow (Keras)", "torch": "PyTorch/XLA",
              "lazy": "PyTorch/XLA"}


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
    # True: reached through a call in a step's code (a helper it calls, a model's forward, an optimizer's step),
    # so only guessed to run every step, on device tensors; not one a step hands to a transform (`scan(body)`)
    called: bool = False
    # False: the source alone cannot tell that it runs on the TPU every step (a loop that runs the model with no
    # step end: evaluation, or a loop over split names; a function that ends a step, called who knows how often)
    sure: bool = True

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    @property
    def where(self) -> str:
        """The step as a finding's message names it."""
        if self.kind == "lazy":
            return f"PyTorch/XLA step `{self.name}`" if not self.name.startswith("loop") else \
                f"the PyTorch/XLA step loop at line {self.line}"
        return f"compiled step `{self.name}`"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "framework": KIND_WORDS[self.kind], "how": self.how,
                "file": self.module.rel if self.module else None, "line": self.line or None}
