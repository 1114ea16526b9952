"""Upper bounds alone (``want_lower=False``) and the PLD calibration built on them.

The calibration's rounds read only the PLD upper end, so they skip the
optimistic PMFs (~1/3 of an evaluation). Its answer must meet the target as
``jaxdp.epsilon(accountant="pld")`` reports it, without evaluating it again:
the upper end alone must be bit for bit the full evaluation's, whatever else
is in the call. Checked here over the whole legal domain (ε and δ queries),
across batch compositions, for the accountant's path with other events
(``_run(extra=...)``), and on calibrated answers.
"""

import numpy as np
import pytest

import jaxdp
from jaxdp._src.solvers import boundary as _calibrate_boundary
from jaxdp._src.kernels import guards as _guards
from jaxdp._src.core import numerics as nx
from jaxdp._src.pld import run as _pld_run
from jaxdp import calibrate
from jaxdp import pairs
from jaxdp._src.pld import kernel as pld_impl

DELTA = 1e-5


def _domain(n, seed):
  rng = np.random.default_rng(seed)
  q = np.concatenate([10 ** rng.uniform(-5, 0, n - 5), [1.0, 1e-5, 0.5, 1.0, 0.02]])
  s = np.concatenate([10 ** rng.uniform(-0.7, 1.3, n - 5), [0.3, 20.0, 0.3, 10.0, 0.6]])
  t = np.concatenate([np.round(10 ** rng.uniform(0, 5, n - 5)), [1.0, 1e5, 1.0, 3e4, 1e4]])
  d = np.concatenate([10 ** rng.uniform(-10, -2, n - 5), [1e-5, 1e-10, 0.5, 1e-8, 1e-12]])
  return q, s, t, d


@pytest.mark.parametrize("seed", [0, 1])
def test_upper_alone_is_the_full_paths_upper_end_bit_for_bit(seed):
  q, s, t, d = _domain(24, seed)
  with nx.x64():
    lo, up, _ = pld_impl.guarded_bounds("epsilon", q, s, t, d, full_rdp=False)
    lo1, up1, _ = pld_impl.guarded_bounds("epsilon", q, s, t, d, full_rdp=False, want_lower=False)
    # other batch compositions: every other configuration, one at a time
    _, up2, _ = pld_impl.guarded_bounds("epsilon", q[::2], s[::2], t[::2], d[::2], full_rdp=False,
                                   want_lower=False)
    _, up3, _ = pld_impl.guarded_bounds("epsilon", q[-3:], s[-3:], t[-3:], d[-3:], full_rdp=False,
                                   want_lower=False)
  np.testing.assert_array_equal(up1, up)
  np.testing.assert_array_equal(up2, up[::2])
  np.testing.assert_array_equal(up3, up[-3:])
  assert np.isfinite(up1).sum() >= len(up1) - 2
  one = _guards.one_step_epsilon(q, s, d)
  assert np.all(up1 >= lo * (1 - 1e-12))          # above the certified lower end
  assert np.all(up1 >= one * (1 - 1e-9))          # composition never lowers the loss
  np.testing.assert_array_equal(lo1, np.maximum(one, 0.0))   # its lower end: the one step


def test_upper_alone_for_delta_queries():
  q, s, t, _ = _domain(16, 2)
  e = np.concatenate([10 ** np.random.default_rng(3).uniform(-2, 1, 15), [0.0]])
  with nx.x64():
    lo, up, _ = pld_impl.guarded_bounds("delta", q, s, t, e, full_rdp=False)
    _, up1, _ = pld_impl.guarded_bounds("delta", q, s, t, e, full_rdp=False, want_lower=False)
  np.testing.assert_array_equal(up1, up)
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
  np.testing.assert_array_equal(up1, up)
  assert np.all(up1 >= lo) and np.all(lo1 == -np.inf)


def test_finite_fallback_needs_the_lower_end():
  with pytest.raises(ValueError, match="want_lower"):
    pld_impl.guarded_bounds("epsilon", 0.01, 1.0, 100, DELTA, finite_fallback=True, want_lower=False)


def test_pld_calibration_rounds_read_upper_ends_and_answers_meet_jaxdp_epsilon(monkeypatch):
  """The rounds evaluate upper ends alone, and the answers meet the target as
  jaxdp.epsilon(accountant="pld") reports it (no second evaluation), over
  targets from tiny to large ε, q and T; σ(1 - rtol) does not."""
  modes = []
  orig = _calibrate_boundary._check_epsilon

  def spy(acc, q, s, t, d, orders, want_lower=True):
    modes.append(want_lower)
    return orig(acc, q, s, t, d, orders, want_lower)

  monkeypatch.setattr(_calibrate_boundary, "_check_epsilon", spy)
  target = np.array([0.05, 1.0, 3.0, 6.0, 12.0])
  q = np.array([1e-4, 0.01, 0.003, 0.05, 0.5])
  steps = np.array([10000.0, 1000.0, 20000.0, 300.0, 5.0])
  s = calibrate.sigma(target, DELTA, q, steps, accountant="pld", rtol=1e-5)
  assert modes and not any(modes)
  eps = jaxdp.epsilon(q, s, steps, DELTA, accountant="pld")
  assert np.all(eps <= target)
  assert np.all(jaxdp.epsilon(q, s * (1 - 1e-5), steps, DELTA, accountant="pld") > target)


def test_extreme_sigma_with_an_empty_optimistic_pmf():
  """σ = 0.05-0.06: the optimistic construction can leave a tiny grid with no
  mass (its Chernoff edges +inf / -inf); that window falls back to the
  pessimistic one and the answers stay finite (brute-force brackets in
  tests/package/test_harness.py: [169.786, 169.85] and [778.455, 778.609])."""
  q, s, t, d = (np.array(v) for v in ([0.001, 0.5], [0.06, 0.05], [1.0, 3.0], [1e-5, 1e-8]))
  with nx.x64():
    lo, up, _ = pld_impl.guarded_bounds("epsilon", q, s, t, d, full_rdp=False)
    _, up1, _ = pld_impl.guarded_bounds("epsilon", q, s, t, d, full_rdp=False, want_lower=False)
  assert np.all(np.isfinite(lo) & np.isfinite(up) & (lo <= up))
  # both contain the true ε: the intervals intersect; ours is narrow
  assert np.all((lo <= [169.85, 778.609]) & (up >= [169.786, 778.455]))
  assert np.all(up - lo <= 1e-3 * up)
  np.testing.assert_array_equal(up1, up)
