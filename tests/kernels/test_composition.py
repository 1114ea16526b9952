"""Tests for jaxdp.composition against hand-derived values and mpmath."""

import math

import jax
import mpmath as mp
import numpy as np
import pytest

from jaxdp import composition as C

mp.mp.dps = 50


def test_basic():
  eps, d = C.basic(0.1, 1e-6, 10)
  assert eps == pytest.approx(1.0) and d == pytest.approx(1e-5)
  eps, d = C.basic(np.array([0.1, 0.2]), 0.3, np.array([[1], [5]]))
  assert eps.shape == (2, 2)
  np.testing.assert_allclose(d.ravel(), [0.3, 1.0])  # δ capped at 1


def test_advanced_hand_value():
  # Dwork–Rothblum Thm 1.1 by hand: k = 100, ε = 0.1, δ' = 1e-5.
  ref = math.sqrt(2 * 100 * math.log(1e5)) * 0.1 + 100 * 0.1 * math.expm1(0.1) / 2
  eps, d = C.advanced(0.1, 1e-7, 100, 1e-5)
  assert eps == pytest.approx(ref, rel=1e-14)
  assert d == pytest.approx(100 * 1e-7 + 1e-5, rel=1e-14)
  # Sharper than the notes' Theorem 2 (√(2k ln 1/δ)ε + kε(e^ε − 1)).
  notes = math.sqrt(2 * 100 * math.log(1e5)) * 0.1 + 100 * 0.1 * math.expm1(0.1)
  assert eps < notes


def test_advanced_heterogeneous():
  e1, d1 = C.advanced(0.05, 1e-8, 40, 1e-6)
  e2, d2 = C.advanced_heterogeneous(np.full(40, 0.05), np.full(40, 1e-8), 1e-6)
  assert e2 == pytest.approx(e1, rel=1e-13) and d2 == pytest.approx(d1, rel=1e-13)
  eps = np.array([0.1, 0.5, 0.01, 0.3])
  ref = math.sqrt(2 * math.log(1e3) * np.sum(eps**2)) + np.sum(eps * np.expm1(eps)) / 2
  e3, d3 = C.advanced_heterogeneous(eps, 0.0, 1e-3)
  assert e3 == pytest.approx(ref, rel=1e-14) and d3 == pytest.approx(1e-3)
  e4, _ = C.advanced_heterogeneous(np.stack([eps, eps]), 0.0, np.array([1e-3, 1e-6]))
  assert e4.shape == (2,) and e4[1] > e4[0]
  f = jax.jit(C.advanced_heterogeneous)
  np.testing.assert_allclose(f(eps, 0.0, 1e-3)[0], e3, rtol=1e-5)


def _kov_closed_form(eps, delta, k, i):
  """KOV 2015 Thm 3.3 at ε_g = (k − 2i)ε, in mpmath."""
  eps, delta = mp.mpf(eps), mp.mpf(delta)
  s = sum(mp.binomial(k, l) * (mp.e**((k - l) * eps) - mp.e**((k - 2 * i + l) * eps))
          for l in range(i)) / (1 + mp.e**eps)**k
  return float(1 - (1 - delta)**k * (1 - s))


@pytest.mark.parametrize("eps, delta, k", [(0.1, 0.0, 50), (0.5, 1e-6, 20),
                                           (0.02, 1e-9, 400), (2.0, 0.0, 7)])
def test_optimal_homogeneous_vs_kov_closed_form(eps, delta, k):
  i_values = np.arange(0, k // 2 + 1, max(1, k // 12))
  got = C.optimal_homogeneous_delta(eps, delta, k, (k - 2 * i_values) * eps)
  ref = np.array([_kov_closed_form(eps, delta, k, int(i)) for i in i_values])
  np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-25)


def test_optimal_beats_advanced_and_inverse_is_feasible():
  eps, delta, k, slack = 0.1, 1e-8, 100, 1e-5
  adv_eps, adv_delta = C.advanced(eps, delta, k, slack)
  assert C.optimal_homogeneous_delta(eps, delta, k, adv_eps) <= adv_delta
  opt = C.optimal_homogeneous_epsilon(eps, delta, k, adv_delta)
  assert opt < adv_eps
  assert C.optimal_homogeneous_delta(eps, delta, k, opt) <= adv_delta
  # Tight: slightly below the answer is infeasible.
  assert C.optimal_homogeneous_delta(eps, delta, k, opt * (1 - 1e-6)) > adv_delta
  # Batched, with different k.
  out = C.optimal_homogeneous_epsilon(np.array([0.1, 0.2]), 0.0, np.array([10, 30]), 1e-6)
  assert out.shape == (2,) and np.all(np.isfinite(out))
  # Infeasible targets are +inf; targets above the pure part give 0.
  assert C.optimal_homogeneous_epsilon(0.1, 1e-3, 100, 1e-5) == np.inf
  assert C.optimal_homogeneous_epsilon(0.1, 0.0, 10, 1.0) == 0.0


@pytest.mark.parametrize("call, match", [
    (lambda: C.basic(-0.1, 0.0, 1), "epsilon"),
    (lambda: C.basic(0.1, 1.5, 1), "delta"),
    (lambda: C.basic(0.1, 0.0, 2.5), "k"),
    (lambda: C.advanced(0.1, 0.0, 10, 0.0), "delta_slack"),
    (lambda: C.advanced_heterogeneous([0.1, np.nan], 0.0, 1e-5), "epsilon"),
    (lambda: C.optimal_homogeneous_delta(0.1, 0.0, -1, 1.0), "k"),
    (lambda: C.optimal_homogeneous_epsilon(0.1, 0.0, 10, 2.0), "delta_total"),
])
def test_bad_inputs(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_advanced_heterogeneous_float32_never_below_mpmath():
  """Float32 under jit (x64 off): sums of many ε_i's were 3 ulps low before
  the result was rounded up by the sums' worst-case error."""
  import jax.numpy as jnp
  rng = np.random.default_rng(12)
  e = np.float32(rng.uniform(0, 2, (3, 500)))
  d = np.float32(rng.uniform(0, 1e-6, (3, 500)))
  slack = np.float32([1e-5, 1e-9, 0.3])
  with jax.enable_x64(False):
    eps, delta = jax.jit(C.advanced_heterogeneous)(jnp.asarray(e), jnp.asarray(d),
                                                   jnp.asarray(slack))
  for r in range(3):
    em = [mp.mpf(float(x)) for x in e[r]]
    exact = (mp.sqrt(2 * mp.log(1 / mp.mpf(float(slack[r]))) * mp.fsum(x * x for x in em))
             + mp.fsum(x * mp.expm1(x) for x in em) / 2)
    assert float(eps[r]) >= exact
    assert float(delta[r]) >= mp.fsum(mp.mpf(float(x)) for x in d[r]) + mp.mpf(float(slack[r]))
