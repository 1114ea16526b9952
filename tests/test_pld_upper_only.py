"""Upper bounds alone (``want_lower=False``) and the PLD calibration built on them.

The calibration's rounds read only the PLD upper end, so they skip the
optimistic PMFs (~1/3 of an evaluation). Checked here: that path's upper end
is the full path's over the whole legal domain (they differ only in the
composed window, by round-off and Chernoff-tail mass far below the certified
width), it never falls below the full path's certified lower end nor the
one-step value, the other events of the accountant's path
(``_run(extra=...)``) compose the same way, and the calibration's final check
moves an answer up where the full evaluation disagrees.
"""

import numpy as np
import pytest

import jaxdp
from jaxdp import _calibrate_boundary
from jaxdp import _guards
from jaxdp import _numerics as nx
from jaxdp import _pld_run
from jaxdp import calibrate
from jaxdp import pairs
from jaxdp import pld

DELTA = 1e-5


def _domain(n, seed):
  rng = np.random.default_rng(seed)
  q = np.concatenate([10 ** rng.uniform(-5, 0, n - 5), [1.0, 1e-5, 0.5, 1.0, 0.02]])
  s = np.concatenate([10 ** rng.uniform(-0.7, 1.3, n - 5), [0.3, 20.0, 0.3, 10.0, 0.6]])
  t = np.concatenate([np.round(10 ** rng.uniform(0, 5, n - 5)), [1.0, 1e5, 1.0, 3e4, 1e4]])
  d = np.concatenate([10 ** rng.uniform(-10, -2, n - 5), [1e-5, 1e-10, 0.5, 1e-8, 1e-12]])
  return q, s, t, d


@pytest.mark.parametrize("seed", [0, 1])
def test_upper_alone_is_the_full_paths_upper_end(seed):
  q, s, t, d = _domain(24, seed)
  with nx.x64():
    lo, up, _ = pld.guarded_bounds("epsilon", q, s, t, d, full_rdp=False)
    lo1, up1, _ = pld.guarded_bounds("epsilon", q, s, t, d, full_rdp=False, want_lower=False)
  one = _guards.one_step_epsilon(q, s, d)
  np.testing.assert_array_equal(np.isfinite(up1), np.isfinite(up))
  assert np.isfinite(up1).sum() >= len(up1) - 2
  # Both are certified upper ends; they differ by far less than the interval's
  # width (at q = 1e-5, σ = 20, T = 1e5, δ = 1e-10 the interval is [1.7e-6,
  # 2.2e-3] and they differ by 0.8%), elsewhere by < 1e-6 relative.
  fin = np.isfinite(up)
  gap = np.abs(up1[fin] - up[fin])
  assert np.all(gap <= 0.02 * (up[fin] - lo[fin]) + 1e-6 * up[fin])
  assert np.all(up1 >= lo * (1 - 1e-12))          # above the certified lower end
  assert np.all(up1 >= one * (1 - 1e-9))          # composition never lowers the loss
  np.testing.assert_array_equal(lo1, np.maximum(one, 0.0))   # its lower end: the one step


def test_upper_alone_for_delta_queries():
  q, s, t, _ = _domain(16, 2)
  e = np.concatenate([10 ** np.random.default_rng(3).uniform(-2, 1, 15), [0.0]])
  with nx.x64():
    lo, up, _ = pld.guarded_bounds("delta", q, s, t, e, full_rdp=False)
    _, up1, _ = pld.guarded_bounds("delta", q, s, t, e, full_rdp=False, want_lower=False)
  assert np.all(np.abs(up1 - up) <= 0.02 * (up - lo) + 1e-6 * up)
  assert np.all(up1 >= lo)


def test_upper_alone_with_other_events_on_the_grid():
  """The accountant's path: host-discretised events beside the Gaussian
  phases (their optimistic rows go to a scratch row)."""
  q = np.array([[0.01], [0.2], [0.001]])
  s = np.array([[1.0], [2.0], [0.7]])
  t = np.array([[500.0], [40.0], [3000.0]])
  h = np.array([2e-4, 5e-4, 1e-4])
  queries = np.array([[1e-5, 1e-7], [1e-6, 1e-3], [1e-9, 1e-5]])
  rr = pairs.DiscretePair(np.array([0.6, 0.3, 0.1]), np.array([0.1, 0.3, 0.6]))
  extra = [[(pairs.Mechanism(rr, rr), 3)], [], [(pairs.gaussian(5.0), 10)]]
  with nx.x64():
    up, lo, _ = _pld_run._run(q, s, t, h, queries, want_epsilon=True, extra=extra)
    up1, lo1, _ = _pld_run._run(q, s, t, h, queries, want_epsilon=True, extra=extra,
                                 want_lower=False)
  np.testing.assert_allclose(up1, up, rtol=1e-6)
  assert np.all(up1 >= lo) and np.all(lo1 == -np.inf)


def test_finite_fallback_needs_the_lower_end():
  with pytest.raises(ValueError, match="want_lower"):
    pld.guarded_bounds("epsilon", 0.01, 1.0, 100, DELTA, finite_fallback=True, want_lower=False)


def test_calibration_moves_answers_the_full_evaluation_rejects(monkeypatch):
  """Where the full evaluation reads ε a little above the rounds' value,
  the answer moves up until the full evaluation meets the target."""
  orig = _calibrate_boundary._check_epsilon
  calls = []

  def inflated(acc, q, s, t, d, orders, want_lower=True):
    e = orig(acc, q, s, t, d, orders, want_lower)
    calls.append(want_lower)
    return e * (1 + 3e-6) if want_lower else e

  monkeypatch.setattr(_calibrate_boundary, "_check_epsilon", inflated)
  target = np.array([1.0, 3.0, 6.0])
  q = np.array([0.01, 0.003, 0.05])
  steps = np.array([1000.0, 20000.0, 300.0])
  s = calibrate.sigma(target, DELTA, q, steps, accountant="pld")
  monkeypatch.setattr(_calibrate_boundary, "_check_epsilon", orig)
  assert sum(calls) >= 2            # checked, rejected, checked again
  with nx.x64():
    _, up, rdp = pld.guarded_bounds("epsilon", q, s, steps, DELTA, full_rdp=False)
  assert np.all(np.minimum(up, rdp) * (1 + 3e-6) <= target)
  # still tight: within a few tolerances of the plain answer
  s0 = calibrate.sigma(target, DELTA, q, steps, accountant="pld")
  assert np.all((s >= s0) & (s <= s0 * (1 + 1e-4)))
  assert np.all(jaxdp.epsilon(q, s0, steps, DELTA, accountant="pld") <= target)
