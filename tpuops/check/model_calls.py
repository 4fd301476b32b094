"""Which calls run the model: what makes a loop of PyTorch/XLA code an evaluation loop (the model runs on the device
each iteration) when nothing in it ends a step."""

from __future__ import annotations

import ast
import re

from tpuops.check.project import MOVES, FunctionNode, Module, Project, dotted, last_name
from tpuops.check.regions import each_pass

# `model_path`, `model_name`, `model_cfg`: what names a model, not the model
NOT_A_MODEL = {"path", "paths", "name", "names", "dir", "file", "id", "version", "config", "cfg", "args", "kwargs",
               "type", "url", "size", "list", "dict", "str", "from", "to"}
NETWORK_WORDS = {"generator", "discriminator"}  # (and any word ending in "net": `net`, `netG`, `unet`, `resnet`)
# a model's methods that look after it (its weights, its place, its mode) rather than run it
MODEL_UPKEEP = {"parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "buffers",
                "named_buffers", "state_dict", "load_state_dict", "to", "cuda", "cpu", "eval", "train", "zero_grad",
                "requires_grad_", "apply", "half", "float", "double", "bfloat16", "tie_weights", "num_parameters",
                "print_trainable_parameters", "gradient_checkpointing_enable", "resize_token_embeddings"}
UPKEEP_PREFIXES = ("get_", "set_", "save", "load", "register_", "add_", "enable_", "disable_", "freeze", "unfreeze")
NOT_LAYERS = ("token", "processor", "config", "vocab", "extractor", "args", "device", "logger", "writer")


def runs_model(body: list[ast.stmt], module: Module, depth: int = 0, batch: frozenset[str] = frozenset(),
               project: Project | None = None, counted: bool = False) -> bool:
    """The statements (not an inner loop's) call the model, `model(x)`, `self.model(**batch)`, `self(**data)` (a
    Module's own method), a method of the model or of a part of it (`model.tta(batch)`,
    `self.model.decoder.next_logits(x)`; not in a loop that `counted` a sampler's levels), a module built and moved
    to the device (`encoder = Encoder().to(device)` ... `encoder(x)`), a method of the class (or of a base) that
    does (`self.validate_one_step(batch)`), or a helper given the model and the loop's `batch` (`get_loss(model,
    batch, step)`, `self.loss_func(self.model, data, labels)`; not `train_epoch(model, loader)`, which runs its own
    loop)."""
    return any(isinstance(node, ast.Call) and _model_call(node, module, depth, batch, project, counted)
               for node in each_pass(body))


def _switched_mode(name: str, function: FunctionNode | None) -> bool:
    """`name.eval()` or `name.train()` in the function: a torch module."""
    return function is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in {"eval", "train"} and
        not n.args and isinstance(n.func.value, ast.Name) and n.func.value.id == name for n in ast.walk(function))


def _moved_module(name: str, call: ast.Call, module: Module) -> bool:
    """`name` is bound, in the call's function or the module's own code, to an instance moved to a device
    (`text_encoder = TextEncoder().to(device)`): a torch module (a tensor is made with a function, not a class)."""
    for scope in {module.enclosing_function(call), None}:
        for assign in module.assigns_to(name, scope):
            value, moved = assign.value, False
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
                    value.func.attr in MOVES and isinstance(value.func.value, ast.Call):
                value, moved = value.func.value, True  # Encoder(...).to(device), Encoder(...).cuda().train()
            built = last_name(value.func) if isinstance(value, ast.Call) else ""
            if moved and built[:1].isupper() and not built.endswith("Tensor"):
                return True
    return False


def _a_model(name: str) -> bool:
    """`model`, `self.ema_model`, `teacher_model`, a GAN's `generator` and `netD`, a `unet`; not `model_path`
    nor `num_models`."""
    words = [w.lower() for w in re.split(r"_|(?<=[a-z])(?=[A-Z])", name) if w]
    named = "model" in name.lower() or any(w in NETWORK_WORDS or w.endswith("net") for w in words)
    return named and bool(words) and words[-1] not in NOT_A_MODEL and words[0] != "num"


def _a_model_part(receiver: ast.AST) -> bool:
    """`model`, `self.model.decoder`: the model or a part of it; not what it carries beside its layers
    (`model.tokenizer`, `model.config`)."""
    parts = dotted(receiver).split(".")
    return any(_a_model(part) for part in parts) and not any(word in parts[-1].lower() for word in NOT_LAYERS)


def _runs_it(method: str) -> bool:
    """A model's method that runs it (`generate`, `tta`, `predict`), not one that looks after it."""
    return method not in MODEL_UPKEEP and not method.startswith(UPKEEP_PREFIXES)


def _model_call(call: ast.Call, module: Module, depth: int, batch: frozenset[str], project: Project | None,
                counted: bool) -> bool:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "self":
        return True
    if isinstance(func, ast.Name | ast.Attribute) and _a_model(last_name(func)) and \
            not (isinstance(func, ast.Name) and func.id in module.defs):  # `download_model(url)` is a function
        return True
    if not counted and isinstance(func, ast.Attribute) and _runs_it(func.attr) and _a_model_part(func.value):
        return True  # `self.model.decoder.decode_step(x)`, not in a loop counting levels of a sampler (`counted`)
    given = {last_name(a) for a in call.args if isinstance(a, ast.Name | ast.Attribute)}
    if any(_a_model(name) for name in given) and {a.id for a in call.args if isinstance(a, ast.Name)} & batch:
        return True
    if isinstance(func, ast.Name) and (_switched_mode(func.id, module.enclosing_function(call)) or
                                       _moved_module(func.id, call, module)):
        return True  # `ema.eval()` ... `ema(images)`: a model by what is done with it
    if depth < 2 and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            func.value.id == "self":  # (a base's method too, `self.generate(...)` of a trainer's base class)
        methods = project.functions(func, module) if project is not None else \
            [(module, d) for d in module.defs.get(func.attr, ())]
        return any(runs_model(d.body, home, depth + 1, project=project, counted=counted) for home, d in methods)
    return False
