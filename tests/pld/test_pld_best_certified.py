"""Issue 35, point 3: every public PLD surface reports the best certified answer.

Wherever one engine answers +∞ or above another certified path (the RDP
bound, the general engine :mod:`jaxdp.pld_general`), ``jaxdp.pld.epsilon`` /
``pld.delta`` (with and without ``return_bounds``), ``jaxdp.epsilon`` /
``jaxdp.delta`` with ``accountant="pld"``, ``jaxdp.accountant.pld()`` and
``epsilon_batch`` / ``delta_batch`` report the same number: min(kernel upper,
general upper, RDP upper) (:mod:`jaxdp._src.pld.fallback`).

References are independent of the code under test where they can be: the
RDP answer is ``jaxdp.epsilon(..., accountant="rdp")`` (another engine; the
rule is "never above it"), the lower reference is the exact one-step ε of
``tests/harness_reference.py`` (SciPy, a lower bound on every composition)
and the certified lower ends of the two PLD engines. dp_accounting's PLD is
no oracle at δ = 1e-12 (its own FFT round-off: q = 1e-3, σ = 1, T = 10⁵
gives 5.1-5.8 where the RDP bound is 3.20), so it is not used here.

Pre-fix, ``pld.epsilon(1e-3, 1, 10**6, 1e-12)`` and ``accountant.pld()``
answered 12.236 > RDP 10.168, ``accountant.pld()`` 4.166 > 3.201 at
T = 10⁵, and 1774.9 > 1455.4 at q = 0.01, σ = 0.05, T = 10, while
``jaxdp.epsilon(..., accountant="pld")`` answered the RDP value: the tests
below fail there.
"""

import harness_reference as hr
import numpy as np
import pytest

import jaxdp
from jaxdp import accountant, events, pld, pld_accountant, pld_general
from jaxdp._src.pld import fallback as _pld_fallback
from jaxdp._src.mechanisms.registry import poisson_phases
from jaxdp._src.pld import kernel as pld_impl

ROW3 = [(1e-3, 1.0, 10**6, 1e-8), (1e-3, 1.0, 10**6, 1e-12), (1e-3, 1.0, 10**5, 1e-12),
        (0.01, 0.05, 10, 1e-12)]
# Relative slack for "never above RDP": the upper end is raised back to a
# certified lower end that passed the guards' 1e-9 tolerance (_guards._REL),
# and jaxdp.epsilon's RDP value may come from the host or the compiled
# path (they agree to 2e-13, tests/kernels/test_host_rdp.py).
RDP_SLACK = 1e-9


def _surfaces(name, q, sigma, steps, value):
  """The upper answer of every public surface to one question, and
  pld's return_bounds interval."""
  ev = events.SampledGaussian(q, sigma)
  acc = accountant.pld()
  state = acc.compose(acc.init(), ev, int(steps))
  lo, up = getattr(pld, name)(q, sigma, steps, value, return_bounds=True)
  ups = dict(
      pld=float(getattr(pld, name)(q, sigma, steps, value)),
      pld_bounds=float(up),
      api=float(getattr(jaxdp, name)(q, sigma, steps, value, accountant="pld")),
      acc=float(getattr(acc, name)(state, value)),
      acc_bounds=float(getattr(acc, name)(state, value, return_bounds=True)[1]),
      batch=float(getattr(pld_accountant, f"{name}_batch")([[(ev, int(steps))]], value)[0]))
  return float(lo), ups


def _check_best(name, q, sigma, steps, value, lower_refs=()):
  """Every surface: one number, finite, <= RDP, >= every lower reference."""
  lo, ups = _surfaces(name, q, sigma, steps, value)
  answer = ups["pld"]
  assert all(u == answer for u in ups.values()), ups           # bitwise, same process
  assert np.isfinite(answer), ups
  rdp_fn = jaxdp.epsilon if name == "epsilon" else jaxdp.delta
  rdp = float(rdp_fn(q, sigma, steps, value))
  assert answer <= rdp * (1 + RDP_SLACK), (answer, rdp)
  assert lo <= answer, (lo, answer)
  for ref in lower_refs:
    assert answer >= ref * (1 - 1e-9), (answer, ref)
  return lo, answer, rdp


def _one_step_epsilon(q, sigma, delta):
  """Exact one-step ε (SciPy, independent of jaxdp): a lower bound on ε_T."""
  return float(hr.one_step_epsilon(q, sigma, delta))


def test_beyond_the_cap_no_surface_answers_above_rdp(monkeypatch):
  """Row 3, q = 0.01, σ = 0.05, T = 10, δ = 1e-12, with the general engine
  switched off (as beyond MAX_CONFIGURATIONS): the kernel's upper end was
  1774.9 (pld.epsilon and accountant.pld()) against the RDP answer 1455.4
  (jaxdp.epsilon(..., accountant="pld")). Now every surface reports the same
  number, at most the RDP answer and at least the certified lower end."""
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  q, s, t, d = ROW3[3]
  lo, answer, rdp = _check_best("epsilon", q, s, t, d, [_one_step_epsilon(q, s, d)])
  assert answer <= rdp


def test_kernel_infinite_general_engine_finite(monkeypatch):
  """Where the kernel's upper ε is +∞ (its round-off allowance reaching δ;
  forced here by replacing the kernel's upper end with +∞, which keeps it a
  valid upper bound) and the general engine answers finitely, every surface
  reports min(general upper, RDP): finite, equal, and inside the general
  engine's certified interval. Pre-fix, accountant.pld() answered +∞."""
  real = pld_impl._run_within_memory

  def kernel_with_infinite_upper(*args, **kwargs):
    up, lo = real(*args, **kwargs)
    return np.full_like(up, np.inf), lo

  monkeypatch.setattr(pld_impl, "_run_within_memory", kernel_with_infinite_upper)
  q, s, t, d = 0.01, 1.0, 1000, 1e-8
  g_lo, g_up = pld_general.epsilon(poisson_phases(q, s, t), np.asarray([d]), return_bounds=True)
  g_lo, g_up = float(g_lo[0]), float(g_up[0])
  assert np.isfinite(g_up)
  lo, answer, rdp = _check_best("epsilon", q, s, t, d, [g_lo, _one_step_epsilon(q, s, d)])
  assert answer == min(g_up, rdp)
  assert answer <= g_lo * (1 + 1e-3)    # the general engine is tight here (RDP is ~10% above)


@pytest.mark.slow
def test_delta_beyond_the_cap_equal_on_every_surface(monkeypatch):
  """δ side of the beyond-the-cap case: the same δ on every surface, at most
  the RDP δ, at least the exact one-step δ (SciPy)."""
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  q, s, t, eps = 0.01, 0.05, 10, 1400.0
  one = float(hr.one_step_delta(eps, q, s))
  _check_best("delta", q, s, t, eps, [one])


def test_combine_never_lowers_the_upper_end_below_a_lower_end():
  """:func:`combine` intersects; where the other upper bound falls below the
  lower end (a bug elsewhere) the upper end is raised back to it."""
  lo, up = _pld_fallback.combine(np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0]),
                                 np.array([0.5, 1.5, 1.2]), np.array([3.0, 1.8, 0.9]))
  np.testing.assert_array_equal(lo, [1.0, 1.5, 1.2])
  np.testing.assert_array_equal(up, [2.0, 1.8, 1.2])
  lo, up = _pld_fallback.combine(np.array([1.0, 1.0]), np.array([2.0, np.inf]), None,
                                 np.array([1.5, 0.5]))
  np.testing.assert_array_equal(up, [1.5, 1.0])


def test_the_cap_takes_the_widest_first(monkeypatch):
  """Beyond MAX_CONFIGURATIONS the general engine is asked for the widest
  intervals first (+∞ before finite), stub engine (no seconds)."""
  asked = []

  def general(q, sigma, steps, deltas, rtol):
    asked.append(q)
    return np.full(len(deltas), 1.0), np.full(len(deltas), 1.1)

  monkeypatch.setattr(_pld_fallback, "_general", general)
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 2)
  q = np.array([0.1, 0.2, 0.3, 0.4])
  lo = np.array([0.9, 0.9, 0.9, 0.9])
  up = np.array([1.5, np.inf, 3.0, 1.2])
  ones = np.ones(4)
  _, new_up = _pld_fallback.finite_epsilon(q, ones, 100 * ones, 1e-5 * ones, lo, up, 1e-3)
  assert sorted(asked) == [0.2, 0.3]
  np.testing.assert_array_equal(new_up, [1.5, 1.1, 1.1, 1.2])


@pytest.mark.slow
@pytest.mark.parametrize("case", ROW3)
def test_row3_every_surface_answers_the_best_certified(case):
  """Row 3's four cases, general engine on: one number on every surface,
  finite, at most the RDP answer, at least the certified lower end and the
  exact one-step ε."""
  q, s, t, d = case
  _check_best("epsilon", q, s, t, d, [_one_step_epsilon(q, s, d)])


@pytest.mark.slow
@pytest.mark.parametrize("case", ROW3[1:3])
def test_row3_beyond_the_cap(case, monkeypatch):
  """Row 3's δ = 1e-12 cases with the general engine off: still at most the
  RDP answer on every surface (pre-fix 12.236 > 10.168 and 4.166 > 3.201)."""
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  q, s, t, d = case
  _check_best("epsilon", q, s, t, d, [_one_step_epsilon(q, s, d)])


def test_multi_phase_accountant_never_above_rdp(monkeypatch):
  """accountant.pld() with two Poisson-sampled Gaussian phases (the fast
  kernel's multi-phase path, no single-phase surface to agree with): with
  the kernel's upper end forced to +∞ and the general engine off (beyond the
  cap) the answer is the RDP bound of the summed curves, finite (pre-fix:
  +∞) and within 1% of dp_accounting's RDP accountant (a test-only oracle;
  orders and conversion differ slightly); ``epsilon_batch`` agrees."""
  import dp_accounting as dpa
  real = pld_impl._run_within_memory

  def kernel_with_infinite_upper(*args, **kwargs):
    up, lo = real(*args, **kwargs)
    return np.full_like(up, np.inf), lo

  monkeypatch.setattr(pld_impl, "_run_within_memory", kernel_with_infinite_upper)
  monkeypatch.setattr(_pld_fallback, "MAX_CONFIGURATIONS", 0)
  phases = [(events.SampledGaussian(0.01, 1.0), 200), (events.SampledGaussian(0.02, 2.0), 300)]
  acc = accountant.pld()
  state = acc.init()
  for ev, c in phases:
    state = acc.compose(state, ev, c)
  lo, up = acc.epsilon(state, 1e-6, return_bounds=True)
  ref = dpa.rdp.RdpAccountant()
  for ev, c in phases:
    ref.compose(dpa.PoissonSampledDpEvent(ev.q, dpa.GaussianDpEvent(ev.sigma)), c)
  rdp_ref = ref.get_epsilon(1e-6)
  assert np.isfinite(up) and lo <= up <= rdp_ref * 1.01, (lo, up, rdp_ref)
  assert float(pld_accountant.epsilon_batch([phases], 1e-6)[0]) == float(up)


@pytest.mark.slow
@pytest.mark.parametrize("case", ROW3)
def test_row3_width_at_most_one_percent(case):
  """Issue 35's width goal on row 3: the public certified interval is at most
  1% wide (before: 0.36%, 17%, 8.6%, 8.6% after the best-certified rule,
  31%, 38%, 25% for the kernel alone). Rests on the engines' tightness at
  δ = 1e-12 (the kernel's tilted pass), not on this module: the general
  engine alone is 9% wide on the third case (its tilt is capped at
  600 / window width, 7.3 against the Chernoff-optimal 19)."""
  q, s, t, d = case
  lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
  assert np.isfinite(up) and up - lo <= 0.01 * up, (lo, up)


@pytest.mark.slow
def test_cli_one_question_no_worse_than_python():
  """The CLI's one-question path (jaxdp._src.accounting.rate.tight_one, general engine
  first): where the general engine's interval is over 1% wide (8.6% at
  q = 1e-3, σ = 1, T = 10⁵, δ = 1e-12, [2.7956, 3.0570]) it takes the
  batched path's best answer too, so it reports what Python reports
  (pre-change the CLI said 3.0570 and jaxdp.epsilon(..., "pld") 3.2007)."""
  from jaxdp._src.accounting import rate as _rate
  q, s, t, d = ROW3[2]
  lo, up, rdp_up = _rate.tight_one("epsilon", q, s, t, d)
  assert min(up, rdp_up) == float(jaxdp.epsilon(q, s, t, d, accountant="pld"))
  assert lo >= _one_step_epsilon(q, s, d)


def test_rdp_epsilon_lower_bound_is_below_the_full_value_over_the_domain():
  """jaxdp._src.kernels.host_rdp.epsilon_lower_bound (which lets the PLD paths skip the full
  RDP value where the PLD upper end is below it) never exceeds the full
  default-path RDP ε, over a log-uniform sample of the whole domain (q
  1e-6..1, σ 0.3..30, T 1..1e6, δ 1e-14..0.1), and is close to it in the
  DP-SGD regime (MNIST: within 2%). Where the full value is 0 (the KL
  clause) it is not compared: the floor is used only where ε > 0 is
  certified."""
  from jaxdp._src.kernels import rdp_driver as _rdp_driver
  from jaxdp._src.kernels import host_rdp as _host_rdp
  from jaxdp._src.core.numerics import x64
  rng = np.random.default_rng(35)
  n = 240
  q = 10 ** rng.uniform(-6, 0, n)
  s = 10 ** rng.uniform(np.log10(0.3), np.log10(30), n)
  t = np.round(10 ** rng.uniform(0, 6, n))
  d = 10 ** rng.uniform(-14, -1, n)
  with x64():
    floor = _host_rdp.epsilon_lower_bound(q, s, t, d)
    full = _rdp_driver.guard_rdp("epsilon", q, s, t, d)
    mnist = _host_rdp.epsilon_lower_bound(np.array([256 / 60000]), np.array([1.1]),
                                    np.array([14040.0]), np.array([1e-5]))
    mnist_full = _rdp_driver.guard_rdp("epsilon", 256 / 60000, 1.1, 14040, 1e-5)
  # Where the full value is 0 its KL clause fired at some order; the floor
  # leaves that clause out and is used only where a certified lower ε > 0
  # exists (then the full value is > 0 too).
  pos = full > 0
  assert np.sum(pos) >= 150   # most of the sample has ε > 0
  assert np.all(floor[pos] <= full[pos] * (1 + 1e-12) + 1e-12), np.flatnonzero(floor > full)
  assert mnist_full * 0.98 <= float(mnist[0]) <= mnist_full


def test_rdp_delta_lower_bound_is_below_the_full_value_over_the_domain():
  """jaxdp._src.kernels.host_rdp.delta_lower_bound (which lets ``pld.delta`` skip
  the full RDP δ where the PLD upper end is below it) never exceeds the
  full default-path RDP δ over a log-uniform sample of the whole domain (q
  1e-6..1, σ 0.05..30, T 1..1e6, ε 0..100, with ε = 0, q = 0 and q = 1),
  KL clause included, and is close to it in the DP-SGD regime (MNIST at
  ε = 1: within 20%)."""
  from jaxdp._src.kernels import rdp_driver as _rdp_driver
  from jaxdp._src.kernels import host_rdp as _host_rdp
  from jaxdp._src.core.numerics import x64
  rng = np.random.default_rng(36)
  n = 240
  q = 10 ** rng.uniform(-6, 0, n)
  s = 10 ** rng.uniform(np.log10(0.05), np.log10(30), n)
  t = np.round(10 ** rng.uniform(0, 6, n))
  e = 10 ** rng.uniform(-3, 2, n)
  q[:3], e[3:8] = [0.0, 1.0, 1.0], 0.0
  with x64():
    floor = _host_rdp.delta_lower_bound(q, s, t, e)
    full = _rdp_driver.guard_rdp("delta", q, s, t, e)
    mnist = _host_rdp.delta_lower_bound(*(np.array([v]) for v in (256 / 60000, 1.1, 3750.0, 1.0)))
    mnist_full = _rdp_driver.guard_rdp("delta", 256 / 60000, 1.1, 3750, 1.0)
  assert np.all(floor <= full * (1 + 1e-12)), np.flatnonzero(floor > full * (1 + 1e-12))
  assert mnist_full * 0.8 <= float(mnist[0]) <= mnist_full


def test_pld_delta_skips_the_full_rdp_value_only_where_the_answer_cannot_move(monkeypatch):
  """``pld.delta`` (and the trade-off curves built on it) computes the full
  RDP δ only where it may be below the PLD upper end: its answers are bit
  for bit those of the path that computes it everywhere, on a trade-off ε
  grid, where the full value is skipped for most ε, and on a small batch
  (ε = 0, 30 and ∞ included; the floor is loose at large ε, where tiny δ
  then need the full value)."""
  from jaxdp._src.pld import kernel_guards as _kernel_guards
  from jaxdp._src.core.numerics import x64
  q = np.array([256 / 60000, 1e-3, 0.01, 0.05, 0.02, 0.004])
  s = np.array([1.1, 2.0, 0.8, 3.0, 1.0, 0.9])
  t = np.array([3750.0, 5000.0, 1000.0, 100.0, 10.0, 2000.0])
  e = np.array([1.0, 0.0, 2.5, 30.0, np.inf, 0.3])
  grid = np.linspace(0.0, 3.0, 64)   # a profile's ε grid: one (q, σ, T)
  for args, most in [((256 / 60000, 1.1, 3750, grid), True), ((q, s, t, e), False)]:
    asked = []
    real = _kernel_guards._full_rdp
    monkeypatch.setattr(_kernel_guards, "_full_rdp",
                        lambda name, flat: asked.append(flat[0].size) or real(name, flat))
    with x64():
      lo, up, _ = pld_impl.guarded_bounds("delta", *args, best=True, rdp_value=False)
      skipped = np.size(up) - sum(asked)
      monkeypatch.setattr(_kernel_guards, "_full_rdp", real)
      lo_full, up_full, _ = pld_impl.guarded_bounds("delta", *args, best=True)
    np.testing.assert_array_equal(up, up_full)
    np.testing.assert_array_equal(lo, lo_full)
    assert skipped > (np.size(up) / 2 if most else 0), (skipped, np.size(up))
    if most:
      np.testing.assert_array_equal(pld.delta(*args), up)   # the public call takes this path
