"""Eager calls of jaxdp.profiles.sampled_gaussian answered on the host (profiles_eager).

The host answer must be the compiled kernel's (float64: to rounding; float32:
the float64 value rounded up, within one float32 ulp of the compiled value or
below it) over the whole legal domain, sound against mpmath, compile nothing,
and leave every other call (traced, large, after the budget) to the compiled
kernel unchanged.
"""

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxdp import profiles
from jaxdp._src.kernels import profiles as kernel
from jaxdp._src.kernels import profiles_eager
from tests import reference as R

DIRECTIONS = ["max", "remove", "add"]


@pytest.fixture
def host_budget(monkeypatch):
  """A fresh process's budget of eager host calls (conftest sets 0)."""
  monkeypatch.setattr(profiles_eager._host_calls, "left", profiles_eager._EAGER_HOST_CALLS)
  return profiles_eager._host_calls


def _domain(n, seed):
  """(ε, q, σ) over the whole legal domain, edges first."""
  rng = np.random.default_rng(seed)
  e = 10**rng.uniform(-4, 2.5, n)
  q = 10**rng.uniform(-8, 0, n)
  s = 10**rng.uniform(-2, 2, n)
  e[:6] = [0.0, np.inf, 1e-12, 700.0, 0.5, -np.log(0.7)]
  q[6:10] = [0.0, 1.0, 1.0, 0.3]
  s[10:12] = [0.01, 100.0]
  return e, q, s


def _host(fn, e, q, s, direction):
  """Host answers, 4096 values per call (the host path's limit)."""
  out = []
  for i in range(0, e.size, 4096):
    r = fn(e[i:i + 4096], q[i:i + 4096], s[i:i + 4096], direction=direction)
    assert isinstance(r, jax.Array)
    out.append(np.asarray(r))
  return np.concatenate(out)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_float64_host_answers_are_the_compiled_kernels(host_budget, direction):
  e, q, s = _domain(3000, 0)
  with jax.enable_x64(True):
    c_log = np.asarray(kernel.sampled_gaussian_log_delta(e, q, s, direction))
    c = np.asarray(kernel.sampled_gaussian(e, q, s, direction))
    left = host_budget.left
    h_log = _host(profiles.sampled_gaussian_log_delta, e, q, s, direction)
    h = _host(profiles.sampled_gaussian, e, q, s, direction)
  assert host_budget.left == left - 2          # both were host calls
  assert h_log.dtype == c_log.dtype == np.float64 and h.dtype == np.float64
  fin = np.isfinite(c_log)
  np.testing.assert_array_equal(np.isfinite(h_log), fin)
  np.testing.assert_array_equal(h_log[~fin], c_log[~fin])     # -inf: δ = 0 exactly
  np.testing.assert_allclose(h_log[fin], c_log[fin], rtol=2e-13, atol=2e-13)
  np.testing.assert_array_equal(h[~fin], 0.0)
  pos = c > 1e-300                                          # exp underflows below
  np.testing.assert_allclose(h[pos], c[pos], rtol=5e-12)
  assert np.all(h <= 1.0) and np.all(h >= 0.0)


def test_float32_host_answers_are_sound_and_within_an_ulp_of_the_compiled(host_budget):
  e, q, s = (x.astype(np.float32) for x in _domain(3000, 1))
  c32 = np.asarray(kernel.sampled_gaussian_log_delta(e, q, s))
  h32 = _host(profiles.sampled_gaussian_log_delta, e, q, s, "max")
  assert c32.dtype == h32.dtype == np.float32
  with jax.enable_x64(True):   # the float64 kernel at the same (float32) inputs: an upper bound
    c64 = np.asarray(kernel.sampled_gaussian_log_delta(*(x.astype(np.float64) for x in (e, q, s))))
  fin = np.isfinite(c32)
  np.testing.assert_array_equal(np.isfinite(h32), fin)
  assert np.all(h32[fin] >= c64[fin])
  assert np.all(h32[fin] <= np.nextafter(c32[fin], np.float32(np.inf)))
  d32 = _host(profiles.sampled_gaussian, e, q, s, "max")
  assert d32.dtype == np.float32
  with np.errstate(over="ignore"):
    assert np.all(d32 >= np.exp(c64).astype(np.float32) * (1 - 1e-7))


@pytest.mark.parametrize("direction", ["remove", "add"])
def test_host_answers_are_sound_against_mpmath(host_budget, direction):
  for e, q, s in [(0.0, 0.01, 1.0), (1e-3, 1e-3, 2.0), (0.005, 0.01, 1.0), (1.0, 0.1, 0.8),
                  (2.0, 1.0, 1.0), (0.1, 0.2, 4.0)]:
    ref = R.ref_sampled_gaussian_delta(e, q, s, direction)
    with jax.enable_x64(True):
      ours = float(profiles.sampled_gaussian(e, q, s, direction=direction))
    if ref == 0:
      assert ours == 0.0
      continue
    rel = float(mp.mpf(ours) / ref - 1)   # the reference is a quadrature (~1e-10): two-sided
    assert abs(rel) <= 1e-8, (e, q, s, rel)
  for e, q, s in [(20.0, 0.01, 0.3), (60.0, 1e-3, 0.2), (300.0, 0.01, 0.1)]:   # far tail
    ref = R.ref_sampled_gaussian_delta(e, q, s, "remove")
    with jax.enable_x64(True):
      ld = float(profiles.sampled_gaussian_log_delta(e, q, s, direction="remove"))
    assert abs(float((mp.mpf(ld) - mp.log(ref)) / abs(mp.log(ref)))) <= 1e-6


def test_an_eager_call_compiles_nothing(cold_programs, record_compilations, host_budget):
  del cold_programs
  with record_compilations() as c:
    d = profiles.sampled_gaussian(epsilon=1.0, q=0.01, sigma=1.1)
    ld = profiles.sampled_gaussian_log_delta(np.array([0.5, 1.0]), 0.01, 1.1)
  assert c == []
  assert d.shape == () and ld.shape == (2,)


def test_shapes_and_dtypes_are_the_kernels(host_budget):
  e, q, s = np.array([[0.0], [0.5], [3.0]]), np.array([0.0, 0.01, 0.5, 1.0]), 1.1
  for fn, ref in [(profiles.sampled_gaussian, kernel.sampled_gaussian),
                  (profiles.sampled_gaussian_log_delta, kernel.sampled_gaussian_log_delta)]:
    for args in [(e, q, s), (1.0, 0.01, 1.1), ([0.5, 1.0], 0.01, [1.1, 2.0]),
                 (np.float32(1.0), 0.01, 1.1)]:
      h, k = fn(*args), ref(*args)
      assert h.shape == k.shape and h.dtype == k.dtype, (args, h.dtype, k.dtype)
      h, k = np.asarray(h), np.asarray(k)
      # float32 (x64 off): the compiled value carries float32 allowances
      # (up to ~4e-4 relative in δ at δ ~ 1e-18); the host's is at most it.
      assert np.all(h <= np.nextafter(k, np.asarray(np.inf, k.dtype))), args
      np.testing.assert_allclose(h, k, rtol=1e-3)


def test_other_calls_run_the_compiled_kernel(host_budget, monkeypatch):
  calls = []
  compiled = kernel.sampled_gaussian
  monkeypatch.setattr(kernel, "sampled_gaussian", lambda *a: calls.append(1) or compiled(*a))
  left = host_budget.left
  jax.jit(lambda e: profiles.sampled_gaussian(e, 0.01, 1.1))(jnp.float32(1.0))   # traced
  assert len(calls) == 1
  g = jax.grad(lambda s: profiles.sampled_gaussian(1.0, 0.01, s))(1.1)
  assert np.isfinite(g) and len(calls) == 2
  profiles.sampled_gaussian(np.full(4097, 1.0), 0.01, 1.1)                      # large
  assert len(calls) == 3 and host_budget.left == left
  profiles.sampled_gaussian(1.0, 0.01, 1.1)                                      # the host's
  assert len(calls) == 3 and host_budget.left == left - 1
  host_budget.left = 0
  profiles.sampled_gaussian(1.0, 0.01, 1.1)                                      # budget spent
  assert len(calls) == 4


@pytest.mark.parametrize("args,name", [((1.0, 1.5, 1.1), "q"), ((1.0, 0.01, 0.0), "sigma"),
                                       ((-1.0, 0.01, 1.1), "epsilon"),
                                       ((float("nan"), 0.01, 1.1), "epsilon")])
def test_bad_input_raises_naming_the_argument(host_budget, args, name):
  left = host_budget.left
  with pytest.raises(ValueError, match=name):
    profiles.sampled_gaussian(*args)
  with pytest.raises(ValueError, match="direction"):
    profiles.sampled_gaussian(1.0, 0.01, 1.1, direction="both")
  assert host_budget.left == left
