"""Read each framework's own compilation reports from the trainer's output, line by line.

- JAX (`JAX_LOG_COMPILES=1`): "Compiling jit(NAME) with global shapes and types (ShapedArray(f32[4,128]), ...)".
- TensorFlow (`TF_CPP_VMODULE=device_compiler=3`): "Instantly compiling for signature: __inference_NAME_12[],
  int32 [4,103], ...", "N out of the last N calls to <function NAME ...> triggered tf.function retracing", and
  "Detected unsupported operations when trying to compile graph __inference_NAME_12[] on XLA_CPU_JIT: OP ...";
  TensorFlow's own count of the XLA executables it compiled is in "Compilation of XLA executable time: ...
  (cumulative: ..., #called: N)".
- PyTorch/XLA (`PT_XLA_DEBUG_LEVEL=1`): "Compilation Analysis:" blocks with the cause, the graph hash and the
  Python frames that triggered the compilation.

Then: a function of the trainer compiled more than RECOMPILE_LIMIT times is a recompilation storm (named, with
the input shapes that changed between compilations), a compile failure is a finding, and a PyTorch/XLA graph
cut by reading a tensor's value inside the trainer's code is a host round trip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tpuops.check.findings import Finding

RECOMPILE_LIMIT = 3  # distinct compilations of one function before it is a storm (first steps, a few buckets)
MAX_SHAPE_LINES = 6

JAX_COMPILE = re.compile(r"Compiling (?:jit|pmap)\(([^)]*)\) with global shapes and types \((.*)\)\. Argument")
JAX_SHAPE = re.compile(r"ShapedArray\((\w+\[[^\]]*\])")
JAX_DEFINED = re.compile(r"(\w+) (?:id=\d+ )?defined at (\S+):(\d+)")
# JAX_EXPLAIN_CACHE_MISSES: one warning of several lines, "TRACING CACHE MISS at CALLSITE:" (CALLSITE is
# "<unknown>" when no frame is the user's) and then only lines indented by two spaces or more, such as
# "  * at batch['image'], now f32[58,28,28,1] and before f32[64,28,28,1]"
JAX_MISS_START = "TRACING CACHE MISS at "
JAX_MISS_INDENT = "  "
JAX_MISS_ARGUMENT = re.compile(r"^\s*\* at (.+?), now (\S+?)(?: with .*)? and before (\S+?)(?: with .*)?$")
JAX_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8",
              "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
              "u64": "uint64", "c64": "complex64", "c128": "complex128"}
TF_DTYPES = {"float": "float32", "double": "float64", "half": "float16"}  # TensorFlow's DataTypeString names
TF_COMPILE = re.compile(r"Instantly compiling for signature: __inference_(\w+?)_\d+\[[^\]]*\],?(.*)")
TF_SHAPE = re.compile(r"(\w+) \[([^\]]*)\]")
TF_RETRACING = re.compile(r"calls to <function (\S+) at .*triggered tf\.function retracing")
TF_COMPILED = re.compile(r"Compilation of XLA executable time: .*#called: (\d+)\)")
TF_XLA_COMPILATIONS = "xla_compilations"  # the key of TensorFlow's own count in the run's counters
TF_UNSUPPORTED = re.compile(r"Detected unsupported operations when trying to compile graph "
                            r"__inference_(\w+?)_\d+\[[^\]]*\] on \S+: (.*)")
TORCH_PREFIX = "Compilation Analysis:"
TORCH_FRAME = re.compile(r"^\s+(\S+) \((.+):(\d+)\)$")
HOST_READ_CAUSE = "access tensor value"


@dataclass(frozen=True)
class Compilation:
    function: str
    signature: str  # what distinguishes this compilation: shapes, or PyTorch/XLA's graph hash
    shapes: tuple[str, ...] = ()
    file: str | None = None
    line: int | None = None
    cause: str = ""
    frames: tuple[tuple[str, str, int], ...] = ()
    changes: tuple[str, ...] = ()  # JAX's own account of what differs: "batch['image']: float32[64] -> ..."


@dataclass
class CompileLog:
    """Fed the trainer's output one line at a time; `report_line` says whether a line was the framework's."""

    framework: str
    code_root: Path
    compilations: list[Compilation] = field(default_factory=list)
    failures: list[Finding] = field(default_factory=list)
    retraced: dict[str, str] = field(default_factory=dict)  # TF function -> its warning
    tf_compiled: int | None = None  # TensorFlow's own count of XLA compilations in the process (#called)
    _defined: dict[str, tuple[str, int]] = field(default_factory=dict)
    _torch_block: list[str] | None = None
    _in_miss: bool = False  # inside a JAX "TRACING CACHE MISS" explanation
    _miss_changes: list[str] = field(default_factory=list)

    def feed(self, line: str) -> bool:
        """Parse one line; True when it belonged to a compilation report (not the trainer's own output)."""
        if self.framework == "jax":
            return self._jax(line)
        if self.framework == "tensorflow":
            return self._tensorflow(line)
        if self.framework == "pytorch":
            return self._torch(line)
        return False

    def _jax(self, line: str) -> bool:
        if match := JAX_DEFINED.search(line):
            self._defined[match.group(1)] = (self.relative(match.group(2)), int(match.group(3)))
        if match := JAX_COMPILE.search(line):
            self._in_miss = False
            name, shapes = match.group(1), tuple(JAX_SHAPE.findall(match.group(2)))
            file, lineno = self._defined.get(name, (None, None))
            self.compilations.append(Compilation(name, " ".join(shapes), shapes, file, lineno,
                                                 changes=tuple(self._miss_changes)))
            self._miss_changes = []
            return True
        if JAX_MISS_START in line:
            self._in_miss = True
            self._miss_changes = []
            return True
        if self._in_miss and line.startswith(JAX_MISS_INDENT):
            if match := JAX_MISS_ARGUMENT.match(line):
                path, now, before = match.groups()
                self._miss_changes.append(f"{path}: {_long_dtype(before)} -> {_long_dtype(now)}")
            return True
        self._in_miss = False  # the explanation ends at its first unindented line: what follows is not JAX's
        return line.startswith(("Finished XLA compilation", "Finished tracing", "Finished jaxpr"))

    def _tensorflow(self, line: str) -> bool:
        if match := TF_COMPILE.search(line):
            shapes = tuple(f"{TF_DTYPES.get(dtype, dtype)}[{dims}]" for dtype, dims in TF_SHAPE.findall(match.group(2)))
            self.compilations.append(Compilation(match.group(1), " ".join(shapes), shapes))
            return True
        if match := TF_COMPILED.search(line):
            self.tf_compiled = int(match.group(1))
            return True
        if match := TF_RETRACING.search(line):
            self.retraced[match.group(1).rsplit(".", 1)[-1]] = line.split("WARNING:tensorflow:")[-1].strip()
            return True
        if match := TF_UNSUPPORTED.search(line):
            self.failures.append(Finding(
                "XLA102", "compile-failed", f"XLA cannot compile `{match.group(1)}`: {match.group(2)[:300]}",
                "replace the op with one XLA supports, or move it out of the jit_compile function"))
            return True
        return bool(re.match(r"^[IWE]\d{4} ", line))  # the C++ log lines

    @property
    def counters(self) -> dict[str, int] | None:
        """The framework's own counters this log carries (TensorFlow's count of XLA compilations), if any."""
        return None if self.tf_compiled is None else {TF_XLA_COMPILATIONS: self.tf_compiled}

    def _torch(self, line: str) -> bool:
        if not line.startswith(TORCH_PREFIX):
            if self._torch_block is not None and line.strip().startswith("Computation hash"):
                return True
            return line.startswith("Post Compilation Analysis:")
        text = line[len(TORCH_PREFIX):]
        if text.startswith(" ====") and self._torch_block:
            self._torch_compilation(self._torch_block)
            self._torch_block = None
        elif text.startswith(" ===="):
            self._torch_block = []
        elif self._torch_block is not None:
            self._torch_block.append(text)
        return True

    def _torch_compilation(self, block: list[str]) -> None:
        cause = graph = ""
        frames: list[tuple[str, str, int]] = []
        for i, text in enumerate(block):
            if text.strip() == "Compilation Cause" and i + 1 < len(block):
                cause = block[i + 1].strip()
            elif text.strip().startswith("Graph Hash:"):
                graph = text.split(":", 1)[1].strip()
            elif match := TORCH_FRAME.match(text):
                frames.append((match.group(1), match.group(2), int(match.group(3))))
        mine = [f for f in frames if self._in_code(f[1])]
        if not mine:
            return
        function, file, lineno = mine[0]
        inputs = next((t.split(":", 1)[1].strip() for t in block if "Number of Graph Inputs" in t), "?")
        self.compilations.append(Compilation(function, graph, (f"{inputs} graph inputs",), self.relative(file),
                                             lineno, cause, tuple(frames)))

    def _in_code(self, path: str) -> bool:
        return self.relative(path) != path

    def relative(self, path: str) -> str:
        """A path inside the code directory as the user knows it (relative); others unchanged."""
        try:
            return str(Path(path).resolve().relative_to(self.code_root.resolve()))
        except (ValueError, OSError):
            return path


# ------------------------------------------------------------------------------------------------ findings


def compile_findings(log: CompileLog, trainer_functions: Mapping[str, tuple[str, int]], steps: int) -> list[Finding]:
    """`trainer_functions`: the functions the trainer's code defines, name -> (file, line)."""
    findings = list(log.failures)
    for compilations in _by_function(log.compilations, trainer_functions).values():
        distinct = list({c.signature: c for c in compilations}.values())
        if len(distinct) > RECOMPILE_LIMIT:
            findings.append(_storm(distinct, steps, trainer_functions.get(distinct[0].function)))
    for function, warning in log.retraced.items():
        if function in trainer_functions:
            file, line = trainer_functions[function]
            findings.append(Finding("XLA101", "recompile", f"tf.function `{function}` retraced: {warning}",
                                    "give it fixed input shapes (padded_batch to a fixed length, drop_remainder="
                                    "True) or an input_signature", file, line))
    findings += _library_storms(log, trainer_functions, steps)
    findings += _host_reads(log)
    return findings


def _library_storms(log: CompileLog, trainer_functions: Mapping[str, object], steps: int) -> list[Finding]:
    """TensorFlow names every function it compiles, also a library's: Keras `fit` runs its own
    `one_step_on_data`, compiled again for each new batch shape (padded_batch without padded_shapes)."""
    if log.framework != "tensorflow":
        return []
    library = [c for c in log.compilations if c.function not in trainer_functions]
    findings = []
    for name, compilations in _by_function(library, {c.function: None for c in library}).items():
        distinct = list({c.signature: c for c in compilations}.values())
        if len(distinct) <= RECOMPILE_LIMIT:
            continue
        total = f"TensorFlow compiled {log.tf_compiled} XLA programs in {steps} steps, {len(distinct)} of them" \
            if log.tf_compiled else f"TensorFlow compiled {len(distinct)} XLA programs in {steps} steps, all"
        findings.append(Finding(
            "XLA101", "recompile",
            f"{total} for `{name}`, a function of a library your trainer calls (Keras `fit`/`evaluate` run "
            "`one_step_on_data`): the shapes of the batches it gets change between steps",
            "give the dataset fixed shapes: padded_batch(..., padded_shapes=...) to one length (or bucket_by_"
            "sequence_length with a few lengths) and drop_remainder=True", details=tuple(_changes(distinct))))
    return findings


def trainer_compilations(log: CompileLog, trainer_functions: Mapping[str, tuple[str, int]]) -> int:
    return sum(len(c) for c in _by_function(log.compilations, trainer_functions).values())


def _by_function(compilations: Iterable[Compilation], names: Mapping[str, object]) -> dict[str, list[Compilation]]:
    grouped: dict[str, list[Compilation]] = {}
    for compilation in compilations:
        if compilation.function in names or compilation.frames:
            grouped.setdefault(_site(compilation), []).append(compilation)
    return grouped


def _site(compilation: Compilation) -> str:
    return compilation.function if not compilation.frames else f"{compilation.function}:{compilation.line}"


def _storm(distinct: list[Compilation], steps: int, defined: tuple[str, int] | None) -> Finding:
    first = distinct[0]
    name = first.function
    file, line = (first.file, first.line) if first.file or defined is None else defined
    details = tuple(_changes(distinct))
    return Finding(
        "XLA101", "recompile",
        f"`{name}` was compiled {len(distinct)} times in {steps} steps: its input shapes change between steps "
        f"(on a TPU every compilation costs minutes)",
        "pad every batch to one fixed length (or a few buckets: pad_to_multiple_of=64) and drop the last partial "
        "batch (drop_last / drop_remainder=True)",
        file, line, details)


def _changes(distinct: list[Compilation]) -> list[str]:
    """The argument shapes that differ from one compilation to the next."""
    lines: list[str] = []
    for before, after in zip(distinct, distinct[1:], strict=False):
        if after.changes:  # JAX named the arguments (their paths in the call) and what changed
            lines.append("; ".join(after.changes[:4]))
            continue
        pairs = enumerate(zip(before.shapes, after.shapes, strict=False))
        changed = [_change(i, a, b) for i, (a, b) in pairs if a != b]
        if len(before.shapes) != len(after.shapes):
            changed.append(f"{len(before.shapes)} -> {len(after.shapes)} arguments")
        lines.append("; ".join(changed[:4]) or "a different graph, same input count (PyTorch/XLA reports no shapes)")
    if len(lines) > MAX_SHAPE_LINES:
        lines[MAX_SHAPE_LINES:] = [f"... and {len(lines) - MAX_SHAPE_LINES} more"]
    return lines


def _host_reads(log: CompileLog) -> list[Finding]:
    """PyTorch/XLA cut a graph because Python read a tensor's value: a host round trip every time it runs."""
    found: dict[tuple[str | None, int | None], Finding] = {}
    for compilation in log.compilations:
        if HOST_READ_CAUSE not in compilation.cause:
            continue
        inner = compilation.frames[0] if compilation.frames else (compilation.function, "?", 0)
        key = (compilation.file, compilation.line)
        found.setdefault(key, Finding(
            "XLA103", "host-read",
            f"reading a tensor's value in `{compilation.function}` (via {inner[0]}, {Path(inner[1]).name}:"
            f"{inner[2]}) cuts the XLA graph and waits for the device",
            "keep the value on the device (torch.where, masks), or pass what the library would compute "
            "(e.g. is_causal=True)", compilation.file, compilation.line))
    return list(found.values())


def _long_dtype(shape: str) -> str:
    """f32[58,28] -> float32[58,28] (the spelling of JAX's compile log and of the other lines)."""
    dtype, _, rest = shape.partition("[")
    return f"{JAX_DTYPES.get(dtype, dtype)}[{rest}" if rest else JAX_DTYPES.get(dtype, dtype)


def _change(index: int, before: str, after: str) -> str:
    return f"arg {index}: {before} -> {after}" if before[:1].isalpha() else f"{before} -> {after}"
