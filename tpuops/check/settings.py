"""Where a setting's value comes from, followed with `ast`: a literal, a local or module-level name, a function
argument's default, a dataclass field (`padding: str = field(default="longest")`, read as `self.padding` or
`data_args.padding`), an argparse option (`--fp16`, store_true: off by default), an absl flag
(`flags.DEFINE_bool("use_mixed_precision", False, ...)`) or a config dict
(`CONFIG["padding"]`, `vars(args)["fp16"]`). The answer is the set of values it can have by default (empty:
unknown), or the values the trainer's command passes (`python train.py --fp16`), which decide where given.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tpuops.check.entries import WORDS
from tpuops.check.hand_padding import collate_names, longest_padders
from tpuops.check.project import TORCH_XLA_ROOTS, FunctionNode, Module, Project, defaults_of, last_name

UNKNOWN: frozenset[object] = frozenset()
# How scripts name the dataclasses their command line fills (HfArgumentParser's DataTrainingArguments & co).
ARGUMENT_CLASS_ENDINGS = ("Arguments", "Args", "Config", "Options")


@dataclass
class Settings:
    """The defaults the code directory declares, by setting name."""

    fields: dict[str, dict[str, set[object]]] = field(default_factory=dict)  # class -> field -> defaults
    options: dict[str, set[object]] = field(default_factory=dict)  # argparse dest -> defaults
    configs: dict[tuple[str, str], set[object]] = field(default_factory=dict)  # (dict name, key) -> values
    made: dict[str, list[tuple[Module, ast.Call]]] = field(default_factory=dict)  # class -> where it is built
    torch_xla: bool = False  # the project trains with PyTorch/XLA (its collate functions feed the TPU)
    longest_padders: frozenset[str] = frozenset()  # its functions that pad examples to the longest (hand_padding)
    collators: frozenset[str] = frozenset()  # its functions handed over as collate_fn=

    given: Mapping[str, frozenset[object]] = field(default_factory=dict)  # what the trainer's command passes

    @classmethod
    def of(cls, project: Project, given: Mapping[str, frozenset[object]] | None = None) -> Settings:
        """The code's defaults; `given`: the options the trainer's command passes (`--fp16`), which win."""
        settings = cls(given=given or {})
        for module in project.modules:
            for cls_node in module.classes.values():
                settings._class_fields(cls_node)
        classes = set(settings.fields)
        settings.torch_xla = any(module.imports_any(TORCH_XLA_ROOTS) for module in project.modules) or \
            _lightning_on_tpu(project) or trainer_on_tpu(project.modules)
        settings.longest_padders = longest_padders(project.modules)
        settings.collators = collate_names(project.modules)
        for module in project.modules:
            for call in module.calls:
                if last_name(call.func) == "add_argument":
                    settings._option(call)
                elif last_name(call.func) == "add_subparsers":
                    settings._subcommands(call, module)
                elif last_name(call.func).startswith("DEFINE_"):
                    settings._absl_flag(call)
                elif last_name(call.func) in classes:
                    settings.made.setdefault(last_name(call.func), []).append((module, call))
            for node in module.tree.body:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                    for target in (t for t in node.targets if isinstance(t, ast.Name)):
                        for key, value in zip(node.value.keys, node.value.values, strict=False):
                            if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                                settings.configs.setdefault((target.id, str(key.value)), set()).add(value.value)
        return settings

    def _class_fields(self, node: ast.ClassDef) -> None:
        fields = self.fields.setdefault(node.name, {})
        for stmt in node.body:
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else \
                stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
            if not isinstance(target, ast.Name) or stmt.value is None:
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and last_name(value.func) == "field":
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            if isinstance(value, ast.Constant):
                fields.setdefault(target.id, set()).add(value.value)

    def _option(self, call: ast.Call) -> None:
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        dest = next((k.value.value for k in call.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                    None)
        names = [dest] if dest else [f.lstrip("-").replace("-", "_") for f in flags if f.startswith("--")][:1]
        keywords = {k.arg: k.value for k in call.keywords}
        action = keywords.get("action")
        if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
            default: object = action.value == "store_false"
        elif isinstance(keywords.get("default"), ast.Constant):
            default = keywords["default"].value  # type: ignore[union-attr]
        else:
            default = None
        for name in names:
            self.options.setdefault(name, set()).add(default)

    def _subcommands(self, call: ast.Call, module: Module) -> None:
        """`sub = parser.add_subparsers(dest="command")` with `sub.add_parser("train")` & co: `args.command` is
        the subcommand the trainer's command names (`python main.py train`), else any of them."""
        dest = next((k.value.value for k in call.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                    None)
        holder = module.parents.get(id(call))
        if not isinstance(dest, str) or not (isinstance(holder, ast.Assign) and len(holder.targets) == 1 and
                                             isinstance(holder.targets[0], ast.Name)):
            return
        names = {c.args[0].value for c in module.calls if last_name(c.func) == "add_parser" and c.args and
                 isinstance(c.args[0], ast.Constant) and isinstance(c.func, ast.Attribute) and
                 isinstance(c.func.value, ast.Name) and c.func.value.id == holder.targets[0].id}
        self.options.setdefault(dest, set()).update(names)
        chosen = names & self.given.get(WORDS, frozenset())
        if chosen and dest not in self.given:
            self.given = {**self.given, dest: frozenset(chosen)}

    def _absl_flag(self, call: ast.Call) -> None:
        """`flags.DEFINE_bool("use_mixed_precision", False, "...")`: read as `FLAGS.use_mixed_precision`."""
        arguments = [*call.args, *(k.value for k in call.keywords if k.arg in {"name", "default"})]
        if len(arguments) >= 2 and isinstance(arguments[0], ast.Constant) and isinstance(arguments[1], ast.Constant):
            self.options.setdefault(str(arguments[0].value), set()).add(arguments[1].value)

    # ------------------------------------------------------------------------------------------ values

    def values(self, expr: ast.AST, module: Module, depth: int = 0) -> frozenset[object]:  # noqa: C901
        """The values `expr` can have by default, as far as the code says."""
        if depth > 4:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return frozenset([expr.value])
        if isinstance(expr, ast.IfExp):
            body = self.values(expr.body, module, depth + 1)
            if ast.dump(expr.test) == ast.dump(expr.body):  # `x if x else fallback`: x is set where it is chosen
                body = frozenset(v for v in body if v)
            return body | self.values(expr.orelse, module, depth + 1)
        if isinstance(expr, ast.Name):
            return self._name(expr, module, depth)
        if isinstance(expr, ast.Attribute):
            return self._attribute(expr, module, depth)
        read = attribute_read(expr)
        if read is not None:  # `getattr(config, "DEBUG", False)`: config.DEBUG where it is set, else the default
            found = self._attribute(read, module, depth)
            return found | self.values(expr.args[2], module, depth + 1) if found else UNKNOWN
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name) and \
                isinstance(expr.slice, ast.Constant):
            key = str(expr.slice.value)
            if key in self.given:
                return self.given[key]
            return frozenset(self.configs.get((expr.value.id, key), ())) or \
                frozenset(self.options.get(key, ()))  # `config = vars(parser.parse_args())`; config["fp16"]
        return UNKNOWN

    def _name(self, name: ast.Name, module: Module, depth: int) -> frozenset[object]:
        iterated = self._iterated(name, module, depth)
        if iterated:
            return iterated
        function = module.enclosing_function(name)
        found: set[object] = set()
        if function is not None:
            default = defaults_of(function).get(name.id)
            if default is not None:
                found |= self.values(default, module, depth + 1)
        candidates = module.assigns if function is not None else module.assigns_to(name.id, None)
        for node in candidates:  # in a function: its own and its nested functions' assignments, as before
            if (function is None or function.lineno <= node.lineno <= (function.end_lineno or 0)) and \
                    any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets):
                found |= self.values(node.value, module, depth + 1)
        if not found and function is not None:
            for node in module.tree.body:
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id
                                                        for t in node.targets):
                    found |= self.values(node.value, module, depth + 1)
        return frozenset(found)

    def _iterated(self, name: ast.Name, module: Module, depth: int) -> frozenset[object]:
        """`for split in SPLITS:` with `SPLITS = ["train", "dev"]` (or the list written in the loop): the name takes
        every element in turn, so each branch an element picks runs."""
        loop = next((a for a in module.ancestors(name) if isinstance(a, ast.For) and
                     isinstance(a.target, ast.Name) and a.target.id == name.id), None)
        if loop is None:
            return UNKNOWN
        elements = loop.iter
        if isinstance(elements, ast.Name):
            bound = [n.value for n in module.assigns_to(elements.id, module.enclosing_function(loop)) or
                     module.assigns_to(elements.id, None)]
            elements = bound[0] if len(bound) == 1 else elements
        if not isinstance(elements, ast.List | ast.Tuple | ast.Set):
            return UNKNOWN
        found = [self.values(e, module, depth + 1) for e in elements.elts]
        return frozenset().union(*found) if found and all(found) else UNKNOWN

    def _attribute(self, attribute: ast.Attribute, module: Module, depth: int) -> frozenset[object]:
        """`self.padding`: the enclosing class's field; `args.padding`: the annotated class, else any field or
        option of that name."""
        if attribute.attr in self.given:
            return self.given[attribute.attr]
        owner = attribute.value
        if isinstance(owner, ast.Name) and owner.id == "self":
            cls = module.enclosing_class(attribute)
            if cls is not None and attribute.attr in self.fields.get(cls.name, {}):
                return self._field(cls.name, attribute.attr, depth)
        if isinstance(owner, ast.Name):
            annotated = _annotation(module.enclosing_function(attribute), owner.id)
            if annotated in self.fields and attribute.attr in self.fields[annotated]:
                return frozenset(self.fields[annotated][attribute.attr])
        found = set(self.options.get(attribute.attr, ()))
        arguments = [f for c, f in self.fields.items() if c.endswith(ARGUMENT_CLASS_ENDINGS) and attribute.attr in f]
        for fields in arguments or list(self.fields.values()):  # `data_args.x`: the argument dataclasses' x first
            found |= fields.get(attribute.attr, set())
        return frozenset(found)

    def _field(self, cls: str, name: str, depth: int) -> frozenset[object]:
        """A dataclass field's values: what the code building the class passes for it (`Collator(padding=
        "longest")`), and its default where a construction leaves it out."""
        found: set[object] = set()
        made = self.made.get(cls, [])
        for module, call in made:
            passed = next((k.value for k in call.keywords if k.arg == name), None)
            if passed is None or _passed_on(passed, name):  # left out, or the field itself passed on (a copy)
                found |= self.fields[cls][name]
            else:
                found |= self.values(passed, module, depth + 1)  # a class built from itself ends here
        return frozenset(found if made else self.fields[cls][name])


def _passed_on(passed: ast.AST, name: str) -> bool:
    return isinstance(passed, ast.Attribute) and passed.attr == name and \
        isinstance(passed.value, ast.Name) and passed.value.id == "self"


def _annotation(function: FunctionNode | None, name: str) -> str:
    if function is None:
        return ""
    for argument in function.args.posonlyargs + function.args.args + function.args.kwonlyargs:
        if argument.arg == name and argument.annotation is not None:
            return last_name(argument.annotation) or (argument.annotation.value
                                                      if isinstance(argument.annotation, ast.Constant) else "")
    return ""


def _lightning_on_tpu(project: Project) -> bool:
    """Lightning with a TPU accelerator named somewhere (`accelerator="tpu"`, `tpu_cores=`, `TPUSpawnStrategy`,
    `XLAStrategy`): it runs on PyTorch/XLA without importing it."""
    if not any(root.lower() in {"pytorch_lightning", "lightning"} for module in project.modules
               for root in module.imported_roots):
        return False
    imported = [f"{source}.{attribute or ''}".lower() for module in project.modules
                for source, attribute in module.imported.values()]
    return any("tpu" in name or "xla" in name for name in imported) or \
        any((isinstance(node, ast.Constant) and node.value == "tpu") or
            (isinstance(node, ast.keyword) and node.arg in {"tpu_cores", "num_tpu_cores"})  # Lightning 0.x, 1.x
            for module in project.modules for node in ast.walk(module.tree))


def trainer_on_tpu(modules: Iterable[Module]) -> bool:
    """Hugging Face's Trainer given TPU cores (`tpu_num_cores`, an option of the script or a field set on its
    TrainingArguments): it runs on PyTorch/XLA without importing it."""
    modules = list(modules)
    if not any(source.split(".")[0] == "transformers" and attribute in {"Trainer", "Seq2SeqTrainer"}
               for module in modules for source, attribute in module.imported.values()):
        return False
    return any((isinstance(node, ast.Constant) and node.value in {"tpu_num_cores", "--tpu_num_cores"}) or
               (isinstance(node, ast.keyword) and node.arg == "tpu_num_cores")
               for module in modules for node in ast.walk(module.tree))


def attribute_read(expr: ast.AST) -> ast.Attribute | None:
    """`getattr(config, "DEBUG", False)` read as `config.DEBUG` (placed where the call is), or None."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" and \
            len(expr.args) == 3 and isinstance(expr.args[1], ast.Constant) and isinstance(expr.args[1].value, str):
        return ast.copy_location(ast.Attribute(value=expr.args[0], attr=expr.args[1].value, ctx=ast.Load()), expr)
    return None
