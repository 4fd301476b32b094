"""Old PyTorch/XLA names for the trainers bench/check_realworld_run.py runs with torch-xla 2.9 (on PYTHONPATH through
runs.yaml's `env`; tpuops' line counter hands over to it as to any sitecustomize).

Many judged trainers were written for torch_xla 1.x: `xm.xrt_world_size()`, `xm.get_ordinal()`, and
`xmp.spawn(fn, nprocs=8)` (one process per TPU core; 2.x takes 1 or None, all devices). Rather than edit their
lines, this puts the old names back once the trainer imports those modules, as a port to 2.x would. Nothing is
imported here: a process that never imports torch_xla is not touched.
"""

from __future__ import annotations

import importlib.abc
import sys


def _patch_xla_model(module: object) -> None:
    import torch_xla.runtime as runtime

    for old, new in (("xrt_world_size", runtime.world_size), ("get_ordinal", runtime.global_ordinal),
                     ("get_local_ordinal", runtime.local_ordinal)):
        if not hasattr(module, old):
            setattr(module, old, lambda *args, _new=new, **kwargs: _new())


def _patch_multiprocessing(module: object) -> None:
    spawn = module.spawn

    def any_nprocs(fn, args=(), nprocs=None, **kwargs):  # noqa: ANN001, ANN202 (the library's own signature)
        return spawn(fn, args=args, nprocs=None if nprocs not in (None, 1) else nprocs, **kwargs)

    module.spawn = any_nprocs


PATCHES = {"torch_xla.core.xla_model": _patch_xla_model,
           "torch_xla.distributed.xla_multiprocessing": _patch_multiprocessing}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: lets the other finders load a patched module, then patches it."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module, _original=original, _name=name):  # noqa: ANN001, ANN202
            _original(module)
            PATCHES[_name](module)

        loader.exec_module = exec_module
        return spec


import importlib.util  # noqa: E402 (after the class: only find_spec needs it)

sys.meta_path.insert(0, _AfterImport())
