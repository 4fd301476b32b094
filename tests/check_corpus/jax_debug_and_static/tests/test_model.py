"""Unit tests of model.py, run on a laptop's CPU in CI: float16 here only checks that the shapes hold in a
smaller dtype, nothing trains in it on the TPU."""
import jax
import jax.numpy as jnp

from model import apply, init_params


def test_apply_keeps_the_batch_and_dtype() -> None:
    params = init_params(jax.random.PRNGKey(1), sizes=(8, 4, 2), dtype=jnp.float16)
    out = apply(params, jnp.ones((3, 8), dtype=jnp.float16))
    assert out.shape == (3, 2) and out.dtype == jnp.float16
