"""Which decorators and wrappers compile a function, and with which framework; which calls leave it for the
host."""

from __future__ import annotations

import ast

from tpuops.check.project import Module, dotted, last_name

JAX_WRAPPERS = {"jit", "pjit", "pmap", "xmap", "shard_map", "filter_jit", "filter_pmap"}
# JAX's calls from a compiled step to Python on the host, besides jax.debug.print and jax.debug.callback
HOST_CALLBACKS = {"io_callback", "pure_callback", "id_tap", "id_print"}


def compiler(expr: ast.AST, module: Module) -> str | None:
    """The framework a decorator or wrapper (call or reference) compiles with, or None."""
    call = expr if isinstance(expr, ast.Call) else None
    target = call.func if call else expr
    name, path = last_name(target), dotted(target)
    if name == "partial" and call and call.args:
        return compiler(call.args[0], module)
    root = path.split(".")[0]
    if (name in JAX_WRAPPERS or name.endswith("_jit")) and root not in {"torch", "tf", "tensorflow"}:
        return "jax"
    if name == "function" and call is not None:
        jit = keyword(call, "jit_compile") or keyword(call, "experimental_compile")
        return "tf" if jit is not None and not is_false(jit) else None
    if name == "compile" and ("torch_xla" in path or root == "torch_xla"):
        return "torch"
    if name == "compile" and root == "torch" and call is not None:
        backend = keyword(call, "backend")
        if isinstance(backend, ast.Constant) and str(backend.value).startswith("openxla"):
            return "torch"
    return None


def wrapper_name(wrapper: ast.AST) -> str:
    """`jax.jit`, or `nnx.jit` for `partial(nnx.jit, ...)`, as the user wrote it."""
    target = wrapper.func if isinstance(wrapper, ast.Call) else wrapper
    if last_name(target) == "partial" and isinstance(wrapper, ast.Call) and wrapper.args:
        return wrapper_name(wrapper.args[0])
    return dotted(target) or "a compiling wrapper"


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def is_false(value: ast.AST | None) -> bool:
    return isinstance(value, ast.Constant) and value.value in (False, None)


def host_callback(call: ast.Call) -> bool:
    """`jax.debug.print(...)`, `jax.debug.callback(f, x)`, `io_callback(f, None, x)`: from a compiled JAX step,
    a call to Python on the host each time the step runs."""
    return calls_the_host(call.func)


def calls_the_host(function: ast.AST) -> bool:
    """`jax.debug.callback`, `io_callback` & co, called or handed on (`partial(jax.debug.callback, f)`)."""
    return dotted(function).split(".")[-2:] in (["debug", "print"], ["debug", "callback"]) or \
        last_name(function) in HOST_CALLBACKS


def host_callback_target(call: ast.Call) -> ast.AST | None:
    """The function a call hands to the host, which runs it there on copied values: `f` of `jax.debug.callback(f,
    x)`, of `io_callback(partial(f, a), None, x)` and of `partial(jax.debug.callback, f)` (called under a
    `lax.cond`)."""
    arguments = call.args
    if last_name(call.func) == "partial" and arguments and calls_the_host(arguments[0]):
        arguments = arguments[1:]
    elif not host_callback(call):
        return None
    target = arguments[0] if arguments else None
    if isinstance(target, ast.Call) and last_name(target.func) == "partial" and target.args:
        target = target.args[0]
    return target
