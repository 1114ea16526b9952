"""The tight calibration of one question (jaxdp._src.solvers.tight, `jaxdp calibrate`).

Independent references: the Gaussian mechanism's exact privacy profile in
mpmath (q = 1 composes exactly: T steps at σ are one step at σ/√T), the
exact one-step Poisson-sampled profile by mpmath integration
(tests/reference.py), the answer path itself (`jaxdp epsilon`'s tight value,
`_rate.tight_one`) and dp_accounting's PLD calibration as a test-only oracle.
"""

import math
import os

import mpmath as mp
import numpy as np
import pytest

from jaxdp import calibrate, pld, pld_general
from jaxdp._src.accounting import rate as _rate
from jaxdp._src.solvers import tight as _tight_calibrate
from reference import ref_sampled_gaussian_delta
from jaxdp._src.pld import general as pld_general_impl


def _gaussian_delta(epsilon, mu):
  """Exact δ(ε) of the Gaussian mechanism with sensitivity/σ = μ (mpmath)."""
  with mp.workdps(40):
    e, m = mp.mpf(epsilon), mp.mpf(mu)
    return mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2)


def _reported(q, sigma, steps, delta):
  """The value `jaxdp epsilon` prints: min(PLD upper, RDP)."""
  _, up, rdp_up = _rate.tight_one("epsilon", q, sigma, steps, delta)
  return min(up, rdp_up)


CASES = [  # target ε, δ, q, steps
    (3.0, 1e-5, 0.0042667, 14062),       # the README's MNIST question
    (1.0, 1e-6, 0.01, 1000),
    (8.0, 1e-5, 0.1, 100),
    (0.2, 1e-10, 1e-3, 20000),
    (1.0, 1e-5, 1e-3, 10),               # far from RDP (0.81) and steep: false position
    pytest.param(1.0, 1e-5, 1e-4, 100, marks=pytest.mark.slow),
    pytest.param(20.0, 1e-3, 0.5, 10, marks=pytest.mark.slow),
    pytest.param(0.5, 1e-5, 1e-4, 10**6, marks=pytest.mark.slow),
    pytest.param(2.0, 1e-8, 1.0, 1, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("target,delta,q,steps", CASES)
def test_answer_meets_the_target_as_jaxdp_epsilon_reports_it(target, delta, q, steps):
  ans = _tight_calibrate.tight_sigma(target, delta, q, steps)
  assert 0 < ans.bound < ans.value <= ans.rdp
  assert _reported(q, ans.value, steps, delta) <= target
  # tight: a σ 2·rtol lower fails (the bracket's infeasible end is within rtol)
  assert _reported(q, ans.value * (1 - 2e-3), steps, delta) > target
  # the RDP answer is the RDP calibration itself
  assert ans.rdp == float(calibrate.sigma(target, delta, q, steps))


@pytest.mark.parametrize("target,delta,steps", [(3.0, 1e-5, 1), (1.0, 1e-6, 100),
                                                (0.5, 1e-9, 10000),
                                                (1000.0, 1e-12, 1)])   # σ ≈ 0.026, δ 1e-12
def test_interval_contains_the_exact_sigma_for_the_gaussian(target, delta, steps):
  """q = 1: the composition is one Gaussian step at σ/√T, whose δ(ε) is a closed
  form. The exact smallest σ* (δ(target) = δ) lies in [sigma_lower, sigma]."""
  ans = _tight_calibrate.tight_sigma(target, delta, 1.0, steps)
  assert _gaussian_delta(target, math.sqrt(steps) / ans.value) <= delta
  assert _gaussian_delta(target, math.sqrt(steps) / ans.bound) > delta
  assert ans.value / ans.bound - 1 < 2e-3


@pytest.mark.parametrize("target,delta,q", [(2.0, 1e-5, 0.05), (0.8, 1e-7, 0.3)])
def test_sigma_lower_is_certified_against_the_exact_one_step_profile(target, delta, q):
  """One step of the Poisson-sampled Gaussian, exact by mpmath integration:
  at sigma_lower the exact δ(target) exceeds δ in some direction (so no σ at or
  below it meets the target), at sigma it does not in either."""
  ans = _tight_calibrate.tight_sigma(target, delta, q, 1)
  at = lambda s: max(float(ref_sampled_gaussian_delta(target, q, s, d)) for d in ("remove", "add"))
  assert at(ans.value) <= delta
  assert at(ans.bound) > delta


def test_close_to_dp_accounting_pld_calibration():
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import pld_privacy_accountant
  q, steps, delta, target = 0.0042667, 14062, 1e-5, 3.0
  event = lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)),
                                            steps)
  ref = dpa.calibrate_dp_mechanism(pld_privacy_accountant.PLDAccountant, event, target, delta,
                                   dpa.LowerEndpointAndGuess(0.5, 1.0), tol=1e-4)
  ans = _tight_calibrate.tight_sigma(target, delta, q, steps)
  assert ans.value == pytest.approx(ref, rel=5e-3)
  # dp_accounting's pessimistic PLD is an upper bound: its σ is >= the exact one
  assert ans.bound <= ref + 1e-4


def test_edges():
  tc = _tight_calibrate
  assert tc.tight_sigma(1.0, 1e-5, 0.0, 100) == (0.0, 0.0, 0.0)
  assert tc.tight_sigma(1.0, 1e-5, 0.1, 0) == (0.0, 0.0, 0.0)
  assert tc.tight_steps(1.0, 1e-5, 0.0, 1.0) == (np.inf, np.inf, np.inf)
  assert tc.tight_sampling_rate(1.0, 1e-5, 1.0, 0) == (1.0, 1.0, 1.0)
  # q = 1 fits: RDP already says so
  assert tc.tight_sampling_rate(50.0, 1e-5, 2.0, 10).value == 1.0
  # not even one full-batch step at σ = 0.3, ε = 0.1: 0 steps, certified
  ans = tc.tight_steps(0.1, 1e-5, 1.0, 0.3)
  assert ans.value == 0.0 and ans.bound == 0.0
  assert _gaussian_delta(0.1, 1 / 0.3) > 1e-5
  # unreachable even at σ = 1e7 (T = 1e6 full-batch steps, ε = 1e-9): inf
  ans = _tight_calibrate.tight_sigma(1e-9, 1e-12, 1.0, 10**6)
  assert math.isinf(ans.value) and math.isinf(ans.rdp)
  assert 0 < ans.bound < np.inf
  assert _gaussian_delta(1e-9, 1e3 / ans.bound) > 1e-12


@pytest.mark.parametrize("kwargs,needle", [
    (dict(target_epsilon=-1.0), "target_epsilon"), (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"), (dict(q=1.5), "q"), (dict(q=float("nan")), "q"),
    (dict(steps=2.5), "steps"), (dict(rtol=0.0), "rtol"), (dict(grid_rtol=0.5), "grid_rtol")])
def test_bad_input_raises_naming_the_argument(kwargs, needle):
  args = dict(target_epsilon=1.0, delta=1e-5, q=0.01, steps=100)
  args.update(kwargs)
  with pytest.raises(ValueError, match=needle):
    _tight_calibrate.tight_sigma(**args)


def test_compiles_nothing(cold_programs, record_compilations):
  with record_compilations() as compiles:
    ans = _tight_calibrate.tight_sigma(2.5, 1e-6, 0.0123, 4321)
  assert compiles == [] and np.isfinite(ans.value)


def test_one_side_equals_the_interval_and_threads_change_nothing(monkeypatch):
  """epsilon_side is the same computation as one end of epsilon's interval,
  and composing the directions/sides in threads gives the same bits."""
  phases = _tight_calibrate.poisson_phases(0.02, 0.9, 700)
  lo, up = pld_general.epsilon(phases, 1e-6, return_bounds=True)
  assert pld_general_impl.epsilon_side(phases, 1e-6, upper=True) == up
  assert pld_general_impl.epsilon_side(phases, 1e-6, upper=False) == lo
  monkeypatch.setattr(os, "cpu_count", lambda: 1)
  assert pld_general.epsilon(phases, 1e-6, return_bounds=True) == (lo, up)


STEP_CASES = [  # target ε, δ, q, σ
    (3.0, 1e-5, 0.0042667, 1.1),
    (1.0, 1e-6, 0.05, 2.0),
    (0.5, 1e-5, 1.0, 20.0),             # full batch: few steps, adjacent integers
    pytest.param(8.0, 1e-8, 1e-3, 0.6, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("target,delta,q,sigma", STEP_CASES)
def test_steps_meet_the_target_and_are_tight(target, delta, q, sigma):
  ans = _tight_calibrate.tight_steps(target, delta, q, sigma)
  assert ans.rdp <= ans.value <= ans.bound < np.inf
  assert _reported(q, sigma, ans.value, delta) <= target
  beyond = math.floor(ans.value * (1 + 2e-3)) + 1
  assert _reported(q, sigma, beyond, delta) > target
  assert ans.rdp == float(calibrate.steps(target, delta, q, sigma))


def test_steps_interval_contains_the_exact_answer_for_the_gaussian():
  """q = 1: T steps at σ are one Gaussian step at σ/√T (closed form)."""
  target, delta, sigma = 1.0, 1e-6, 30.0
  ans = _tight_calibrate.tight_steps(target, delta, 1.0, sigma)
  assert _gaussian_delta(target, math.sqrt(ans.value) / sigma) <= delta
  assert _gaussian_delta(target, math.sqrt(ans.bound + 1) / sigma) > delta
  assert ans.bound - ans.value <= max(1.0, 2e-3 * ans.value)


@pytest.mark.parametrize("target,delta,sigma,steps", [
    (3.0, 1e-5, 1.1, 14062), (2.0, 1e-6, 0.8, 500),
    (0.05, 1e-6, 1.0, 100),              # RDP's rate is 6000 times smaller
    pytest.param(0.3, 1e-10, 3.0, 10**5, marks=pytest.mark.slow)])
def test_sampling_rate_meets_the_target_and_is_tight(target, delta, sigma, steps):
  ans = _tight_calibrate.tight_sampling_rate(target, delta, sigma, steps)
  assert ans.rdp <= ans.value < ans.bound <= 1.0
  assert _reported(ans.value, sigma, steps, delta) <= target
  assert _reported(min(ans.value * (1 + 2e-3), 1.0), sigma, steps, delta) > target
  assert ans.rdp == float(calibrate.sampling_rate(target, delta, sigma, steps))


def test_sampling_rate_upper_end_is_certified_against_the_exact_one_step_profile():
  target, delta, sigma = 1.0, 1e-6, 1.0
  ans = _tight_calibrate.tight_sampling_rate(target, delta, sigma, 1)
  at = lambda q: max(float(ref_sampled_gaussian_delta(target, q, sigma, d))
                     for d in ("remove", "add"))
  assert at(ans.value) <= delta
  assert at(ans.bound) > delta


def test_false_position_and_halving_alone_close_the_bracket(monkeypatch):
  """With the secant steering switched off, the safeguarded false position
  and halving still close the bracket to rtol (same guarantees)."""
  monkeypatch.setattr(_tight_calibrate, "_SECANT_FINE", 0)
  target, delta, q, steps = 1.0, 1e-6, 0.01, 1000
  ans = _tight_calibrate.tight_sigma(target, delta, q, steps)
  assert _reported(q, ans.value, steps, delta) <= target
  assert _reported(q, ans.value * (1 - 2e-3), steps, delta) > target
  assert 0 < ans.bound < ans.value


def test_tight_epsilon_near_sigma_0026_at_delta_1e12():
  """Regression: the general engine's optimistic grid offset overflowed
  (m/u with u underflowing) for q = 1, σ in [0.0260, 0.0265], δ = 1e-12 and
  `jaxdp epsilon` raised OverflowError. Now finite, ordered and a valid ε by
  the exact Gaussian profile."""
  for sigma in (0.02605, 0.0262, 0.0265):
    lo, up, rdp_up = _rate.tight_one("epsilon", 1.0, sigma, 1, 1e-12)
    value = min(up, rdp_up)
    assert 0 < lo <= value < np.inf
    assert _gaussian_delta(value, 1 / sigma) <= 1e-12 * (1 + 1e-9)


@pytest.mark.slow   # ~60 s: the engine's grids at 10⁶ steps
def test_wide_engine_intervals_take_the_batched_calibration():
  """q = 1e-4, T = 10⁶, δ = 1e-5, target 0.5: the general engine's grid leaves
  wide certified intervals. The command answered σ = 1.004 (interval
  [0.749, 1.004]) and q = 8.8e-5 (up to 1.3e-4), where the batched PLD
  calibrations answer 0.953 and 1.0e-4, and raised on the steps (its grid
  over the memory budget). Each answer now agrees with ``jaxdp.calibrate``
  (accountant "pld") to the command's rtol and meets the target as
  ``jaxdp epsilon`` reports it."""
  target, delta, q, steps, sigma = 0.5, 1e-5, 1e-4, 1e6, 0.9533
  s = _tight_calibrate.tight_sigma(target, delta, q, steps)
  ref = float(calibrate.sigma(target, delta, q, steps, accountant="pld"))
  assert abs(s.value / ref - 1) <= 1e-3 and _reported(q, s.value, steps, delta) <= target
  r = _tight_calibrate.tight_sampling_rate(target, delta, sigma, steps)
  ref = float(calibrate.sampling_rate(target, delta, sigma, steps, accountant="pld"))
  assert abs(r.value / ref - 1) <= 1e-3 and _reported(r.value, sigma, steps, delta) <= target
  t = _tight_calibrate.tight_steps(target, delta, q, sigma)
  ref = int(calibrate.steps(target, delta, q, sigma, accountant="pld"))
  assert t.value == ref and _reported(q, sigma, t.value, delta) <= target
  # The certified other ends come from the batched kernel's certified lower
  # bounds (they were the engine's σ >= 0.749, q <= 1.3e-4 and the trivial
  # 2**53 steps): one step past each end certainly overspends.
  assert 0.99 * s.value <= s.bound <= s.value, s
  assert r.value <= r.bound <= 1.01 * r.value, r
  assert t.value <= t.bound <= 1.01 * t.value, t
  for args in ((q, s.bound, steps), (r.bound, sigma, steps), (q, sigma, t.bound + 1)):
    assert float(pld.epsilon(*args, delta, return_bounds=True)[0]) > target, args


@pytest.mark.parametrize("kind", ["sigma", "q", "steps"])
def test_kernel_end_is_certified_and_close(kind):
  """The certified end read from the batched kernel's lower bounds
  (tight_ends.kernel_end): inside the given (far) end and the answer, and
  the kernel's certified lower ε there is over the target, so the exact
  answer lies beyond it; a near end is kept as it is."""
  from jaxdp._src.solvers import tight_ends  # pylint: disable=g-import-not-at-top
  q, sigma, steps, delta = 0.01, 1.0, 1000.0, 1e-5
  target = float(pld.epsilon(q, sigma, steps, delta))   # the answer is (q, σ, T) itself
  value, far, near = {"sigma": (sigma, 0.5, 0.999), "q": (q, 0.02, 0.01005),
                      "steps": (steps, 2000.0, 1005.0)}[kind]
  other = dict(q=None if kind == "q" else q, sigma=None if kind == "sigma" else sigma,
               steps=None if kind == "steps" else steps)
  end = tight_ends.kernel_end(kind, value, far, target, delta, **other)
  assert tight_ends.kernel_end(kind, value, near, target, delta, **other) == near
  past = dict(sigma=(q, end, steps), q=(end, sigma, steps), steps=(q, sigma, end + 1))[kind]
  assert float(pld.epsilon(*past, delta, return_bounds=True)[0]) > target
  if kind == "sigma":
    assert far < end < value and end >= 0.99 * value
  else:   # T + 1 = 1001 steps already overspend: the end is T itself
    assert value <= end < far and end <= 1.01 * value


@pytest.mark.slow   # ~5 s
def test_pld_bracket_left_open_is_closed_by_bisection():
  """calibrate.sigma(accountant="pld") at δ = 0.78, q = 0.0019, T = 7483: the
  PLD ε is 0 down to 0.996σ of the old answer and meets the target near
  0.9905σ; the bracket's secant rounds (on log ε) ran out with the answer 1%
  loose (0.35746). The open bracket is now bisected on feasibility."""
  q, steps, delta, target = 0.0018889870801956524, 7483.0, 0.783358933916895, 0.053144524734811974
  s = float(calibrate.sigma(target, delta, q, steps, accountant="pld"))
  eps = lambda x: float(_rate.epsilon(q, x, steps, delta, accountant="pld"))
  assert eps(s) <= target
  assert eps(s * (1 - 2e-3)) > target, s
