"""jaxdp._src.core.host_bracket: the batched host root finder of the PLD calibration.

Checked on functions whose boundary is known in closed form: the returned
bracket holds the true boundary, is no wider than tol, its feasible end is
feasible, and only open problems are evaluated. Then the PLD calibration
built on it (σ and q) against jaxdp.epsilon itself.
"""

import numpy as np
import pytest

import jaxdp
from jaxdp import calibrate
from jaxdp._src.core import host_bracket as _host_bracket

DELTA = 1e-5


def _power_law(c, k):
  """ε(x) = c·e^{-k x}: boundary x* = log(c / target) / k."""
  return lambda x, idx: c[idx] * np.exp(-k[idx] * x)


def _bisection(f, target, lo, hi):
  """The boundary to the last bit by 200 halvings (the reference)."""
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    bad = f(mid) > target
    lo, hi = np.where(bad, mid, lo), np.where(bad, hi, mid)
  return hi


def _curved(rng, n, k_lo, k_hi):
  """ε(x) = c1·e^{-k x} + c2·e^{-3k x} (log ε convex, not linear) for n
  random problems, and its boundary at target 1 (by bisection)."""
  c1, c2 = np.exp(rng.uniform(-3, 3, (2, n)))
  k = np.exp(rng.uniform(k_lo, k_hi, n))

  def f(x, idx=slice(None)):
    return c1[idx] * np.exp(-k[idx] * x) + c2[idx] * np.exp(-3 * k[idx] * x)

  root = _bisection(f, np.ones(n), np.full(n, -50.0), np.full(n, 50.0))
  return f, root, (c1, c2, k)


@pytest.mark.parametrize("tol", [1e-2, 1e-6, 1e-9])
def test_bracket_holds_the_boundary(tol):
  """ε(x) = c1·e^{-k x} + c2·e^{-3k x} (log ε convex, not linear), from
  starts up to 6 units off on either side with the default slope."""
  rng = np.random.default_rng(0)
  n = 200
  c1, c2 = np.exp(rng.uniform(-3, 3, (2, n)))
  k = np.exp(rng.uniform(-2, 1, n))
  target = np.exp(rng.uniform(-4, 4, n))

  def f(x, idx=slice(None)):
    return c1[idx] * np.exp(-k[idx] * x) + c2[idx] * np.exp(-3 * k[idx] * x)

  root = _bisection(f, target, np.full(n, -50.0), np.full(n, 50.0))
  x0 = root + rng.uniform(-6, 6, n)
  calls = []

  def eps_of(x, idx):
    calls.append(len(np.unique(idx)))
    return f(x, idx)

  b = _host_bracket.solve(eps_of, target, x0, -50.0, 50.0, tol)
  assert b.has_hi.all() and b.has_lo.all()
  assert np.all(b.hi - b.lo <= tol)
  assert np.all((b.lo < root) & (root <= b.hi))
  assert np.all(b.eps_hi <= target) and np.all(b.eps_lo > target)
  np.testing.assert_allclose(b.eps_hi, f(b.hi), rtol=1e-15)
  assert calls[0] == n and calls == sorted(calls, reverse=True)   # only open ones
  assert b.rounds == len(calls) <= 25


def test_a_good_start_and_slope_close_a_tight_bracket_in_few_rounds():
  """From 5% off with a slope 20% off (what the RDP start gives the PLD
  rounds) a 5e-7 bracket closes in at most 6 rounds on smooth functions."""
  n = 100
  f, root, (c1, c2, k) = _curved(np.random.default_rng(1), n, -1, 1)
  target = np.ones(n)
  e = f(root)
  slope = -(c1 * k * np.exp(-k * root) + 3 * c2 * k * np.exp(-3 * k * root)) / e
  b = _host_bracket.solve(f, target, root + 0.05, -50.0, 50.0, 5e-7, slope0=slope * 1.2)
  assert np.all((b.lo < root) & (root <= b.hi) & (b.hi - b.lo <= 5e-7))
  assert b.rounds <= 6


def test_staircase_and_nan():
  """A monotone function with jumps (no secant model holds) and NaN read as
  infeasible still give a valid bracket."""
  target = np.array([0.5, 0.5, 0.5])
  edges = np.array([0.3, -1.7, 2.2])

  def eps_of(x, idx):
    e = np.where(x < edges[idx], 1.0 + np.floor(edges[idx] - x), 0.25)
    return np.where((idx == 2) & (x < edges[idx]), np.nan, e)

  b = _host_bracket.solve(eps_of, target, np.zeros(3), -20.0, 20.0, 1e-8)
  assert np.all(b.hi - b.lo <= 1e-8)
  assert np.all((b.lo < edges) & (edges <= b.hi))


def test_ends_of_the_range():
  """Feasible everywhere: hi = xmin; infeasible everywhere: lo = xmax, no hi."""
  target = np.array([1.0, 1.0])
  b = _host_bracket.solve(lambda x, idx: np.where(idx == 0, 0.5, 2.0), target,
                          np.zeros(2), -3.0, 4.0, 1e-6)
  assert b.has_hi[0] and b.hi[0] == -3.0
  assert not b.has_hi[1] and b.has_lo[1] and b.lo[1] == 4.0


@pytest.mark.slow
def test_pld_calibration_of_sigma_and_rate_is_feasible_and_tight():
  """σ and q calibrated on the PLD meet the target per jaxdp.epsilon(pld),
  and the value moved by rtol against the answer does not."""
  target = np.array([0.5, 2.0, 8.0])
  q = np.array([1e-3, 0.01, 0.2])
  steps = np.array([20000.0, 1000.0, 50.0])
  s = calibrate.sigma(target, DELTA, q, steps, accountant="pld", rtol=1e-5)
  assert np.all(jaxdp.epsilon(q, s, steps, DELTA, accountant="pld") <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - 1e-5), steps, DELTA, accountant="pld") > target)
  sig = np.array([0.8, 1.5, 3.0])
  r = calibrate.sampling_rate(target, DELTA, sig, steps, accountant="pld", rtol=1e-5)
  assert np.all((r > 0) & (r < 1))
  assert np.all(jaxdp.epsilon(r, sig, steps, DELTA, accountant="pld") <= target)
  assert np.all(jaxdp.epsilon(r * (1 + 1e-5), sig, steps, DELTA, accountant="pld") > target)


def test_paired_start_and_closing_pairs():
  """A second start evaluated beside the first gives the function's own
  secant from the first round (the PLD calibration's start: the RDP
  boundary and a point below it); from starts 5-30% above the root of
  curved functions the brackets close in at most 5 rounds, and the closing
  rounds probe both sides of the predicted root (more evaluations than open
  problems) within 0.9·tol."""
  rng = np.random.default_rng(4)
  n = 120
  f, root, _ = _curved(rng, n, -0.5, 1.2)
  target = np.ones(n)
  x0 = root + rng.uniform(0.05, 0.3, n)
  tol = 5e-7
  calls = []

  def eps_of(x, idx):
    calls.append((len(idx), len(np.unique(idx))))
    return f(x, idx)

  b = _host_bracket.solve(eps_of, target, x0, -50.0, 50.0, tol, slope0=-2.0, x1=x0 - 0.08)
  assert np.all((b.lo < root) & (root <= b.hi) & (b.hi - b.lo <= tol))
  assert np.all(b.eps_hi <= target)
  assert calls[0] == (2 * n, n)
  assert any(m > u for m, u in calls[1:])          # closing pairs
  assert b.rounds <= 5
  # without the second start (and the same slope guess) it takes longer
  b1 = _host_bracket.solve(f, target, x0, -50.0, 50.0, tol, slope0=-2.0)
  assert b1.rounds > b.rounds


def test_inverse_quadratic_step_matches_a_parabola():
  """x(g) quadratic: the interpolated root is exact."""
  g = np.array([-0.3, 0.1, 0.5])
  x = 2.0 - 1.5 * g + 0.7 * g ** 2
  assert abs(_host_bracket._iqi(x[0], g[0], x[1], g[1], x[2], g[2]) - 2.0) < 1e-14
  assert np.isnan(_host_bracket._iqi(1.0, 0.2, 2.0, 0.2, 3.0, -0.1))
