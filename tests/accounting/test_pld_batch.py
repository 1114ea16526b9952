"""Batched heterogeneous PLD (jaxdp.pld_accountant.epsilon_batch / delta_batch),
properties of random event mixes, and certified trade-off curves of
non-Gaussian mechanisms through ``accountant.pld().tradeoff``.

References share no code with jaxdp: dp_accounting's PLD objects, SciPy's
Laplace law, and the Neyman–Pearson curve of tiny discrete mechanisms
enumerated outcome by outcome in NumPy.
"""

import itertools

import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import events as E
from jaxdp import mechanisms
from jaxdp import pld_accountant as PA

HETERO = [
    [(E.SampledGaussian(0.01, 1.0), 300), (E.Laplace(20.0), 10), (E.DiscreteGaussian(30.0), 5)],
    [(E.SampledGaussian(0.003, 1.4), 1000), (E.Laplace(20.0), 10),
     (E.DiscreteGaussian(30.0), 5)],
]
GAUSS_ONLY = [
    [(E.SampledGaussian(0.02, 1.1), 500)],
    [(E.SampledGaussian(0.005, 0.9), 2000)],
    [(E.SampledGaussian(0.01, 1.0), 100), (E.Gaussian(20.0), 3)],
]


def _state(phases):
  acc = jaxdp.accountant.pld()
  st = acc.init()
  for ev, c in phases:
    st = acc.compose(st, ev, c)
  return acc, st


def test_batch_matches_the_accountant_state_by_state():
  configs = HETERO + GAUSS_ONLY + [[], [(E.SampledGaussian(0.0, 1.0), 50)]]
  lo, up = PA.epsilon_batch(configs, 1e-5, return_bounds=True)
  assert lo.shape == up.shape == (len(configs),)
  for i, phases in enumerate(configs):
    acc, st = _state(phases)
    l1, u1 = acc.epsilon(st, 1e-5, return_bounds=True)
    if all(mechanisms.fast_pld_params(ev) is not None for ev, _ in phases):
      np.testing.assert_allclose([lo[i], up[i]], [l1, u1], rtol=1e-12, atol=0.0, err_msg=str(i))
    else:   # one mixed question: the general engine; in a batch: the kernel
      assert lo[i] <= u1 and l1 <= up[i], (i, lo[i], up[i], l1, u1)
      assert abs(up[i] / u1 - 1) <= 2e-3, (i, up[i], u1)
  assert up[-1] == 0.0 and up[-2] == 0.0        # nothing composed / q = 0 leaks nothing
  assert np.all(up[:-2] > 0.0) and np.all(lo <= up)


def test_batch_shapes_states_and_delta_round_trip():
  configs = [_state(p)[1] for p in GAUSS_ONLY[:2]] + [HETERO[0]]
  targets = np.array([[1e-5, 1e-7], [1e-6, 1e-8], [1e-5, 1e-9]])
  eps = PA.epsilon_batch(configs, targets)
  assert eps.shape == (3, 2)
  assert np.all(eps[:, 1] >= eps[:, 0])            # smaller δ, larger ε
  # δ at the certified ε is at most the target, up to the δ path's own
  # looseness: ε queries truncate at 1e-4 of the smallest target δ (booked at
  # +∞), δ queries at 1e-17, whose wider window carries more FFT round-off
  # allowance (measured: 2.8e-4 relative at δ = 1e-8; both are upper bounds).
  d = PA.delta_batch(configs, eps)
  assert d.shape == (3, 2)
  assert np.all(d <= targets * (1 + 1e-3)), (d, targets)
  # One target per configuration: the same answers up to the truncation
  # budget, 1e-4 of the smallest target asked (the general engine likewise
  # tilts and cuts its tails for the smallest target).
  one = PA.epsilon_batch(configs, np.array([1e-5, 1e-6, 1e-5]))
  np.testing.assert_allclose(one, eps[:, 0], rtol=1e-4)


def _dpa_hetero(q, s, t, h, pessimistic):
  from dp_accounting.pld import privacy_loss_distribution as dp_pld
  g = dp_pld.from_gaussian_mechanism(s, sampling_prob=q, value_discretization_interval=h,
                                     pessimistic_estimate=pessimistic)
  lap = dp_pld.from_laplace_mechanism(20.0, value_discretization_interval=h,
                                      pessimistic_estimate=pessimistic)
  dg = dp_pld.from_discrete_gaussian_mechanism(30.0, value_discretization_interval=h,
                                               pessimistic_estimate=pessimistic)
  return g.self_compose(t).compose(lap.self_compose(10)).compose(dg.self_compose(5))


def test_heterogeneous_batch_agrees_with_dp_accounting():
  """The issue's workload (sampled Gaussian x T, Laplace x 10, discrete
  Gaussian x 5): within 0.5% of dp_accounting's pessimistic ε, and never below
  its optimistic one (an approximate lower bound)."""
  lo, up = PA.epsilon_batch(HETERO, 1e-5, return_bounds=True)
  for i, phases in enumerate(HETERO):
    sg = phases[0][0]
    q, s, t = float(sg.q), float(sg.sigma), phases[0][1]
    pess = _dpa_hetero(q, s, t, 1e-4, True).get_epsilon_for_delta(1e-5)
    opt = _dpa_hetero(q, s, t, 1e-4, False).get_epsilon_for_delta(1e-5)
    assert up[i] >= opt * (1 - 1e-3), (i, up[i], opt)
    assert abs(up[i] / pess - 1) <= 5e-3, (i, up[i], pess)
    assert lo[i] <= pess * (1 + 1e-3), (i, lo[i], pess)


@pytest.mark.parametrize("bad, match", [
    ([[(E.Laplace(1.0), -1)]], "count"),
    ([[("not an event", 1)]], "event"),
    ([3.0], "configs"),
])
def test_batch_bad_configs(bad, match):
  with pytest.raises(ValueError, match=match):
    PA.epsilon_batch(bad, 1e-5)


def test_batch_bad_values():
  with pytest.raises(ValueError, match="delta"):
    PA.epsilon_batch(HETERO, 0.0)
  with pytest.raises(ValueError, match="delta"):
    PA.epsilon_batch(HETERO, [1e-5, 1e-6, 1e-7])
  with pytest.raises(ValueError, match="epsilon"):
    PA.delta_batch(HETERO, -1.0)
  with pytest.raises(ValueError, match="rtol"):
    PA.epsilon_batch(HETERO, 1e-5, rtol=0.5)


# --------------------------------------------------------------------------
# random event mixes: ordered bounds, monotone under one more event
# --------------------------------------------------------------------------

_POOL = [
    lambda r: E.Laplace(float(r.uniform(2.0, 20.0))),
    lambda r: E.RandomizedResponse(float(r.uniform(0.5, 0.95)), int(r.integers(2, 5))),
    lambda r: E.DiscreteLaplace(float(r.uniform(0.05, 0.5)), 1),
    lambda r: E.DiscreteGaussian(float(r.uniform(3.0, 20.0))),
    lambda r: E.Gaussian(float(r.uniform(2.0, 10.0))),
    lambda r: E.SampledGaussian(float(r.uniform(0.005, 0.05)), float(r.uniform(0.8, 2.0))),
    lambda r: E.EpsilonDelta(float(r.uniform(0.01, 0.2)), float(r.uniform(0.0, 1e-7))),
]


@pytest.mark.parametrize("seed", range(3))
def test_random_mixes_ordered_and_monotone_in_one_more_event(seed):
  """For random mixes on one fixed loss grid: optimistic <= pessimistic, and
  each bound does not decrease when one more event is composed (the
  pessimistic PMF is a valid dominating pair; the optimistic side loses at
  most its Chernoff-dropped mass, < 1e-20)."""
  rng = np.random.default_rng(seed)
  h = 2e-3
  mix = [(_POOL[k](rng), int(rng.integers(1, 20))) for k in rng.choice(len(_POOL), 3, False)]
  extra = (_POOL[int(rng.integers(len(_POOL)))](rng), 1)
  eps = np.array([0.0, 0.5, 1.0, 2.0, 4.0])
  lo_a, up_a = PA.delta_batch([mix], eps[None, :], value_discretization_interval=h,
                              return_bounds=True)
  lo_b, up_b = PA.delta_batch([mix + [extra]], eps[None, :], value_discretization_interval=h,
                              return_bounds=True)
  assert np.all(lo_a <= up_a) and np.all(lo_b <= up_b)
  assert np.all(up_b >= up_a * (1 - 1e-9)), (mix, extra, up_a, up_b)
  assert np.all(lo_b >= lo_a * (1 - 1e-9) - 1e-20), (mix, extra, lo_a, lo_b)


# --------------------------------------------------------------------------
# trade-off curves of non-Gaussian mechanisms (accountant.pld().tradeoff)
# --------------------------------------------------------------------------

FPR = np.array([1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.3, 0.5, 0.9])


def _np_curve(p, q, fpr):
  """TPR of the most powerful test of Q (null) against P at each FPR:
  outcomes sorted by likelihood ratio P/Q, linear between the vertices
  (randomised tests)."""
  order = np.argsort(-(p / np.maximum(q, 1e-300)))
  x = np.concatenate([[0.0], np.cumsum(q[order])])
  y = np.concatenate([[0.0], np.cumsum(p[order])])
  return np.interp(fpr, x, y)


def test_laplace_tradeoff_brackets_the_closed_form():
  """One Laplace(b) step, sensitivity 1: TPR(α) = 1 - F(F⁻¹(1 - α) - 1/b)
  with F the standard Laplace CDF scaled by b (Dong, Roth & Su 2022, §2)."""
  b = 0.8
  acc, st = _state([(E.Laplace(b), 1)])
  tb = acc.tradeoff(st, FPR)
  lap = stats.laplace(scale=b)
  exact = 1 - lap.cdf(lap.ppf(1 - FPR) - 1.0)
  assert np.all(tb.tpr_upper >= exact - 1e-9), (tb.tpr_upper, exact)
  assert np.all(tb.tpr_lower <= exact + 1e-9), (tb.tpr_lower, exact)
  assert np.max(tb.tpr_upper - exact) < 0.02


@pytest.mark.parametrize("p,k,T", [(0.6, 2, 3), (0.8, 3, 2)])
def test_randomized_response_composition_tradeoff_brackets_enumeration(p, k, T):
  """T-fold randomized response (dp_accounting's parameters: with
  probability p a uniform bucket, else the truth) by enumerating all k^T
  outcome tuples."""
  hi, lo_ = 1 - p + p / k, p / k
  one_p = np.array([hi] + [lo_] * (k - 1))
  one_q = np.array([lo_, hi] + [lo_] * (k - 2))
  pp = np.array([np.prod(c) for c in itertools.product(one_p, repeat=T)])
  qq = np.array([np.prod(c) for c in itertools.product(one_q, repeat=T)])
  exact = _np_curve(pp, qq, FPR)
  acc, st = _state([(E.RandomizedResponse(p, k), T)])
  tb = acc.tradeoff(st, FPR)
  assert np.all(tb.tpr_upper >= exact - 1e-9), (tb.tpr_upper, exact)
  assert np.all(tb.tpr_lower <= exact + 1e-9), (tb.tpr_lower, exact)
  assert np.max(tb.tpr_upper - exact) < 0.05


def test_heterogeneous_tradeoff_not_below_each_part():
  """Composing a Laplace step onto randomized response can only help the
  attacker: the composed certified curve is above each part's lower curve."""
  acc, st_rr = _state([(E.RandomizedResponse(0.6, 2), 2)])
  _, st_both = _state([(E.RandomizedResponse(0.6, 2), 2), (E.Laplace(1.0), 1)])
  _, st_lap = _state([(E.Laplace(1.0), 1)])
  both = acc.tradeoff(st_both, FPR)
  for part in (st_rr, st_lap):
    assert np.all(both.tpr_upper >= acc.tradeoff(part, FPR).tpr_lower - 1e-9)
