"""Mesh helpers: they answer with Python values (names, a yes/no), computed from the mesh, not from arrays."""
from jax.interpreters import pxla


def names_in_mesh(*names):
    current = pxla.thread_resources.env.physical_mesh.axis_names
    return set(names) <= set(current)


def axis_names_of(spec):
    names = set()
    for item in spec:
        if isinstance(item, str):
            names.add(item)
        elif item is not None:
            names.update(item)
    return list(names)
