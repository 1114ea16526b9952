"""jaxdp._src.core.grid_search.boundary on monotone functions with known boundaries."""

import numpy as np
import pytest

from jaxdp._src.core import grid_search as gs
from jaxdp import calibrate


def _eps(c):
  # ε(x) = c - x, non-increasing; boundary of {ε <= t} at x* = c - t.
  return lambda idx, x: c[idx, None] - x


@pytest.mark.parametrize("points", [2, 5, 16])
def test_finds_the_boundary_within_tol(points):
  rng = np.random.default_rng(points)
  c = rng.uniform(-3.0, 3.0, 9)
  t = rng.uniform(-1.0, 1.0, 9)
  tol = 1e-7
  x, e, ok = gs.boundary(_eps(c), t, -10.0, 10.0, tol, points=points)
  star = c - t
  assert np.all(ok)
  assert np.all(e <= t) and np.all(e == c - x)        # the returned x was evaluated feasible
  assert np.all(x >= star - 1e-12) and np.all(x - star <= tol + 1e-12)


def test_edges():
  c = np.array([0.0, 100.0, 5.0])
  t = np.array([50.0, 1.0, 5.0])     # feasible everywhere; nowhere; boundary exactly at 0
  x, _, ok = gs.boundary(_eps(c), t, -10.0, 10.0, 1e-9)
  assert ok[0] and x[0] == -10.0
  assert not ok[1] and x[1] == 10.0
  assert ok[2] and 0.0 <= x[2] <= 1e-9


def test_step_function_is_bracketed():
  # ε jumps from 2 to 0 at x = 0.3: any feasible x found lies in [0.3, 0.3 + tol].
  eps = lambda idx, x: np.where(x >= 0.3, 0.0, 2.0)
  x, _, ok = gs.boundary(eps, np.array([1.0]), 0.0, 1.0, 1e-6)
  assert ok[0] and 0.3 <= x[0] <= 0.3 + 1e-6


def test_small_calibration_matches_the_batched_solver():
  """One target solved by probes agrees, within rtol, with the same target
  solved inside a batch of 20 (the jitted solver); both meet the target."""
  import jaxdp
  rng = np.random.default_rng(3)
  tgt = rng.uniform(0.5, 8.0, 20)
  q = 10 ** rng.uniform(-3, -1, 20)
  t = np.floor(10 ** rng.uniform(2, 4, 20))
  batch = calibrate.sigma(tgt, 1e-5, q, t, rtol=1e-5)
  for i in (7,):
    one = float(calibrate.sigma(tgt[i], 1e-5, q[i], t[i], rtol=1e-5))
    assert float(jaxdp.epsilon(q[i], one, t[i], 1e-5)) <= tgt[i]
    assert abs(one / batch[i] - 1) <= 2e-5, (one, batch[i])


def _counted(fn):
  calls = []

  def eps_at(idx, x):
    calls.append(x.shape)
    return fn(idx, x)
  return eps_at, calls


def test_smooth_functions_take_five_rounds():
  """σ-like: ε = c·e^{-1.7 x} over the 23 log-units of SIGMA_RANGE; probes
  around the interpolated root close the bracket to 5e-7 in 5 rounds (equal
  spacing alone needs 7)."""
  rng = np.random.default_rng(4)
  c = 10 ** rng.uniform(-2, 2, 6)
  t = 10 ** rng.uniform(-1, 1, 6)
  eps_at, calls = _counted(lambda idx, x: c[idx, None] * np.exp(-1.7 * x))
  lo, hi = np.log(calibrate.SIGMA_RANGE)
  x, e, ok = gs.boundary(eps_at, t, lo, hi, 5e-7)
  star = np.log(c / t) / 1.7
  assert np.all(ok) and np.all(e <= t)
  assert np.all(x >= star - 1e-12) and np.all(x - star <= 5e-7 + 1e-12)
  assert len(calls) <= 5


def test_rough_functions_fall_back_to_equal_spacing():
  """A staircase whose interpolated roots miss: still the exact contract."""
  eps_at, calls = _counted(lambda idx, x: np.where(x < 0.123456, 100.0, 0.0) + np.floor(-x))
  x, e, ok = gs.boundary(eps_at, np.array([-2.5]), -10.0, 10.0, 1e-7)
  assert ok[0] and e[0] <= -2.5
  # boundary of {floor(-x) <= -2.5} = {x > 2}: the smallest probed feasible x is just above 2
  assert 2.0 < x[0] <= 2.0 + 1e-7
  assert len(calls) <= 12
