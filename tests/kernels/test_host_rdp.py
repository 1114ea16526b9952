"""The host (NumPy, no compilation) path of one RDP question: jaxdp._src.kernels.host_rdp.

It must give the compiled path's answer (same formulas, other executor) over
the whole legal domain, be an upper bound by the independent mpmath
reference, compile nothing, and keep the calibration guarantees.
"""

import numpy as np
import pytest

import jaxdp
from jaxdp import calibrate
from jaxdp._src.kernels import rdp_driver as _rdp_driver
from jaxdp._src.accounting import rate as _rate
from jaxdp._src.solvers import boundary_eval as _calibrate_boundary
from jaxdp._src.kernels import host_rdp as _host_rdp
from jaxdp._src.kernels import order_search as _order_search
from jaxdp._src.core import numerics as nx

from reference import ref_rdp_to_epsilon, ref_sampled_gaussian_delta, ref_sgm_rdp
from jaxdp._src.kernels import rdp as rdp_impl


def _domain(n, seed):
  """Random configurations over the legal domain, edges included."""
  rng = np.random.default_rng(seed)
  q = 10**rng.uniform(-8, 0, n)
  sigma = 10**rng.uniform(np.log10(0.05), np.log10(50.0), n)
  steps = np.round(10**rng.uniform(0, 7, n))
  delta = 10**rng.uniform(-15, np.log10(0.5), n)
  eps = 10**rng.uniform(-3, 2, n)
  edges = [(0.0, 1.0, 10.0, 1e-5, 1.0), (1.0, 1.0, 10.0, 1e-5, 1.0),
           (1.0, 0.05, 1e6, 1e-15, 100.0), (1e-8, 50.0, 1.0, 0.5, 1e-3),
           (0.5, 1.0, 0.0, 1e-5, 0.0), (1e-3, 0.2, 1e7, 1e-12, 5.0),
           (1e-6, 0.01, 1e6, 1e-12, 5.0), (1.0, 0.01, 10.0, 1e-12, 100.0),
           (0.999, 0.01, 1e6, 1e-12, 1e-3)]
  for i, row in enumerate(edges):
    q[i], sigma[i], steps[i], delta[i], eps[i] = row
  return q, sigma, steps, delta, eps


def _compiled(kind, q, sigma, steps, x):
  with nx.x64():
    # More configurations than the host path takes: the compiled programs.
    pad = _host_rdp.MAX_CONFIGURATIONS + 1
    args = [np.concatenate([np.atleast_1d(a), np.full(pad, f)])
            for a, f in zip((q, sigma, steps, x), (0.5, 1.0, 1.0, 0.5))]
    return _rdp_driver.run_chunked(kind, *args, None, "improved")[:np.size(q)]


def _host(kind, q, sigma, steps, x, nodes=None):
  """One configuration at a time; with the quadrature nodes each one alone
  would use (``nodes=None``), or the given ones."""
  out = np.empty(q.size)
  for i in range(q.size):
    one = [np.array([a[i]]) for a in (q, sigma, steps, x)]
    n = rdp_impl._nodes_for(one[1]) if nodes is None else nodes
    out[i] = _host_rdp.minimum_over_all_orders(kind, "improved", *one, n)[0]
  if kind == "delta":
    out = _rdp_driver.delta_floor(out, q, steps, x)
  return out


def _agree(host, compiled, rtol):
  both = np.isfinite(host) & np.isfinite(compiled)
  assert np.array_equal(np.isfinite(host), np.isfinite(compiled))
  rel = np.abs(host[both] - compiled[both]) / np.maximum(np.abs(compiled[both]), 1e-300)
  assert rel.max(initial=0.0) <= rtol, rel.max()


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_host_equals_compiled_over_the_domain(kind):
  q, sigma, steps, delta, eps = _domain(40, seed=1)
  x = delta if kind == "epsilon" else eps
  _agree(_host(kind, q, sigma, steps, x, rdp_impl._nodes_for(sigma)),
         _compiled(kind, q, sigma, steps, x), 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_host_equals_compiled_exhaustive(kind):
  q, sigma, steps, delta, eps = _domain(400, seed=2)
  x = delta if kind == "epsilon" else eps
  _agree(_host(kind, q, sigma, steps, x, rdp_impl._nodes_for(sigma)),
         _compiled(kind, q, sigma, steps, x), 1e-12)


def _host_every_order(kind, q, sigma, steps, x, nodes):
  """The host path evaluating every default order (the grid minimum by brute
  force, then the same refinement): what the host path computed before it
  took the order search."""
  from jaxdp._src.kernels import continuous_order, rdp_convert
  orders = rdp_impl.DEFAULT_ORDERS
  with np.errstate(all="ignore"):
    total = steps[:, None] * _host_rdp.grid_rdp(q, sigma, orders, nodes)
    if kind == "epsilon":
      grid = rdp_convert.to_epsilon_xp(total, orders, x, "improved", np)[0]
      per_order = rdp_convert.epsilon_per_order(total, orders, x, "improved", np)[0]
    else:
      grid = rdp_convert.to_delta_xp(total, orders, x, np)
      per_order = rdp_convert.log_delta_per_order(total, orders, x, np)[0]
    best = np.argmin(per_order, axis=1)
    return continuous_order.refine(kind, "improved", nodes, grid, orders, best, q, sigma,
                                   steps, x, xp=np)


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_host_search_equals_every_order_bitwise(kind):
  """Skipping the orders that cannot win changes no value, at either node count."""
  q, sigma, steps, delta, eps = _domain(60, seed=3)
  x = delta if kind == "epsilon" else eps
  for nodes, sel in ((64, np.ones(q.size, bool)), (40, sigma >= 0.5)):
    args = [a[sel] for a in (q, sigma, steps, x)]
    np.testing.assert_array_equal(
        _host_rdp.minimum_over_all_orders(kind, "improved", *args, nodes),
        _host_every_order(kind, *args, nodes))


@pytest.mark.parametrize("q,sigma,steps,delta", [
    (0.0042667, 1.1, 14062, 1e-5), (0.01, 0.4, 1000, 1e-6), (1e-4, 4.0, 1e6, 1e-10),
    (0.2, 0.25, 50, 1e-3)])
def test_host_value_is_an_upper_bound_at_its_order(q, sigma, steps, delta):
  """ε ≥ the mpmath conversion of the mpmath RDP at the order it reports."""
  args = [np.array([v], np.float64) for v in (q, sigma, steps, delta)]
  value, alpha = _host_rdp.minimum_over_all_orders("epsilon", "improved", *args,
                                                   rdp_impl._nodes_for(args[1]), with_order=True)
  a = float(alpha[0])
  ref = float(ref_rdp_to_epsilon(steps * float(ref_sgm_rdp(q, sigma, a)), a, delta))
  assert value[0] >= ref
  # Rounded up by the safety factor (2e-7 relative extra for σ in [0.2, 0.3)).
  assert value[0] <= ref * (1 + 1e-6)


def test_first_questions_compile_nothing(monkeypatch, cold_programs, record_compilations):
  """A fresh process's question: no XLA compilation at all (RDP ε, δ, σ)."""
  monkeypatch.setattr(_rdp_driver._host_questions, "left", _rdp_driver._HOST_QUESTIONS)
  with record_compilations() as compiles:
    e = jaxdp.epsilon(0.0123, 1.37, 4321, 1e-6)
    d = jaxdp.delta(0.0123, 1.37, 4321, float(e))
    s = calibrate.sigma(2.5, 1e-6, 0.0123, 4321)
  assert compiles == []
  assert 0 < d <= 1e-6 * (1 + 1e-9)
  assert np.isfinite(s) and s > 0


def test_a_loop_of_single_questions_compiles_nothing(monkeypatch, cold_programs,
                                                     record_compilations):
  """20 single questions, as a calibration loop asks them (tradeoff.calibrate_sigma
  asks one per round): all on the host. With a budget of 8, the 9th built the
  16-configuration chunk's programs (2.9 s against ~30 ms per host question)."""
  monkeypatch.setattr(_rdp_driver._host_questions, "left", _rdp_driver._HOST_QUESTIONS)
  q, sigma, steps, delta, _ = _domain(20, seed=9)
  with record_compilations() as compiles:
    eps = [float(jaxdp.epsilon(q[i], sigma[i], steps[i], delta[i])) for i in range(20)]
  assert compiles == []
  assert _rdp_driver._host_questions.left == _rdp_driver._HOST_QUESTIONS - 20
  assert all(np.isfinite(e) and e >= 0 for e in eps)


# dp_accounting's default orders, and an irregular list.
DP_ORDERS = np.concatenate([1.0 + np.arange(1, 100) / 10.0, np.arange(11, 64), [128, 256, 512, 1024]])
ODD_ORDERS = np.array([1.5, 2.0, 3.0, 5.0, 7.5, 12.0, 40.0, 64.0, 100.0, 333.0, 5000.0])


@pytest.mark.parametrize("orders", [DP_ORDERS, ODD_ORDERS], ids=["dp_accounting", "odd"])
def test_explicit_orders_on_the_host_equal_the_compiled_path(orders):
  q, sigma, steps, delta, eps = _domain(40, seed=4)
  pl = _order_search.plan(tuple(float(o) for o in orders))
  with nx.x64():
    for kind, x in (("epsilon", delta), ("delta", eps)):
      host = _host_rdp.grid_minimum(kind, "improved", pl, q, sigma, steps, x,
                                    rdp_impl._nodes_for(sigma))[0]
      if kind == "delta":
        host = _rdp_driver.delta_floor(host, q, steps, x)
      compiled = _rdp_driver.run_chunked(kind, q, sigma, steps, x, orders, "improved")
      _agree(host, compiled, 1e-12)


def test_an_explicit_order_question_compiles_nothing(monkeypatch, cold_programs,
                                                     record_compilations):
  """mathematics.md's comparison with dp_accounting's orders took ~7 s to compile."""
  monkeypatch.setattr(_rdp_driver._host_questions, "left", _rdp_driver._HOST_QUESTIONS)
  with record_compilations() as compiles:
    e = jaxdp.epsilon(0.001, 0.5356, 100, 1e-5, orders=DP_ORDERS)
    d = jaxdp.delta(0.001, 0.5356, 100, 3.0, orders=DP_ORDERS)
  assert compiles == []
  # dp_accounting's RdpAccountant at the same orders (its fractional-order series
  # differs from jaxdp's quadrature in the 7th digit).
  import dp_accounting as dpa
  acc = dpa.rdp.RdpAccountant(list(DP_ORDERS))
  acc.compose(dpa.PoissonSampledDpEvent(0.001, dpa.GaussianDpEvent(0.5356)), 100)
  np.testing.assert_allclose(e, acc.get_epsilon(1e-5), rtol=1e-5)
  np.testing.assert_allclose(d, acc.get_delta(3.0), rtol=1e-5)


def test_small_calibration_rounds_compile_nothing_then_agree(monkeypatch, cold_programs,
                                                             record_compilations):
  """Three targets (48 probes a round, beyond the 16-configuration host
  chunk) in a fresh process: the rounds run on the host while its round
  budget lasts, so nothing is compiled (the README's calibration took ~17 s
  to compile before); with the budget spent, the compiled rounds give σ
  within 1e-9 relative (the host's 1e-10 margin), and each σ meets its
  target by jaxdp.epsilon on both of its paths and is tight to rtol."""
  targets, q, steps = np.array([1.0, 3.0, 8.0]), 0.0123, 4321
  monkeypatch.setattr(_rdp_driver._host_questions, "left", _rdp_driver._HOST_QUESTIONS)
  monkeypatch.setattr(_calibrate_boundary._host_rounds, "left", _calibrate_boundary._HOST_ROUNDS)
  with record_compilations() as compiles:
    on_host = calibrate.sigma(targets, 1e-5, q, steps)
  assert compiles == []
  assert _calibrate_boundary._host_rounds.left < _calibrate_boundary._HOST_ROUNDS
  cold_programs()   # caches back on for the compiled rounds
  monkeypatch.setattr(_calibrate_boundary._host_rounds, "left", 0)
  compiled = calibrate.sigma(targets, 1e-5, q, steps)
  np.testing.assert_allclose(on_host, compiled, rtol=1e-9)
  for sigma in (on_host, compiled):
    for left in (_rdp_driver._HOST_QUESTIONS, 0):   # jaxdp.epsilon on the host, then compiled
      monkeypatch.setattr(_rdp_driver._host_questions, "left", left)
      assert np.all(jaxdp.epsilon(q, sigma, steps, 1e-5) <= targets)
      monkeypatch.setattr(_rdp_driver._host_questions, "left", left)
      assert np.all(jaxdp.epsilon(q, sigma * (1 - 1e-6), steps, 1e-5) > targets)


def test_later_questions_use_the_compiled_programs(monkeypatch):
  monkeypatch.setattr(_rdp_driver._host_questions, "left", 0)
  calls = []
  monkeypatch.setattr(_host_rdp, "minimum_over_all_orders",
                      lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(AssertionError))
  jaxdp.epsilon(0.01, 1.0, 100, 1e-5)
  assert calls == []


@pytest.mark.parametrize("target,q,steps", [(3.0, 0.0042667, 14062), (0.5, 0.01, 1000),
                                            (8.0, 0.1, 50000), (1.0, 1e-3, 10**6)])
def test_host_calibration_meets_the_target_on_both_paths(monkeypatch, target, q, steps):
  sigma = float(calibrate.sigma(target, 1e-5, q, steps))
  for left in (_rdp_driver._HOST_QUESTIONS, 0):   # host path, then the compiled one
    monkeypatch.setattr(_rdp_driver._host_questions, "left", left)
    assert jaxdp.epsilon(q, sigma, steps, 1e-5) <= target
    monkeypatch.setattr(_rdp_driver._host_questions, "left", left)
    assert jaxdp.epsilon(q, sigma * (1 - 1e-6), steps, 1e-5) > target


def test_host_margin_covers_the_two_paths():
  """The calibration margin is far above the host/compiled difference."""
  q, sigma, steps, delta, _ = _domain(12, seed=3)
  host = _host("epsilon", q, sigma, steps, delta)
  compiled = _compiled("epsilon", q, sigma, steps, delta)
  fin = np.isfinite(host) & (compiled > 0)
  rel = np.abs(host[fin] - compiled[fin]) / compiled[fin]
  assert rel.max() * 100 < _calibrate_boundary._HOST_MARGIN


@pytest.mark.parametrize("q,sigma,steps,delta", [
    (0.0042667, 1.1, 14062, 1e-5),
    (1.0, 0.05, 10, 1e-12),
    pytest.param(1e-6, 0.01, 10**6, 1e-12, marks=pytest.mark.slow),
    pytest.param(0.999, 0.05, 1000, 1e-12, marks=pytest.mark.slow)])
def test_tight_one_is_sound_at_the_edges(q, sigma, steps, delta):
  """The CLI's one-question answer: finite, ordered, never above RDP, and a
  valid ε by the exact one-step profile in mpmath (δ_1(ε) <= δ_T(ε) <= δ)."""
  lo, up, rdp_up = _rate.tight_one("epsilon", q, sigma, steps, delta)
  value = min(up, rdp_up)
  assert np.isfinite(value) and 0 <= lo <= value <= rdp_up
  for direction in ("remove", "add"):
    assert float(ref_sampled_gaussian_delta(value, q, sigma, direction)) <= delta * (1 + 1e-9)


def test_steps_guess_on_the_host_gives_the_compiled_answers():
  """calibrate.steps on a few configurations takes its closed-form guess from
  host per-step RDP; the (exactly verified) answers equal the batched path's."""
  rng = np.random.default_rng(5)
  n = 12
  t = rng.uniform(0.3, 10, n)
  q = 10 ** rng.uniform(-4, 0, n)
  s = rng.uniform(0.3, 5, n)
  d = 10 ** rng.uniform(-10, -3, n)
  few = calibrate.steps(t, d, q, s)   # n <= 16: host guess
  many = calibrate.steps(*(np.tile(a, 2) for a in (t, d, q, s)))[:n]   # compiled guess
  np.testing.assert_array_equal(few, many)


def test_pld_guard_ceiling_on_the_host_then_compiled(monkeypatch):
  """The RDP ceiling of a guarded PLD answer: on the host for up to
  _PLD_GUARD_HOST_MAX configurations while the budget lasts (no RDP program
  compiled), the compiled programs afterwards and beyond that size; both
  give the same values (5e-13 relative; NumPy's and XLA's transcendentals
  differ, 3.1e-13 at σ = 0.01, ε ~ 1e8) for 40 configurations of the domain."""
  q, sigma, steps, delta, eps = _domain(40, seed=5)
  host_calls = []
  real = _host_rdp.minimum_over_all_orders

  def spy(*a, **k):
    host_calls.append(a[2].size)
    return real(*a, **k)

  monkeypatch.setattr(_host_rdp, "minimum_over_all_orders", spy)
  monkeypatch.setattr(_rdp_driver._host_questions, "left", 0)
  for kind, x in (("epsilon", delta), ("delta", eps)):
    monkeypatch.setattr(_rdp_driver._pld_guard_questions, "left", 1)
    with nx.x64():
      on_host = _rdp_driver.guard_rdp(kind, q, sigma, steps, x)
      assert host_calls == [40] and _rdp_driver._pld_guard_questions.left == 0
      compiled = _rdp_driver.guard_rdp(kind, q, sigma, steps, x)   # budget spent
      assert host_calls == [40]
    _agree(on_host, compiled, 5e-13)
    host_calls.clear()
  monkeypatch.setattr(_rdp_driver._pld_guard_questions, "left", 5)
  n = _rdp_driver._PLD_GUARD_HOST_MAX + 1
  with nx.x64():
    _rdp_driver.guard_rdp("epsilon", np.full(n, 0.01), np.ones(n), np.full(n, 100.0), np.full(n, 1e-5))
  assert host_calls == [] and _rdp_driver._pld_guard_questions.left == 5


@pytest.mark.parametrize("kind", ["epsilon", "delta"])
def test_repeated_configurations_are_computed_once_with_the_same_bits(kind, monkeypatch):
  """The host path evaluates each distinct (q, σ) table and (q, σ, α)
  quadrature once (a PLD profile's RDP guard asks one (q, σ) at every ε of
  its grid): the answers of a batch with repeated rows are those of each
  row asked alone, bit for bit, and the quadrature sees fewer points."""
  q, sigma, steps, delta, eps = _domain(12, seed=8)
  x = delta if kind == "epsilon" else eps
  rep = np.repeat(np.arange(12), 5)                  # each configuration five times,
  xs = x[rep] * np.tile([1.0, 0.5, 0.25, 2.0, 1.0], 12)[: rep.size] ** (kind == "delta")
  seen = []
  real = rdp_impl.quadrature_rdp
  monkeypatch.setattr(rdp_impl, "quadrature_rdp",
                      lambda q, s, a, nodes, xp: seen.append(np.size(a)) or real(q, s, a, nodes, xp))
  with nx.x64():
    together = _host_rdp.minimum_over_all_orders(kind, "improved", q[rep], sigma[rep], steps[rep],
                                                 xs, rdp_impl.NODES_PER_WINDOW)
    points = sum(seen)
    alone = np.concatenate([
        _host_rdp.minimum_over_all_orders(kind, "improved", q[rep][i:i + 1], sigma[rep][i:i + 1],
                                          steps[rep][i:i + 1], xs[i:i + 1],
                                          rdp_impl.NODES_PER_WINDOW)
        for i in range(rep.size)])
  np.testing.assert_array_equal(together, alone)
  assert points < sum(seen) - points     # repeated rows share their quadrature points
