"""The PLD kernel's per-query savings: the truncation budget of ε queries,
the read-out of only the nodes a query reads, and the cheap RDP ceiling of
the guards of ``jaxdp.pld.epsilon`` / ``jaxdp.pld.delta``.

Each is a change in what is computed, not in what is claimed: the answers
stay certified bounds, checked here against the unsliced read-out, the full
default-orders RDP value and an independent engine (``jaxdp.pld_general``).
"""

import math

import numpy as np
import pytest

from jaxdp._src.kernels import rdp_driver as _rdp_driver
from jaxdp._src.kernels import host_rdp as _host_rdp
from jaxdp._src.core import numerics as nx
from jaxdp._src.pld import readout as _pld_readout
from jaxdp._src.pld import run as _pld_run
from jaxdp import pld
from jaxdp import pld_general
from jaxdp._src.mechanisms.registry import poisson_phases
from jaxdp._src.pld import kernel as pld_impl
from jaxdp._src.pld import kernel_guards as _kernel_guards


def _domain(n, seed):
  """Configurations over the whole legal domain (edges included)."""
  rng = np.random.default_rng(seed)
  q = np.concatenate([10 ** rng.uniform(-6, 0, n - 4), [1.0, 1e-6, 0.5, 1.0]])
  s = np.concatenate([10 ** rng.uniform(-1.3, 1.7, n - 4), [0.05, 50.0, 0.3, 30.0]])
  t = np.concatenate([np.round(10 ** rng.uniform(0, 6, n - 4)), [1.0, 1e6, 1.0, 1e6]])
  return q, s, t, rng


def test_small_order_ceiling_is_an_rdp_bound_never_below_the_full_value():
  q, s, t, rng = _domain(160, 0)
  d = 10 ** rng.uniform(-12, -0.5, q.size)
  e = np.concatenate([10 ** rng.uniform(-3, 1.5, q.size - 1), [0.0]])
  with nx.x64():
    for kind, x in (("epsilon", d), ("delta", e)):
      cheap = _host_rdp.small_order_ceiling(kind, q, s, t, x)
      if kind == "delta":   # as kernel_guards._rdp_ceiling reads it
        cheap = _rdp_driver.delta_floor(cheap, q, t, x)
      full = _rdp_driver.run_chunked(kind, q, s, t, x, None, "improved")  # pylint: disable=protected-access
      assert not np.any(np.isnan(cheap))
      assert np.all(cheap >= full * (1 - 1e-12)), kind
      # Integer orders <= 64 are where most DP-SGD optima lie: the cheap
      # value is close to the full one for the typical configurations.
      typical = (s > 0.5) & (s < 5) & (q < 0.1) & (full > 0)
      if kind == "epsilon":
        assert np.median(cheap[typical] / full[typical]) < 1.05


def _stub_ceiling(monkeypatch, value):
  calls = []

  def full(name, flat):
    calls.append(flat[0].size)
    return np.full(flat[0].size, 7.0)

  monkeypatch.setattr(_host_rdp, "small_order_ceiling",
                      lambda kind, q, s, t, x, per_step=None: np.full(q.size, float(value)))
  monkeypatch.setattr(_kernel_guards, "_full_rdp", full)
  return calls


def test_rdp_ceiling_escalates_exactly_where_the_cheap_bound_does_not_suffice(monkeypatch):
  calls = _stub_ceiling(monkeypatch, 2.0)
  flat = [np.full(5, v) for v in (0.01, 1.0, 100.0, 1e-5)]
  lo = np.array([1.0, 1.0, 2.5, 1.0, 1.0])
  up = np.array([1.5, 2.5, 2.6, np.inf, np.nan])
  out, full = _kernel_guards._rdp_ceiling("epsilon", flat, lo, up)  # pylint: disable=protected-access
  # rows 1 (ceiling < up), 2 (lo > ceiling), 3 (+inf), 4 (NaN): the full value
  np.testing.assert_array_equal(out, [2.0, 7.0, 7.0, 7.0, 7.0])
  np.testing.assert_array_equal(full, [False, True, True, True, True])
  assert calls == [4]
  calls.clear()
  out, full = _kernel_guards._rdp_ceiling("epsilon", flat[:1] * 4, lo[:1], up[:1])  # pylint: disable=protected-access
  assert calls == [] and out[0] == 2.0 and not full[0]


def test_pld_epsilon_guard_falls_back_to_the_full_rdp_value(monkeypatch):
  """A cheap ceiling below the certified lower end must not fail the guard
  (the full value is asked for), and the answers do not change."""
  q, s, t, d = np.array([0.01, 0.004]), np.array([1.0, 0.8]), np.array([500.0, 2000.0]), 1e-5
  want = pld.epsilon(q, s, t, d, return_bounds=True)
  monkeypatch.setattr(_host_rdp, "small_order_ceiling",
                      lambda kind, q, s, t, x, per_step=None: np.full(q.size, 1e-3))
  got = pld.epsilon(q, s, t, d, return_bounds=True)   # strict guards: raises on a violation
  np.testing.assert_array_equal(got, want)


def _window(seed, n=3000, start=-700):
  rng = np.random.default_rng(seed)
  w = np.exp(-0.5 * ((np.arange(n) - 900) / 120.0) ** 2) + 1e-9 * rng.random(n)
  return w / w.sum(), start


@pytest.mark.parametrize("want_epsilon", [True, False])
def test_read_out_of_the_nodes_a_query_reads_equals_the_full_read_out(want_epsilon):
  """With the window's full length, reading only from loss 0 (ε queries) or
  from the smallest queried ε (δ queries) gives the same bounds as reading
  every node (up to the summation-margin's dependence on the length)."""
  h = 2e-3
  rows = [_window(k) for k in range(3)]
  w = np.stack([r[0] for r in rows] * 2)
  start = np.array([r[1] for r in rows])
  m, size = len(rows), w.shape[1]
  queries = (np.array([[1e-2, 1e-5, 1e-9]] * m) if want_epsilon
             else np.array([[0.0, 0.1, 0.5]] * m))
  per_node = 4.0 * 1e-18 + 1e-16 / size
  args = (w, np.full(2 * m, per_node), start, np.full(m, h),
          np.full(m, 1e-12), queries, np.full(m, 1e-17), np.zeros((2, m)))
  w_, ne, st, hh, inf, qq, wr, sh = args
  up = _pld_readout.answer(w_[:m], ne[:m], st, hh, inf, qq, wr, sh[0], np.full(m, size),
                           want_epsilon=want_epsilon)
  lo = _pld_readout.answer(w_[m:], ne[m:], st, hh, inf, qq, wr, sh[1], np.full(m, size),
                           want_epsilon=want_epsilon, lower=True)
  ref_up, ref_lo = np.empty_like(up), np.empty_like(lo)
  for r in range(m):
    if want_epsilon:
      ref_up[r] = _pld_readout.epsilon_on_window(w[r], start[r], h, 1e-12, queries[r],
                                                 per_node=per_node)
      ref_lo[r] = _pld_readout.epsilon_on_window(w[m + r], start[r], h, 0.0, queries[r] + 1e-17,
                                                 lower=True, per_node=per_node)
    else:
      ref_up[r] = _pld_readout.delta_on_window(w[r], start[r], h, 1e-12, queries[r],
                                               per_node=per_node)
      ref_lo[r] = _pld_readout.delta_on_window(w[m + r], start[r], h, 0.0, queries[r],
                                               per_node=-per_node) - 1e-17
  if want_epsilon:
    # negative ε's are reported as 0
    up, lo, ref_up, ref_lo = (np.maximum(x, 0.0) for x in (up, lo, ref_up, ref_lo))
  np.testing.assert_allclose(up, ref_up, rtol=1e-11)
  np.testing.assert_allclose(lo, ref_lo, rtol=1e-11)
  assert np.all(lo <= up)


def test_read_range_edges():
  rr = _pld_readout._read_range  # pylint: disable=protected-access
  assert rr(-10, 0.5, 100, 0.0) == 9           # one node below loss 0
  assert rr(5, 0.5, 100, 0.0) == 0             # window above 0: all of it
  assert rr(-10, 0.5, 100, 1e9) == 99          # above the top: the top node only
  assert rr(-10, 0.5, 100, math.inf) == 99
  assert rr(-10, 0.5, 100, -math.inf) == 0
  assert rr(-10, 0.5, 100, math.nan) == 0


def test_truncation_budget_is_a_fraction_of_the_smallest_target_delta():
  tb = _pld_run._tail_budget  # pylint: disable=protected-access
  q = np.array([[1e-5, 1e-7], [0.5, 0.5], [1e-300, 1e-300]])
  np.testing.assert_allclose(tb(q, True, 2), [_pld_run.TAIL_FRACTION * 1e-7 / 2,
                                               _pld_run.TAIL_FRACTION * 0.5 / 2, pld_impl._TAIL])
  np.testing.assert_array_equal(tb(q, False, 1), [pld_impl._TAIL] * 3)


@pytest.mark.parametrize("q,sigma,steps,delta", [
    (0.001, 0.8, 1000, 1e-5),     # heavy one-step tail: the budget cuts most of the window
    (0.05, 0.5, 300, 1e-9),
    (1.0, 5.0, 50, 1e-6),
    (0.004, 1.1, 20000, 1e-12),
])
def test_budgeted_epsilon_interval_meets_the_general_engines(q, sigma, steps, delta):
  """The ε interval computed with the truncation budget overlaps the general
  engine's certified interval (its own tails and tilting), and its upper end
  is no more than 1e-3 relative above the general engine's upper end (the
  kernel's proven round-off bound costs up to ~6e-4 relative at δ = 1e-9;
  the empirical allowance it replaced, ~1e-5)."""
  lo, up = pld.epsilon(q, sigma, steps, delta, return_bounds=True)
  g_lo, g_up = pld_general.epsilon(poisson_phases(q, sigma, steps), delta, return_bounds=True)
  assert float(lo) <= float(g_up) and float(g_lo) <= float(up)
  assert float(up) <= float(g_up) * (1 + 1e-3) + (float(g_up) - float(g_lo))


def test_guard_one_step_epsilon_is_a_tight_lower_bound_over_the_domain():
  """The guards' host bisection (jaxdp._src.kernels.guards, NumPy, no compilation)
  against the harness's independent 200-step bisection and, on a sample,
  mpmath: never above the exact one-step ε, and within 1e-7 of it."""
  import harness_reference as hr
  from jaxdp._src.kernels import guards as _guards
  q, s, t, rng = _domain(400, 3)
  d = 10 ** rng.uniform(-14, -0.3, q.size)
  got = _guards.one_step_epsilon(q, s, d)
  ref = hr.one_step_epsilon(q, s, d)
  assert np.all(np.isfinite(got)) and np.all(got >= 0)
  assert np.all(got <= ref * (1 + 1e-12) + 1e-300)
  np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-300)
  for i in range(0, q.size, 80):
    exact = float(hr.mp_one_step_epsilon(q[i], s[i], d[i]))
    assert got[i] <= exact * (1 + 1e-12) and got[i] >= exact * (1 - 1e-7), (i, got[i], exact)


def test_coarsening_jumps_by_the_overshoot(monkeypatch):
  """An automatic grid that does not fit grows h by the overshoot in one
  step (it used to double, discretising and composing in full each time):
  with the composed window capped at 2^10 points, a 100-step Poisson
  question needs a coarser grid, reached after one failed attempt. The
  interval stays certified: it brackets the batched kernel's."""
  from jaxdp._src.pld import general as _general
  from jaxdp._src.pld import general_compose as _compose
  from jaxdp._src.mechanisms.registry import poisson_phases
  monkeypatch.setattr(_compose, "MAX_WINDOW", 2 ** 10)
  attempts = []
  real = _general.compose

  def counting(pmfs, counts, h, *args, **kwargs):
    try:
      return real(pmfs, counts, h, *args, **kwargs)
    except _compose.TooLarge as e:
      attempts.append((h, e.overshoot))
      raise

  monkeypatch.setattr(_general, "compose", counting)
  k_lo, k_up = pld.epsilon(0.01, 1.0, 100, 1e-5, return_bounds=True)
  # Without the coarser trial grid (general._first_attempt) the first attempt
  # overshoots > 4x; with it, <= 2.5x (at most two failed intervals either way).
  for trial, over in ((False, lambda o: o > 4.0), (True, lambda o: o <= 2.5)):
    attempts.clear()
    with monkeypatch.context() as m:
      if not trial:
        m.setattr(_general, "_first_attempt", lambda phases, h, *a: h)
      lo, up = _general.epsilon(poisson_phases(0.01, 1.0, 100), 1e-5, return_bounds=True)
    assert 1 <= len({h for h, _ in attempts}) <= 2, attempts
    assert over(max(o for _, o in attempts)), (trial, attempts)   # doubling: >= 3 attempts
    assert lo <= k_up and up >= k_lo and up < np.inf
  # the arithmetic: 1.1 x the overshoot, at least 1.25 x, 2 x where unknown
  assert _general._coarser(1.0, _compose.TooLarge(8 * 2 ** 10, 2 ** 10)) == pytest.approx(8.8)
  assert _general._coarser(1.0, _compose.TooLarge(1025, 1024)) == 1.25
  assert _general._coarser(1.0, _compose.TooLarge()) == 2.0
