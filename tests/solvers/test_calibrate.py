"""Tests for jaxdp.calibrate: feasibility, tightness, exact inverses, gradients."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp._src.core import numerics as nx
from jaxdp import calibrate

# Integer orders only: the cheap exact path, so the fast suite compiles quickly.
ORDERS = np.array([2.0, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64])
# Cheap + expensive orders: exercises the two-phase (window refinement) solver.
MIXED = np.array([1.5, 2.0, 2.5, 3, 4, 8, 16, 32, 128])
# Few orders for the gradient tests (compiling reverse mode is the slow part).
FEW = np.array([2.0, 4, 8, 16, 32])
DELTA = 1e-5


def _random_configs(n, seed):
  rng = np.random.default_rng(seed)
  target = rng.uniform(0.2, 15.0, n)
  q = 10 ** rng.uniform(-4, -0.5, n)
  steps = np.round(10 ** rng.uniform(0, 4.5, n))
  return target, q, steps


def test_sigma_1000_targets_feasible_and_tight():
  target, q, steps = _random_configs(1000, 0)
  rtol = 1e-6
  s = calibrate.sigma(target, DELTA, q, steps, rtol=rtol, orders=ORDERS)
  assert s.shape == (1000,) and np.all(np.isfinite(s)) and np.all(s > 0)
  eps = jaxdp.epsilon(q, s, steps, DELTA, orders=ORDERS)
  assert np.all(eps <= target)
  lower = s * (1 - rtol)
  at_floor = s <= calibrate.SIGMA_RANGE[0]
  eps_lower = jaxdp.epsilon(q, lower, steps, DELTA, orders=ORDERS)
  assert np.all((eps_lower > target) | at_floor)


def test_sigma_two_phase_feasible_and_tight():
  # Large ε → fractional orders win (window refinement); small ε → the large order.
  target = np.array([40.0, 25.0, 12.0, 3.0, 1.0, 60.0, 0.3])
  q = np.array([0.5, 0.2, 0.05, 0.01, 0.02, 1.0, 0.001])
  steps = np.array([10.0, 100, 1000, 5000, 2000, 3, 1000])
  rtol = 1e-6
  s = calibrate.sigma(target, DELTA, q, steps, rtol=rtol, orders=MIXED)
  eps = jaxdp.epsilon(q, s, steps, DELTA, orders=MIXED)
  assert np.all(eps <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - rtol), steps, DELTA, orders=MIXED) > target)


@pytest.mark.slow
def test_sigma_at_kl_jump_feasible_and_tight():
  # ε drops to 0 where the KL bound switches on: the cheap-order boundary sits
  # on that jump while the full order set meets the target at far less noise.
  target = np.array([0.05, 0.02])
  q = np.array([0.001, 0.0005])
  steps = np.array([100.0, 30])
  s = calibrate.sigma(target, DELTA, q, steps, orders=MIXED)
  assert np.all(jaxdp.epsilon(q, s, steps, DELTA, orders=MIXED) <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - 1e-6), steps, DELTA, orders=MIXED) > target)


@pytest.mark.slow
def test_sigma_independent_of_order_subset_property():
  # A smaller order set can only need more noise.
  target, q, steps = _random_configs(16, 1)
  s_all = calibrate.sigma(target, DELTA, q, steps, orders=ORDERS)
  s_few = calibrate.sigma(target, DELTA, q, steps, orders=ORDERS[::3])
  assert np.all(s_few >= s_all * (1 - 1e-6))


def test_sigma_matches_gaussian_mechanism_closed_form():
  # q = 1, one step: RDP of the Gaussian, ε(σ) = min_α α/(2σ²) + conversion; the
  # calibrated σ must reproduce the target through the independent formula.
  s = calibrate.sigma(2.0, DELTA, 1.0, 1, orders=ORDERS)
  a = ORDERS
  eps = a / (2 * s**2) + np.log1p(-1 / a) - (np.log(DELTA) + np.log(a)) / (a - 1)
  assert np.min(eps) == pytest.approx(2.0, rel=1e-5)


def test_sigma_special_cases():
  assert calibrate.sigma(1.0, DELTA, 0.0, 100, orders=ORDERS) == 0.0
  assert calibrate.sigma(1.0, DELTA, 0.1, 0, orders=ORDERS) == 0.0
  with pytest.warns(RuntimeWarning, match="cannot be met"):
    s = calibrate.sigma(np.array([1e-9, 1.0]), 1e-8, 1.0, 10000, orders=ORDERS)
  assert s[0] == np.inf and np.isfinite(s[1])
  # Huge budget: the lower end of the search range already meets it.
  s = calibrate.sigma(1e9, DELTA, 1e-4, 1, orders=ORDERS)
  assert s == calibrate.SIGMA_RANGE[0]
  assert not np.isnan(s)


def test_sigma_broadcasts_and_scalar_type():
  s = calibrate.sigma(np.array([[1.0], [2.0]]), DELTA, np.array([0.01, 0.02, 0.05]), 1000,
                      orders=ORDERS)
  assert s.shape == (2, 3)
  assert np.all(np.diff(s, axis=0) < 0)  # larger budget, less noise
  assert np.all(np.diff(s, axis=1) > 0)  # larger q, more noise
  s0 = calibrate.sigma(1.0, DELTA, 0.01, 1000, orders=ORDERS)
  assert isinstance(s0, np.float64)


@pytest.mark.parametrize("kwargs, match", [
    (dict(target_epsilon=-1.0), "target_epsilon"),
    (dict(delta=0.0), "delta"),
    (dict(q=1.5), "q"),
    (dict(steps=2.5), "steps"),
    (dict(rtol=0.0), "rtol"),
    (dict(accountant="moments"), "accountant"),
])
def test_sigma_validation(kwargs, match):
  args = dict(target_epsilon=1.0, delta=DELTA, q=0.01, steps=100)
  args.update(kwargs)
  extra = {k: args.pop(k) for k in ("rtol", "accountant") if k in args}
  with pytest.raises(ValueError, match=match):
    calibrate.sigma(**args, orders=ORDERS, **extra)


def test_steps_exact_at_boundary():
  rng = np.random.default_rng(2)
  n = 64
  target = rng.uniform(0.5, 10, n)
  q = 10 ** rng.uniform(-3.5, -1, n)
  s = rng.uniform(0.6, 3.0, n)
  t = calibrate.steps(target, DELTA, q, s, orders=ORDERS)
  assert np.all(t == np.round(t))
  fin = np.isfinite(t)
  assert np.all(jaxdp.epsilon(q[fin], s[fin], t[fin], DELTA, orders=ORDERS) <= target[fin])
  assert np.all(jaxdp.epsilon(q[fin], s[fin], t[fin] + 1, DELTA, orders=ORDERS) > target[fin])
  assert calibrate.steps(1.0, DELTA, 0.0, 1.0, orders=ORDERS) == calibrate.MAX_STEPS == 2**53
  # A budget too small for a single step: zero steps.
  assert calibrate.steps(1e-3, DELTA, 1.0, 0.5, orders=ORDERS) == 0.0


def test_sampling_rate_exact_and_tight():
  rng = np.random.default_rng(3)
  n = 64
  target = rng.uniform(0.5, 10, n)
  s = rng.uniform(0.7, 3.0, n)
  t = np.round(10 ** rng.uniform(1, 4, n))
  rtol = 1e-6
  q = calibrate.sampling_rate(target, DELTA, s, t, rtol=rtol, orders=ORDERS)
  assert np.all((q > 0) & (q <= 1))
  assert np.all(jaxdp.epsilon(q, s, t, DELTA, orders=ORDERS) <= target)
  inner = q < 1
  up = np.minimum(q * (1 + rtol), 1.0)
  assert np.all(jaxdp.epsilon(up[inner], s[inner], t[inner], DELTA, orders=ORDERS) > target[inner])
  assert calibrate.sampling_rate(1.0, DELTA, 1.0, 0, orders=ORDERS) == 1.0
  with pytest.warns(RuntimeWarning):
    assert calibrate.sampling_rate(1e-12, 1e-8, 0.05, 10, orders=ORDERS) == 0.0


def test_inverse_round_trip():
  # sigma → steps → the steps we started from (steps are exact, σ rounds up).
  target, q, steps = _random_configs(32, 4)
  s = calibrate.sigma(target, DELTA, q, steps, orders=ORDERS)
  t = calibrate.steps(target, DELTA, q, s, orders=ORDERS)
  assert np.all(t >= steps)
  assert np.mean(t == steps) > 0.9


def test_differentiable_epsilon_matches_value_and_finite_differences():
  with nx.x64():
    f = lambda q, s, t, d: calibrate.differentiable_epsilon(q, s, t, d, FEW)
    args = (0.01, 1.1, 1000.0, 1e-5)
    assert float(f(*args)) == pytest.approx(
        float(jaxdp.epsilon(0.01, 1.1, 1000, 1e-5, orders=FEW)), rel=1e-12)
    grads = jax.grad(f, argnums=(0, 1, 2, 3))(*args)
    for i, g in enumerate(grads):
      h = 1e-6 * args[i]
      up = list(args); dn = list(args)
      up[i] += h; dn[i] -= h
      fd = (float(f(*up)) - float(f(*dn))) / (2 * h)
      assert float(g) == pytest.approx(fd, rel=1e-5), i
    # No NaN gradients in extreme corners.
    g = jax.grad(f, argnums=(0, 1))(1e-6, 50.0, 10.0, 1e-5)
    assert all(np.isfinite(float(x)) for x in g)


def test_solve_sigma_implicit_gradient():
  with nx.x64():
    sf = lambda t, q, steps: calibrate.solve_sigma(t, DELTA, q, steps, FEW, rtol=1e-10)
    args = (2.0, 0.01, 1000.0)
    grads = jax.grad(sf, argnums=(0, 1, 2))(*args)
    s0 = float(sf(*args))
    assert s0 == pytest.approx(float(calibrate.sigma(2.0, DELTA, 0.01, 1000, orders=FEW)),
                               rel=1e-6)
    for i, g in enumerate(grads):
      h = 1e-5 * args[i]
      up = list(args); dn = list(args)
      up[i] += h; dn[i] -= h
      fd = (float(sf(*up)) - float(sf(*dn))) / (2 * h)
      assert float(g) == pytest.approx(fd, rel=1e-3), i


def test_optimize_dpsgd_beats_or_ties_grid_search():
  n = np.array([60000.0, 50000.0, 2000.0])
  e = np.array([10.0, 3.0, 20.0])
  t = np.array([1.0, 8.0, 3.0])
  bmax = np.array([1024.0, 4096.0, 500.0])
  iters = 12
  plan = calibrate.optimize_dpsgd(n, e, t, DELTA, max_batch_size=bmax, orders=ORDERS,
                                  num_iterations=iters)
  assert np.all(plan.epsilon <= t)
  assert np.allclose(plan.noise_std, plan.sigma / plan.batch_size)
  # the one rule for epochs (jaxdp.sampling): E × round(N / B) steps
  assert np.all(plan.steps == e * np.maximum(1, np.round(n / plan.batch_size)))
  # Grid search with the same number of calibrations (+ the two ends).
  grid = np.unique(np.round(np.geomspace(1.0, bmax, iters + 2)), axis=0)
  bs = grid.T  # (3, G)
  q = bs / n[:, None]
  steps = e[:, None] * np.maximum(1, np.round(n[:, None] / bs))
  s = calibrate.sigma(t[:, None], DELTA, q, steps, orders=ORDERS)
  best_grid = np.min(s / bs, axis=1)
  assert np.all(plan.noise_std <= best_grid * (1 + 1e-9))


def test_analytic_gaussian_is_a_float64_host_entry():
  """calibrate.analytic_gaussian answers in float64 NumPy whatever the JAX
  configuration (it returned the float32 kernel's σ with x64 off, whose
  float32 δ check read up to 3e-3 above the target); it equals the kernel
  run in float64 bitwise and meets the target by the float64 profile."""
  from jaxdp import profiles
  eps = np.array([0.01, 0.5, 1.0, 3.0, 20.0])
  dl = np.array([1e-12, 1e-5, 1e-6, 0.1, 1e-9])
  with jax.enable_x64(False):
    s = calibrate.analytic_gaussian(eps, dl, 2.0)
  assert isinstance(s, np.ndarray) and s.dtype == np.float64
  with jax.enable_x64(True):
    ref = np.asarray(profiles.analytic_gaussian_sigma(eps, dl, 2.0))
    np.testing.assert_array_equal(s, ref)
    assert np.all(np.asarray(profiles.gaussian(eps, s, 2.0)) <= dl)
  with pytest.raises(ValueError, match="delta"):
    calibrate.analytic_gaussian(1.0, 1.5)


@pytest.mark.slow
def test_pld_sigma_feasible():
  pld = pytest.importorskip("jaxdp.pld")
  if not hasattr(pld, "epsilon"):
    pytest.skip("jaxdp.pld.epsilon not available")
  target = np.array([1.0, 4.0])
  q = np.array([0.01, 0.05])
  steps = np.array([100.0, 50.0])
  s = calibrate.sigma(target, DELTA, q, steps, accountant="pld", rtol=1e-3)
  eps = jaxdp.epsilon(q, s, steps, DELTA, accountant="pld")
  assert np.all(eps <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - 1e-3), steps, DELTA, accountant="pld") > target)
  # PLD is tighter than RDP: it needs no more noise.
  s_rdp = calibrate.sigma(target, DELTA, q, steps, orders=ORDERS)
  assert np.all(s <= s_rdp * (1 + 1e-6))


@pytest.mark.parametrize("exponent", [1.5, 0.2])
def test_sigma_default_orders_feasible_and_tight(monkeypatch, exponent):
  """Every real order α > 1 (the envelope rounds): feasible and tight on the
  benchmark's distribution, with the first round's predicted order (1.5) and
  with a deliberately bad prediction (0.2: most predicted orders are worse
  than α*, and the plain round must follow)."""
  from jaxdp._src.solvers import boundary as _calibrate_boundary
  monkeypatch.setattr(_calibrate_boundary, "_ENVELOPE_EXPONENT", exponent)
  rng = np.random.default_rng(11)
  n = 200
  target = rng.uniform(0.3, 10.0, n)
  q = 10 ** rng.uniform(-3.5, -1.0, n)
  steps = np.round(10 ** rng.uniform(2, np.log10(50000), n))
  s = calibrate.sigma(target, DELTA, q, steps)
  assert np.all(jaxdp.epsilon(q, s, steps, DELTA) <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - 1e-6), steps, DELTA) > target)


def test_chunks_on_threads_give_the_sequential_bits(monkeypatch):
  """Chunks run side by side on the CPU's cores (jaxdp._src.core.numerics.thread_map):
  the same answers, bit for bit, as one chunk after the other, in float64."""
  import os
  from jaxdp._src.core import numerics as _numerics
  with _numerics.x64():
    dtypes = _numerics.thread_map(lambda _: jnp.zeros(1).dtype, range(3))
  assert dtypes == [jnp.float64] * 3
  assert _numerics.thread_map(lambda v: v * 2, range(5)) == [0, 2, 4, 6, 8]
  target, q, steps = _random_configs(600, 7)
  grid_q, grid_s = np.meshgrid(np.geomspace(1e-4, 0.1, 90), np.linspace(0.6, 6, 90))
  threaded = (calibrate.sigma(target, DELTA, q, steps), jaxdp.epsilon(grid_q, grid_s, 1000, DELTA))
  monkeypatch.setattr(os, "cpu_count", lambda: 1)
  sequential = (calibrate.sigma(target, DELTA, q, steps), jaxdp.epsilon(grid_q, grid_s, 1000, DELTA))
  for a, b in zip(threaded, sequential):
    np.testing.assert_array_equal(a, b)
