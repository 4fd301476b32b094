"""The file rules of `tpuops check` (XLA004-007): each looks at a whole module, with the context that decides
whether a pattern is a hazard there (`settings.py`: where a setting's value comes from)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from tpuops.check.hand_padding import (
    fixes_the_length,
    in_collate_function,
    lists_padded_to_longest,
    longest_taken,
    pads_to_longest_here,
)
from tpuops.check.project import FunctionNode, Module, dotted, last_name
from tpuops.check.regions import mentions_gpu, mentions_tpu
from tpuops.check.settings import Settings
from tpuops.check.steps import Hit
from tpuops.check.wrappers import keyword as _keyword

COLLATORS = {"DataCollatorWithPadding", "DataCollatorForLanguageModeling", "DataCollatorForSeq2Seq",
             "DataCollatorForTokenClassification", "DataCollatorForWholeWordMask"}
FP16_ATTRIBUTES = {"torch.float16", "torch.half", "jnp.float16", "jax.numpy.float16", "tf.float16", "np.float16"}
TEXT_AND_IMAGE_PREPARERS = ("Tokenizer", "TokenizerFast", "Processor", "FeatureExtractor", "ImageProcessor")
FP16_STRINGS = {"mixed_float16", "float16", "fp16", "half"}
F16_VARIABLE = "XLA_USE_F16"  # PyTorch/XLA's switch: every float tensor stored as float16 on the device
DTYPE_KEYWORDS = {"dtype", "torch_dtype", "param_dtype", "compute_dtype", "policy", "mixed_precision"}
DTYPE_SETTERS = {"to", "astype", "type", "autocast", "set_global_policy", "Policy", "set_policy",
                 "set_default_dtype", "set_dtype_policy", "DTypePolicy"}
FP16_FLAGS = {"fp16", "half_precision", "use_fp16"}
SPATIAL_WORDS = ("conv", "pool", "block", "layer", "resnet", "unet")  # callees whose `padding` pads feature maps
# Lightning 2's precision strings for float16 (the integer 16 of Lightning 1 meant bfloat16 on a TPU)
LIGHTNING_FP16 = {"16", "16-mixed", "16-true"}
NODE_HOST_CALLS = {"to_tf_dataset", "prepare_tf_dataset", "from_generator", "numpy_function", "py_function"}
EXPORT_CALLS = {"save_pretrained", "save", "save_file", "push_to_hub", "save_model"}
TRAINING_CALLS = {"backward", "apply_gradients", "value_and_grad", "grad", "optimizer_step", "fit", "minimize",
                  "step", "train", "train_step", "GradientTape"}
TF_DATA_READERS = {"TextLineDataset", "TFRecordDataset", "FixedLengthRecordDataset", "list_files"}


def pad_longest(module: Module, settings: Settings) -> Iterator[Hit]:
    fixed_blocks = _fixed_blocks(module, settings)
    for node in module.calls:
        padding = _keyword(node, "padding")
        values = settings.values(padding, module) if padding is not None else frozenset()
        if any(v is True or v == "longest" for v in values) and not _fixed_data(module) and \
                not _spatial_padding(node) and not _aborts(node, module) and \
                not _padded_again(node, module) and \
                not _runs_once(node, module) and not _bucketed(node, module, settings) and \
                not _fixed_features(node, module):  # module-level code outside any loop pads one batch: one shape
            shown = ast.unparse(padding) if padding is not None else ""
            source = "" if isinstance(padding, ast.Constant) else " (its default)"
            yield node, f"padding={shown} pads each batch to its longest example{source}"
        elif padding is None and _tokenizer_pad(node) and not _fixed_data(module) and \
                _unset(_keyword(node, "pad_to_multiple_of")):
            yield node, "tokenizer.pad() without padding= pads each batch to its longest example (padding=True " \
                        "is its default)"
        elif last_name(node.func) in COLLATORS and not fixed_blocks and _unset(_keyword(node, "pad_to_multiple_of")):
            yield node, f"{last_name(node.func)} without pad_to_multiple_of pads each batch to its longest example"
        elif last_name(node.func) == "padded_batch" and len(node.args) < 2 and \
                _unset(_keyword(node, "padded_shapes")):
            yield node, "padded_batch without padded_shapes pads each batch to its longest element"
        elif last_name(node.func) == "pad_sequence" and settings.torch_xla and not _in_forward(node, module) and \
                not _padded_again(node, module):
            yield node, "pad_sequence pads each batch to its longest sequence"
        elif settings.torch_xla and in_collate_function(node, module, settings.collators) and \
                _pads_in_place(node, module):
            yield node, f"{last_name(node.func)}() to the longest example of the batch pads each batch to its own " \
                        "length"
        elif last_name(node.func) in settings.longest_padders and settings.torch_xla and \
                in_collate_function(node, module, settings.collators) and not fixes_the_length(node):
            yield node, f"{last_name(node.func)}() pads the batch's examples to the longest of them: a new length " \
                        "per batch"
    if settings.torch_xla:
        yield from _lists_padded_in_collate(module, settings)


def _lists_padded_in_collate(module: Module, settings: Settings) -> Iterator[Hit]:
    seen: set[int] = set()
    for function in (d for defs in module.defs.values() for d in defs):
        for node in lists_padded_to_longest(function):
            if id(node) not in seen and in_collate_function(node, module, settings.collators):
                seen.add(id(node))
                yield node, "a list padded by hand to the longest example of the batch (`[pad] * (longest - " \
                            "len(x))`) gives each batch its own length"
        for assign in longest_taken(function):
            if id(assign) not in seen and in_collate_function(assign, module, settings.collators):
                seen.add(id(assign))
                yield assign, f"{ast.unparse(assign.targets[0])} takes the batch's longest example, and the collate " \
                              "function pads to it: a new length per batch"


def _pads_in_place(call: ast.Call, module: Module) -> bool:
    function = module.enclosing_function(call)
    return function is not None and pads_to_longest_here(call, function)


def _spatial_padding(call: ast.Call) -> bool:
    """`conv_block(x, 64, padding=True)`, `pool_block(..., padding=True)`: a network block's "same" padding of its
    feature maps, not a batch padded to its longest example."""
    return any(word in last_name(call.func).lower() for word in SPATIAL_WORDS)


def _aborts(node: ast.AST, module: Module) -> bool:
    """The statements around the call end in `raise` (a diagnostics branch: "compute the max length and set
    it"): no training runs past it."""
    child = node
    for ancestor in module.ancestors(node):
        if isinstance(child, ast.stmt):
            for body in (getattr(ancestor, "body", None), getattr(ancestor, "orelse", None)):
                if isinstance(body, list) and any(statement is child for statement in body):
                    return isinstance(body[-1], ast.Raise)
        child = ancestor
    return False


def _in_forward(node: ast.AST, module: Module) -> bool:
    """Inside a model's forward: a step's own ops (the step rules' business), not the input pipeline."""
    function = module.enclosing_function(node)
    return function is not None and function.name.startswith("forward")


def _bucketed(call: ast.Call, module: Module, settings: Settings) -> bool:
    """`pad_to_multiple_of=` given a value that can be set (`self.pad_input_to_multiple_of`, 64): batches fall
    into a few lengths, which the run mode counts if they are still too many."""
    multiple = _keyword(call, "pad_to_multiple_of")
    return not _unset(multiple) and None not in settings.values(multiple, module)


def _fixed_features(call: ast.Call, module: Module) -> bool:
    """A Whisper feature extractor's `pad`: its log-mel features are already 3000 frames long, so padding them
    to the longest changes no shape."""
    return isinstance(call.func, ast.Attribute) and "feature_extractor" in dotted(call.func.value) and \
        "whisper" in module.source.lower()


def _fixed_blocks(module: Module, settings: Settings) -> bool:
    """The module cuts its data to fixed blocks (group_texts) or pads to max_length: its collators pad nothing."""
    if _fixed_data(module):
        return True
    for node in module.calls:
        padding = _keyword(node, "padding")
        if padding is not None and settings.values(padding, module) == frozenset(["max_length"]):
            return True
    return False


def _runs_once(node: ast.Call, module: Module) -> bool:
    owner, loop = module.context[id(node)]
    return owner is module.tree and loop is None


def _tokenizer_pad(node: ast.Call) -> bool:
    """`tokenizer.pad(features)` / `self.processor.tokenizer.pad(...)`: a Hugging Face tokenizer's pad."""
    return isinstance(node.func, ast.Attribute) and node.func.attr == "pad" and \
        "tokenizer" in dotted(node.func.value).lower()


def _fixed_data(module: Module) -> bool:
    """The examples already have one length: cut into blocks (group_texts), or parsed from fixed-length
    tf.data features (FixedLenFeature([max_length]))."""
    return any("group_texts" in name for name in module.defs) or \
        any(last_name(c.func) == "FixedLenFeature" and _shaped(c) for c in module.calls)


def _shaped(call: ast.Call) -> bool:
    shape = call.args[0] if call.args else _keyword(call, "shape")
    return isinstance(shape, ast.List | ast.Tuple) and bool(shape.elts)


def _padded_again(node: ast.Call, module: Module) -> bool:
    """The function pads the result again by hand to a set length (it reads the length, `.shape[1]`, and
    pads/concatenates up to a fixed one), so the longest-in-batch length does not reach a compiled function."""
    function = module.enclosing_function(node)
    if function is None:
        return False
    parts = list(ast.walk(function))
    reads_length = any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and
                       n.value.attr == "shape" for n in parts)
    pads = any(isinstance(n, ast.Call) and last_name(n.func) in {"pad", "full", "concatenate"} for n in parts)
    return reads_length and pads


def fp16(module: Module, settings: Settings) -> Iterator[Hit]:
    if _export_module(module):
        return
    hits = [hit for node in module.calls if (hit := _fp16_call(node, module, settings)) is not None]
    hits += [(node, f"{F16_VARIABLE}={value!r} makes PyTorch/XLA store every float tensor as float16: TPUs compute "
                    "in bfloat16 (XLA_USE_BF16)") for node, value in _f16_environment(module)]
    for hit in hits:
        if not _behind_fp16_switch(hit[0], module, settings):
            yield hit


def _f16_environment(module: Module) -> Iterator[tuple[ast.AST, str]]:
    """`os.environ["XLA_USE_F16"] = "1"`, `os.environ.setdefault("XLA_USE_F16", "1")`, `os.putenv(...)`: set on."""
    for node in module.assigns:
        for target in node.targets:
            if isinstance(target, ast.Subscript) and dotted(target.value).endswith("environ") and \
                    isinstance(target.slice, ast.Constant) and target.slice.value == F16_VARIABLE:
                yield from _switched_on(node, node.value)
    for call in module.calls:
        if last_name(call.func) in {"setdefault", "putenv"} and len(call.args) == 2 and \
                isinstance(call.args[0], ast.Constant) and call.args[0].value == F16_VARIABLE:
            yield from _switched_on(call, call.args[1])


def _switched_on(node: ast.AST, value: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    if isinstance(value, ast.Constant) and str(value.value).strip().lower() in {"1", "true", "yes"}:
        yield node, str(value.value)


def _export_module(module: Module) -> bool:
    """A conversion or export script: it saves a model and trains nothing, so float16 there is a storage dtype."""
    names = {last_name(c.func) for c in module.calls}
    return bool(names & EXPORT_CALLS) and not names & TRAINING_CALLS


def _fp16_call(node: ast.Call, module: Module, settings: Settings) -> Hit | None:
    func = node.func
    if _stored(node):
        return None
    if isinstance(func, ast.Attribute) and func.attr == "half" and not node.args:
        return node, "`.half()` converts to float16: TPUs compute in bfloat16"
    for keyword in node.keywords:
        if keyword.arg in DTYPE_KEYWORDS and _fp16_value(keyword.value):
            shown = _shown(keyword.value) if isinstance(keyword.value, ast.Attribute) else \
                f"{keyword.arg}={_shown(keyword.value)}"
            return keyword.value, f"{shown}: TPUs compute in bfloat16"
        if keyword.arg == "precision" and isinstance(keyword.value, ast.Constant) and \
                isinstance(keyword.value.value, str) and keyword.value.value in LIGHTNING_FP16:
            return keyword.value, f"precision={keyword.value.value!r} computes in float16: TPUs compute in bfloat16"
        if keyword.arg in FP16_FLAGS and any(v is True for v in settings.values(keyword.value, module)):
            return node, f"{keyword.arg}={ast.unparse(keyword.value)}: TPUs compute in bfloat16 (bf16=True)"
        if keyword.arg == "mixed_precision" and not isinstance(keyword.value, ast.Constant) and \
                "fp16" in settings.values(keyword.value, module):
            # `Accelerator(mixed_precision=args.mixed_precision)` with `--mixed_precision` defaulting to "fp16"
            return keyword.value, f"mixed_precision={ast.unparse(keyword.value)} is \"fp16\" unless the command " \
                                  "says otherwise: TPUs compute in bfloat16 (\"bf16\")"
    if last_name(func) in DTYPE_SETTERS or (last_name(func) == "scope" and "mixed_precision" in dotted(func)):
        for arg in node.args:
            if _fp16_value(arg):
                return arg, f"{_shown(arg)}: TPUs compute in bfloat16"
    return None


def _stored(call: ast.Call) -> bool:
    """`preds.detach().to(torch.float16)`, `x.cpu().half()`: a result kept in float16 to save memory, not a
    dtype anything computes in; so are NumPy's float16 arrays (`np.zeros(n, dtype=np.float16)`,
    `logits.astype(np.float16)`), which live on the host, and what a tokenizer or processor is given."""
    if _numpy_call(call) and any(dotted(n) in {"np.float16", "numpy.float16"} for n in ast.walk(call)):
        return True
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    if receiver is not None and last_name(receiver).endswith(TEXT_AND_IMAGE_PREPARERS):
        return True  # `AutoTokenizer.from_pretrained(name, dtype=jnp.float16)`: a tokenizer computes nothing
    while isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
        if receiver.func.attr in {"detach", "cpu", "numpy"}:
            return True
        receiver = receiver.func.value
    return False


def _numpy_call(call: ast.Call) -> bool:
    return dotted(call.func).split(".")[0] in {"np", "numpy"} or last_name(call.func) == "astype"


def _fp16_value(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Attribute):
        return dotted(expr) in FP16_ATTRIBUTES
    return isinstance(expr, ast.Constant) and expr.value in FP16_STRINGS


def _shown(expr: ast.AST) -> str:
    return f"`{dotted(expr)}`" if isinstance(expr, ast.Attribute) else repr(getattr(expr, "value", ""))


def _behind_fp16_switch(node: ast.AST, module: Module, settings: Settings) -> bool:
    """Inside `if args.fp16:` / `if precision == "fp16":` / `if FLAGS.use_mixed_precision:` whose setting is off
    by default (a user's choice), inside `if torch.cuda.is_available():` / `if device == "gpu":` or the `else`
    of `if use_tpu:` (branches a TPU never takes), or in a helper named for float16 (`def apply_half(t)`) or for
    the GPU (`def setup_gpu()`), which runs where the code chooses float16 or a GPU."""
    child = node
    for ancestor in module.ancestors(node):
        if isinstance(ancestor, FunctionNode) and any(w in ancestor.name.lower() for w in ("half", "fp16", "gpu",
                                                                                          "cuda")):
            return True
        if isinstance(ancestor, ast.If):
            if mentions_gpu(ancestor.test) or (mentions_tpu(ancestor.test) and _in_orelse(child, ancestor)):
                return True
            switch = _fp16_switch(ancestor.test, module, settings)
            if switch is not None:
                return switch
        child = ancestor
    return False


def _fp16_switch(test: ast.AST, module: Module, settings: Settings) -> bool | None:
    """Whether an `if` test is a switch that is off by default (None: not a switch)."""
    for part in ast.walk(test):
        name = _setting_name(part).lower()
        if any(w in name for w in ("fp16", "half", "float16", "mixed")):
            defaults = settings.values(part, module)
            if "mixed" not in name:
                return not any(v is True for v in defaults)
            if defaults and not defaults - {False, None}:
                return True  # `if FLAGS.use_mixed_precision:`, off by default
            continue
        if isinstance(part, ast.Compare) and any(_fp16_value(c) for c in [part.left, *part.comparators]):
            setting = next((c for c in [part.left, *part.comparators] if not _fp16_value(c)), None)
            defaults = settings.values(setting, module) if setting is not None else frozenset()
            return not any(isinstance(v, str) and v in FP16_STRINGS for v in defaults)
    return None


def _setting_name(expr: ast.AST) -> str:
    """`args.fp16` / `fp16` -> "fp16"; `config["G_fp16"]` -> "G_fp16"; "" for anything else."""
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        return expr.slice.value
    return last_name(expr) if isinstance(expr, ast.Name | ast.Attribute) else ""


def _in_orelse(child: ast.AST, branch: ast.If) -> bool:
    return any(child is n for n in branch.orelse)


def node_host_input(module: Module, settings: Settings) -> Iterator[Hit]:
    for node in module.calls:
        if last_name(node.func) in NODE_HOST_CALLS:
            yield node, f"`{last_name(node.func)}` runs Python on this VM, not on the legacy Node's TPU host"


def node_local_path(module: Module, settings: Settings) -> Iterator[Hit]:
    for node in module.calls:
        if last_name(node.func) in TF_DATA_READERS:
            for arg in node.args[:1]:
                for text in _string_constants(arg):
                    if not text.startswith("gs://"):
                        yield node, f"`{last_name(node.func)}` reads the local path {text!r}"


def _string_constants(arg: ast.AST) -> list[str]:
    items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _unset(value: ast.AST | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and value.value is None)


FILE_RULES: dict[str, Callable[[Module, Settings], Iterator[Hit]]] = {
    "XLA004": pad_longest, "XLA005": fp16, "XLA006": node_host_input, "XLA007": node_local_path,
}
