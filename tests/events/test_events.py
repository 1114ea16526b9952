"""Tests for jaxdp.events: pytree behaviour and validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import events as E


def test_events_are_pytrees_and_pass_through_jit_scan_vmap():
  ev = E.SampledGaussian(0.01, 1.1)
  leaves, treedef = jax.tree_util.tree_flatten(ev)
  assert leaves == [0.01, 1.1]
  assert jax.tree_util.tree_unflatten(treedef, leaves) == ev
  doubled = jax.jit(lambda e: jax.tree_util.tree_map(lambda x: 2 * x, e))(ev)
  assert isinstance(doubled, E.SampledGaussian)
  np.testing.assert_allclose(doubled.sigma, 2.2, rtol=1e-6)
  batch = E.SampledGaussian(jnp.full(4, 0.1), jnp.arange(1.0, 5.0))
  total, _ = jax.lax.scan(lambda c, e: (c + e.q * e.sigma, None), 0.0, batch)
  np.testing.assert_allclose(total, 1.0, rtol=1e-6)
  out = jax.vmap(lambda e: e.q / e.sigma)(batch)
  assert out.shape == (4,)
  # Non-numeric placeholders used by tree utilities are accepted.
  assert jax.tree_util.tree_map(lambda x: None, ev) == E.SampledGaussian(None, None)


@pytest.mark.parametrize("make, match", [
    (lambda: E.Gaussian(0.0), r"Gaussian.sigma .*0\.0"),
    (lambda: E.Gaussian(-1.0), r"Gaussian.sigma"),
    (lambda: E.Gaussian(np.inf), r"Gaussian.sigma must be finite"),
    (lambda: E.SampledGaussian(1.5, 1.0), r"SampledGaussian.q .*1\.5"),
    (lambda: E.SampledGaussian(-0.1, 1.0), r"SampledGaussian.q"),
    (lambda: E.SampledGaussian(0.1, float("nan")), r"SampledGaussian.sigma must not be NaN"),
    (lambda: E.SampledGaussian(jnp.array([0.1, 2.0]), 1.0), r"index \(1,\)"),
    (lambda: E.SampledGaussian(np.ones(2) * 0.1, np.ones(3)), r"broadcast"),
    (lambda: E.Laplace(0.0), r"Laplace.b"),
    (lambda: E.PureDP(-0.5), r"PureDP.epsilon .*-0\.5"),
])
def test_bad_events_raise_value_error(make, match):
  with pytest.raises(ValueError, match=match):
    make()


def test_edge_values_are_legal():
  E.SampledGaussian(0.0, 1e-3)
  E.SampledGaussian(1.0, 1e6)
  E.PureDP(0.0)
  E.Laplace(1e-8)


def test_validate():
  assert E.validate(E.Gaussian(2.0)) == E.Gaussian(2.0)
  with pytest.raises(TypeError, match="Unknown event"):
    E.validate((1.0,))
  # Bypass construction (as tree unflattening of a foreign tuple could).
  bad = tuple.__new__(E.Gaussian, (-1.0,))
  with pytest.raises(ValueError, match="Gaussian.sigma"):
    E.validate(bad)

  @jax.jit
  def traced(sigma):
    return E.validate(E.Gaussian(sigma)).sigma  # tracers are not checked

  assert float(traced(-1.0)) == -1.0
