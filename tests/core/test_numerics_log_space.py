"""nx.softplus and nx.log1p: values against mpmath, the two-branch forms they
replaced (bitwise: the kernels' answers must not move), and derivatives."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from jaxdp._src.core import numerics as nx


def _points():
  rng = np.random.default_rng(3)
  mag = 10.0 ** rng.uniform(-300, 3, 4000)
  x = np.concatenate([mag, -mag, [0.0, -0.0, 1e-320, -1e-320, 709.0, -745.0, 800.0, -800.0,
                                    np.inf, -np.inf, np.nan, 36.0, -36.0, 1.0, -1.0]])
  return x


def _two_branch_softplus(x, xp):
  """The formula nx.softplus used before (one log1p per branch)."""
  pos = x > 0
  x_pos = xp.where(pos, x, 0.0)
  xn = xp.where(pos, 0.0, x)
  return xp.where(pos, x_pos + nx.log1p(xp.exp(-x_pos), xp), nx.log1p(xp.exp(xn), xp))


def _general_log1p(x, xp):
  """nx.log1p's guarded form, without the host's fast path."""
  u = 1.0 + x
  ok = (u != 0.0) & xp.isfinite(u)
  us = xp.where(ok, u, 2.0)
  xs = xp.where(ok, x, 1.0)
  corr = xp.where(us == 1.0, xs, xp.log(us) - ((us - 1.0) - xs) / us)
  return xp.where(ok, corr, xp.where(u == 0.0, -xp.inf, xp.log(u)))


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jnp"])
def test_softplus_bitwise_equal_to_two_branch_form(xp):
  x = _points()
  with nx.x64(), np.errstate(all="ignore"):
    got = np.asarray(nx.softplus(xp.asarray(x), xp))
    want = np.asarray(_two_branch_softplus(xp.asarray(x), xp))
  np.testing.assert_array_equal(got, want)


def test_softplus_matches_mpmath():
  x = _points()
  x = x[np.isfinite(x)]
  with np.errstate(all="ignore"):
    got = nx.softplus(x, np)
  mpmath.mp.dps = 40
  want = np.array([float(mpmath.log1p(mpmath.exp(mpmath.mpf(float(v))))) for v in x])
  np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)


def test_log1p_host_fast_path_bitwise():
  x = np.concatenate([_points(), [-1.0, -2.0, -1.0 - 1e-15]])
  with np.errstate(all="ignore"):
    for chunk in (x, x[:5], x[np.isfinite(x) & (x > -1)], np.float64(0.25), np.float64(-1.0)):
      np.testing.assert_array_equal(nx.log1p(chunk, np), _general_log1p(np.asarray(chunk), np))


def test_softplus_derivative_everywhere():
  x = jnp.asarray([-800.0, -30.0, -1.0, -1e-300, 0.0, 1e-300, 1.0, 30.0, 800.0])
  with nx.x64():
    x = x.astype(jnp.float64)
    got = jax.vmap(jax.grad(lambda v: nx.softplus(v)))(x)
    want = jax.nn.sigmoid(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-15, atol=0)
    assert float(jax.grad(nx.softplus)(0.0)) == 0.5
    assert np.isfinite(np.asarray(jax.grad(nx.softplus)(-jnp.inf)))
