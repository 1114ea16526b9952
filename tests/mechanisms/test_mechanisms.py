"""Tests for the mechanism events: validation, pytrees, RDP curves and dominating pairs.

Every value jaxdp reports must be an upper bound on the exact one. The pairs'
exact one-step hockey-stick divergences are checked against closed forms
(Gaussian, Laplace, randomized response, (ε, δ)-DP), brute-force mpmath sums
and dp_accounting's PLDs (optimistic <= ours <= pessimistic); the RDP curves
against dp_accounting's RDP accountant and exact Rényi divergences computed in
mpmath; and each RDP curve must imply δ(ε) at least the pair's exact δ(ε).
"""

import logging
import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from scipy import integrate

from jaxdp import accountant
from jaxdp import events as E
from jaxdp import mechanisms as M
from jaxdp import mechanisms_continuous as C
from jaxdp import mechanisms_discrete as D
from jaxdp import profiles
from jaxdp import rdp as jrdp
from jaxdp import pairs

from dp_accounting import dp_event as dpe
from dp_accounting.pld import common as dp_common
from dp_accounting.pld import privacy_loss_distribution as dp_pld
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from jaxdp._src.mechanisms import discrete_pairs as D_impl

logging.getLogger().setLevel(logging.ERROR)  # dp_accounting's connect-the-dots notices

ORDERS = np.array([1.5, 2.0, 3.0, 4.5, 8.0, 16.0, 32.0])


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


# --------------------------------------------------------------------------
# exact one-step δ(ε) of a pair (the test's own, independent of jaxdp.pairs)
# --------------------------------------------------------------------------


def pair_delta(pair, eps):
  """Exact hockey-stick δ(ε) of one direction, counting p_inf at loss +∞."""
  if isinstance(pair, pairs.DiscretePair):
    p, q = np.asarray(pair.p), np.asarray(pair.q)
    return math.fsum(np.maximum(p - math.exp(eps) * q, 0.0).tolist()) + pair.p_inf
  loss = lambda x: float(pair.loss(np.array([x]))[0])
  lo, hi = pair.x_lo, pair.x_hi
  if loss(hi) <= eps:
    x = hi
  else:
    for _ in range(200):
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if loss(mid) <= eps else (lo, mid)
    x = lo
  xs = np.array([x])
  return max(0.0, math.exp(pair.log_p_sf(xs)[0]) - math.exp(eps + pair.log_q_sf(xs)[0]))


def mech_delta(mech, eps):
  return max(pair_delta(mech.remove, eps), pair_delta(mech.add, eps))


EPSILONS = (0.0, 0.25, 1.0, 2.5)


# --------------------------------------------------------------------------
# dominating pairs against closed forms
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma, sens", [(1.0, 1.0), (0.7, 2.0), (5.0, 0.5)])
def test_gaussian_pair_matches_balle_wang(sigma, sens):
  mech = M.dominating_pairs(E.Gaussian(sigma, sens))
  for eps in EPSILONS:
    exact = float(profiles.gaussian(eps, sigma, sens))
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-9) <= ours <= exact * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("b", [0.5, 1.0, 3.0])
def test_laplace_pair_matches_profile(b):
  mech = M.dominating_pairs(E.Laplace(b))
  for eps in EPSILONS + (1 / b, 0.999 / b):
    exact = float(profiles.laplace(eps, b))
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-12) - 1e-14 <= ours <= exact * (1 + 1e-9) + 1e-15, eps


@pytest.mark.parametrize("p, k", [(0.3, 4), (0.9, 2), (0.05, 10), (1.0, 3), (0.5, 1)])
def test_randomized_response_pair_closed_form(p, k):
  mech = M.dominating_pairs(E.RandomizedResponse(p, k))
  mp.mp.dps = 40
  a = 1 - mp.mpf(p) * (k - 1) / k if k > 1 else mp.mpf(1)
  b = mp.mpf(p) / k if k > 1 else mp.mpf(1)
  for eps in EPSILONS:
    # Outcomes x, x', others: (A − e^ε B)₊ + (B − e^ε A)₊ + 0.
    exact = float(max(a - mp.e ** eps * b, 0) + max(b - mp.e ** eps * a, 0))
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-12) - 1e-15 <= ours <= exact * (1 + 1e-12) + 1e-15


def test_randomized_response_without_noise_is_blatantly_non_private():
  mech = M.dominating_pairs(E.RandomizedResponse(0.0, 5))
  assert mech_delta(mech, 10.0) == 1.0
  pairs.validate_pair(mech.remove)


@pytest.mark.parametrize("eps0, dlt", [(1.0, 1e-5), (0.0, 0.1), (3.0, 0.0)])
def test_epsilon_delta_pair_closed_form(eps0, dlt):
  mech = M.dominating_pairs(E.EpsilonDelta(eps0, dlt))
  for eps in EPSILONS + (eps0,):
    exact = dlt + (1 - dlt) * max(math.exp(eps0) - math.exp(eps), 0.0) / (1 + math.exp(eps0))
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-12) <= ours <= exact * (1 + 1e-12) + 1e-15
  pure = M.dominating_pairs(E.PureDP(eps0))
  assert mech_delta(pure, 0.0) == pytest.approx(
      (math.exp(eps0) - 1) / (math.exp(eps0) + 1), rel=1e-12, abs=1e-15)


def _brute_force_delta(pmf_p, pmf_q, support, eps):
  """Σ (P − e^ε Q)₊ in mpmath over an explicit (wide) support."""
  e = mp.e ** eps
  return float(mp.fsum(max(pmf_p(z) - e * pmf_q(z), 0) for z in support))


@pytest.mark.parametrize("a, d", [(0.5, 1), (0.2, 3), (2.0, 2)])
def test_discrete_laplace_pair_is_exact(a, d):
  mech = M.dominating_pairs(E.DiscreteLaplace(a, d))
  mp.mp.dps = 30
  c = mp.tanh(mp.mpf(a) / 2)
  pmf = lambda z, m: c * mp.e ** (-mp.mpf(a) * abs(z - m))
  support = range(-int(80 / a) - 5, d + int(80 / a) + 5)
  for eps in EPSILONS:
    exact = _brute_force_delta(lambda z: pmf(z, d), lambda z: pmf(z, 0), support, eps)
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-12) - 1e-15 <= ours <= exact * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("sigma, d", [(0.6, 1), (2.0, 1), (3.0, 4)])
def test_discrete_gaussian_pair_bounds_brute_force(sigma, d):
  mech = M.dominating_pairs(E.DiscreteGaussian(sigma, d))
  assert 0.0 < mech.remove.p_inf <= 1e-29
  mp.mp.dps = 30
  s2 = mp.mpf(sigma) ** 2
  width = int(20 * sigma) + 5
  z_norm = mp.fsum(mp.e ** (-mp.mpf(j) ** 2 / (2 * s2)) for j in range(-width - d, width + d + 1))
  pmf = lambda z, m: mp.e ** (-(mp.mpf(z) - m) ** 2 / (2 * s2)) / z_norm
  for eps in EPSILONS:
    exact = _brute_force_delta(lambda z: pmf(z, d), lambda z: pmf(z, 0),
                               range(-width, d + width + 1), eps)
    ours = mech_delta(mech, eps)
    assert exact * (1 - 1e-12) <= ours <= exact * (1 + 1e-10) + 2e-29


def test_coarsened_discrete_pairs_dominate(monkeypatch):
  events = (E.DiscreteGaussian(40.0, 3), E.DiscreteLaplace(0.05, 500))
  exact = [M.dominating_pairs(ev) for ev in events]
  monkeypatch.setattr(D_impl, "MAX_ATOMS", 64)
  for ev, fine in zip(events, exact):
    coarse = M.dominating_pairs(ev)
    assert coarse.remove.p.size <= 64 + 2 < fine.remove.p.size
    pairs.validate_pair(coarse.remove)
    for eps in (0.0, 0.01, 0.1, 1.0, 10.0):
      hi, lo = mech_delta(coarse, eps), mech_delta(fine, eps)
      assert lo * (1 - 1e-12) <= hi <= lo + 0.05, (ev, eps)


def test_pmf_pair_directions_and_normalisation():
  p, q = [0.2, 0.5, 0.3], [0.5, 0.5, 0.0]
  mech = M.dominating_pairs(E.PMFPair(p, q))
  assert mech.remove.p_inf == pytest.approx(0.3)       # q = 0 where p > 0: loss +∞
  assert mech.add.p_inf == 0.0
  for eps in EPSILONS:
    rem = sum(max(a - math.exp(eps) * b, 0.0) for a, b in zip(p, q))
    add = sum(max(b - math.exp(eps) * a, 0.0) for a, b in zip(p, q))
    assert pair_delta(mech.remove, eps) == pytest.approx(rem, rel=1e-12, abs=1e-15)
    assert pair_delta(mech.add, eps) == pytest.approx(add, rel=1e-12, abs=1e-15)
    assert pair_delta(mech.remove, eps) >= rem and pair_delta(mech.add, eps) >= add * (1 - 1e-15)


def test_sampled_laplace_pairs_are_monotone_in_both_directions():
  mech = M.dominating_pairs(E.SampledLaplace(0.2, 0.7))
  for pair in (mech.remove, mech.add):
    xs = np.linspace(pair.x_lo, pair.x_hi, 20001)
    assert np.all(np.diff(pair.loss(xs)) >= -1e-15)
  assert M.dominating_pairs(E.SampledLaplace(1.0, 0.7)).add.loss(np.array([5.0]))[0] == \
      pytest.approx(1 / 0.7)


def test_dominating_pairs_rejects_batches_and_unknown_events():
  with pytest.raises(ValueError, match="Laplace.b must be a scalar"):
    M.dominating_pairs(E.Laplace(np.array([1.0, 2.0])))
  with pytest.raises(TypeError):
    M.dominating_pairs((1.0,))


# --------------------------------------------------------------------------
# dominating pairs against dp_accounting's PLD (one step)
# --------------------------------------------------------------------------

_H = 1e-3

DP_CASES = {
    "rr": (E.RandomizedResponse(0.3, 4),
           lambda pe, h: dp_pld.from_randomized_response(0.3, 4, pe, h)),
    "dlap": (E.DiscreteLaplace(0.5, 2),
             lambda pe, h: dp_pld.from_discrete_laplace_mechanism(0.5, 2, pe, h)),
    "dgauss": (E.DiscreteGaussian(2.0, 1),
               lambda pe, h: dp_pld.from_discrete_gaussian_mechanism(2.0, 1, None, pe, h)),
    "laplace": (E.Laplace(1.5),
                lambda pe, h: dp_pld.from_laplace_mechanism(1.5, 1, pe, h, use_connect_dots=pe)),
    "sampled_laplace": (E.SampledLaplace(0.1, 0.8), lambda pe, h: dp_pld.from_laplace_mechanism(
        0.8, 1, pe, h, sampling_prob=0.1, use_connect_dots=pe)),
    "mixture": (E.MixtureOfGaussians(1.5, [0, 1, 2], [0.81, 0.18, 0.01]),
                lambda pe, h: dp_pld.from_mixture_gaussian_mechanism(
                    1.5, [0, 1, 2], [0.81, 0.18, 0.01], pe, 1e-2, use_connect_dots=pe)),
    "gaussian": (E.Gaussian(1.2, 2.0),
                 lambda pe, h: dp_pld.from_gaussian_mechanism(1.2, 2.0, pe, h,
                                                              use_connect_dots=pe)),
}


@pytest.mark.parametrize("name", sorted(DP_CASES))
def test_pairs_between_dp_accounting_optimistic_and_pessimistic(name):
  event, make = DP_CASES[name]
  mech = M.dominating_pairs(event)
  hi, lo = make(True, _H), make(False, _H)
  for eps in (0.0, 0.1, 0.5, 1.0, 2.0):
    ours = mech_delta(mech, eps)
    pess, opt = hi.get_delta_for_epsilon(eps), lo.get_delta_for_epsilon(eps)
    assert opt <= ours * (1 + 1e-12) + 1e-15, (eps, opt, ours)
    assert ours <= pess * (1 + 1e-12) + 1e-15, (eps, ours, pess)


def test_epsilon_delta_pair_matches_dp_accounting():
  ref = dp_pld.from_privacy_parameters(dp_common.DifferentialPrivacyParameters(1.0, 1e-5), 1e-4)
  mech = M.dominating_pairs(E.EpsilonDelta(1.0, 1e-5))
  for eps in (0.0, 0.5, 2.0):
    assert mech_delta(mech, eps) == pytest.approx(ref.get_delta_for_epsilon(eps), rel=1e-9)


def test_pmf_pair_matches_dp_accounting():
  p, q = [0.1, 0.4, 0.5], [0.3, 0.45, 0.25]
  lp = {i: math.log(v) for i, v in enumerate(p)}
  lq = {i: math.log(v) for i, v in enumerate(q)}
  ref = dp_pld.from_two_probability_mass_functions(lq, lp, True, 1e-5, symmetric=False)
  mech = M.dominating_pairs(E.PMFPair(p, q))
  for eps in (0.0, 0.3, 0.6):
    ours = mech_delta(mech, eps)
    assert ours <= ref.get_delta_for_epsilon(eps) * (1 + 1e-12) + 1e-15
    assert ours == pytest.approx(ref.get_delta_for_epsilon(eps), rel=1e-3, abs=1e-12)


# --------------------------------------------------------------------------
# RDP curves
# --------------------------------------------------------------------------


def _rdp(event, orders=ORDERS):
  """The event's RDP curve in float64, evaluated like the accountant's host path
  (compile-time evaluation, so the compiled kernels are shared with it)."""
  with jax.ensure_compile_time_eval(), jax.enable_x64(True):
    return np.asarray(accountant.event_rdp(event, orders, np.float64), np.float64)


def _renyi_mp(p, q, a):
  a = mp.mpf(a)
  return mp.log(mp.fsum(pi ** a * qi ** (1 - a) for pi, qi in zip(p, q) if pi > 0)) / (a - 1)


@pytest.mark.parametrize("p, k", [(0.3, 4), (0.9, 2), (0.02, 10), (0.999, 3)])
def test_randomized_response_rdp_matches_dp_accounting(p, k):
  acc = dp_rdp.RdpAccountant(list(ORDERS), dp_rdp.NeighborRel.REPLACE_ONE)
  acc.compose(dpe.RandomizedResponseDpEvent(p, k))
  ref = np.asarray(acc._rdp)  # pylint: disable=protected-access
  ours = _rdp(E.RandomizedResponse(p, k))
  mp.mp.dps = 40
  a_, b_ = 1 - mp.mpf(p) * (k - 1) / k, mp.mpf(p) / k
  exact = np.array([float(_renyi_mp([a_, b_, 1 - a_ - b_], [b_, a_, 1 - a_ - b_], o))
                    for o in ORDERS])
  assert np.all(ours >= exact) and np.allclose(ours, exact, rtol=1e-9, atol=0)
  np.testing.assert_allclose(ours, ref, rtol=1e-9)


@pytest.mark.parametrize("p, k, alpha", [(0.9999998807907104, 47006.0, 1.0183756351470947),
                                         (0.9999998807907104, 3252.0, 3233.0),
                                         (0.999, 1e6, 2.5), (1e-6, 7.0, 40.0)])
def test_randomized_response_rdp_float32_is_an_upper_bound(p, k, alpha):
  """float32 (x64 off, in jit): A = 1 − p(k−1)/k cancelled near p = 1 with
  many buckets (−37% at the first point, found by a float32 scan)."""
  with jax.enable_x64(False):
    ours = float(jax.jit(D.randomized_response_rdp)(np.float32(p), np.float32(k),
                                                    np.float32(alpha)))
  p, k, alpha = (float(np.float32(v)) for v in (p, k, alpha))   # the inputs it saw
  mp.mp.dps = 60
  a_, b_ = 1 - mp.mpf(p) * (k - 1) / k, mp.mpf(p) / k
  exact = float(_renyi_mp([a_, b_, 1 - a_ - b_], [b_, a_, 1 - a_ - b_], alpha))
  assert ours >= exact, (ours, exact)


def test_randomized_response_rdp_edge_cases():
  assert np.all(_rdp(E.RandomizedResponse(1.0, 4)) == 0.0)
  assert np.all(_rdp(E.RandomizedResponse(0.5, 1)) == 0.0)
  assert np.all(np.isinf(_rdp(E.RandomizedResponse(0.0, 4))))


def test_laplace_rdp_matches_dp_accounting():
  for b in (0.3, 1.0, 20.0):
    ref = np.array([dp_rdp._laplace_rdp(1 / b, o)  # pylint: disable=protected-access
                    for o in ORDERS])
    ours = np.asarray(C.laplace_rdp(b, ORDERS))
    assert np.all(ours >= ref * (1 - 1e-13))
    np.testing.assert_allclose(ours, ref, rtol=1e-9)
    # q = 1 subsampling is the plain mechanism.
    np.testing.assert_allclose(_rdp(E.SampledLaplace(1.0, b)), ref, rtol=1e-9)


@pytest.mark.parametrize("a, d", [(0.5, 1), (0.1, 3), (2.0, 5), (1e-3, 1)])
def test_discrete_laplace_rdp_is_exact(a, d):
  mp.mp.dps = 40
  am = mp.mpf(a)
  c = mp.tanh(am / 2)

  def exact(o):
    o = mp.mpf(o)
    f = lambda z: (c * mp.e ** (-am * abs(z - d))) ** o * (c * mp.e ** (-am * abs(z))) ** (1 - o)
    return mp.log(mp.nsum(f, [-mp.inf, 0]) + mp.nsum(f, [1, mp.inf])) / (o - 1)

  ref = np.array([float(exact(o)) for o in ORDERS])
  ours = _rdp(E.DiscreteLaplace(a, d))
  assert np.all(ours >= ref)
  np.testing.assert_allclose(ours, ref, rtol=1e-6)


def test_discrete_gaussian_rdp_bounds_exact_renyi():
  sigma, d = 1.3, 2
  ours = _rdp(E.DiscreteGaussian(sigma, d))
  np.testing.assert_allclose(ours, ORDERS * d * d / (2 * sigma ** 2), rtol=1e-12)
  mp.mp.dps = 30
  zs = range(-60, 63)
  w = lambda z, m: mp.e ** (-(mp.mpf(z) - m) ** 2 / (2 * mp.mpf(sigma) ** 2))
  norm = mp.fsum(w(z, 0) for z in range(-80, 81))
  p = [w(z, d) / norm for z in zs]
  q = [w(z, 0) / norm for z in zs]
  for o, v in zip(ORDERS, ours):
    assert v >= float(_renyi_mp(p, q, o))


def test_pmf_pair_rdp_is_exact_max_of_directions():
  p, q = [0.1, 0.4, 0.5], [0.3, 0.45, 0.25]
  ours = _rdp(E.PMFPair(p, q))
  mp.mp.dps = 40
  ref = np.array([float(max(_renyi_mp(p, q, o), _renyi_mp(q, p, o))) for o in ORDERS])
  assert np.all(ours >= ref)
  np.testing.assert_allclose(ours, ref, rtol=1e-12)
  assert np.all(np.isinf(_rdp(E.PMFPair([0.5, 0.5], [1.0, 0.0]))))


def _sampled_laplace_moment(q, b, a, reverse=False):
  mp.mp.dps = 30
  q, b, a = mp.mpf(q), mp.mpf(b), mp.mpf(a)
  mu0 = lambda x: mp.e ** (-abs(x) / b) / (2 * b)
  mix = lambda x: (1 - q) * mu0(x) + q * mp.e ** (-abs(x - 1) / b) / (2 * b)
  f = (lambda x: mix(x) ** (1 - a) * mu0(x) ** a) if reverse else \
      (lambda x: mix(x) ** a * mu0(x) ** (1 - a))
  return mp.log(mp.quad(f, [-mp.inf, 0, 1, mp.inf])) / (a - 1)


@pytest.mark.parametrize("q, b", [(0.01, 1.0), (0.2, 0.5), (0.5, 3.0)])
def test_sampled_laplace_rdp_exact_at_integer_orders(q, b):
  orders = ORDERS
  ours = _rdp(E.SampledLaplace(q, b), orders)
  remove = np.array([float(_sampled_laplace_moment(q, b, o)) for o in orders])
  add = np.array([float(_sampled_laplace_moment(q, b, o, True)) for o in orders])
  assert np.all(add <= remove * (1 + 1e-12))            # MTZ Thm 5
  assert np.all(ours >= remove)
  integer = orders == np.round(orders)
  np.testing.assert_allclose(ours[integer], remove[integer], rtol=1e-9)
  # Fractional orders: the chord of the convex (α−1)ε(α), below the unsampled Laplace.
  assert np.all(ours <= np.asarray(C.laplace_rdp(b, orders)) * (1 + 1e-12))
  assert np.all(_rdp(E.SampledLaplace(0.0, b), orders) == 0.0)


def _mixture_renyi(sigma, s, p, a, reverse):
  """D_α between Σ pᵢN(sᵢ, σ²) and N(0, σ²) (or the reverse) by adaptive quadrature."""
  s, p = np.asarray(s, float), np.asarray(p, float)

  def log_f(x):
    log_mix = np.logaddexp.reduce(np.log(p) - (x - s) ** 2 / (2 * sigma ** 2))
    log_0 = -x * x / (2 * sigma ** 2)
    return (a * log_0 + (1 - a) * log_mix) if reverse else (a * log_mix + (1 - a) * log_0)

  peak = a * s.max()
  xs = np.linspace(-40 * sigma, peak + 40 * sigma, 4001)
  shift = max(log_f(x) for x in xs)
  val, err = integrate.quad(lambda x: math.exp(log_f(x) - shift), xs[0], xs[-1],
                            points=[0.0, s.max(), peak], limit=500, epsabs=0, epsrel=1e-13)
  assert err <= 1e-11 * val
  return (math.log(val) + shift - math.log(sigma * math.sqrt(2 * math.pi))) / (a - 1)


@pytest.mark.parametrize("sigma, s, p, slack", [
    (2.0, [0, 1], [0.9, 0.1], 1e-8),            # one positive sensitivity: exact
    (1.0, [0, 1, 2], [0.81, 0.18, 0.01], 0.6),  # binomial user-level mixture
    (1.5, [1, 3], [0.5, 0.5], 0.6),
])
def test_mixture_of_gaussians_rdp_bounds_both_directions(sigma, s, p, slack):
  orders = ORDERS
  ours = _rdp(E.MixtureOfGaussians(sigma, s, p), orders)
  exact = np.array([max(_mixture_renyi(sigma, s, p, o, False),
                         _mixture_renyi(sigma, s, p, o, True)) for o in orders])
  assert np.all(ours >= exact)
  assert np.all(ours <= exact * (1 + slack))


def test_epsilon_delta_rdp():
  np.testing.assert_allclose(_rdp(E.EpsilonDelta(0.7, 0.0)),
                             np.asarray(accountant.event_rdp(E.PureDP(0.7), ORDERS, jnp.float64)),
                             rtol=1e-12)
  with pytest.raises(ValueError, match=r"EpsilonDelta.delta must be 0 .*1e-06.*pld"):
    M.event_rdp(E.EpsilonDelta(0.7, 1e-6), ORDERS)
  with pytest.raises(ValueError, match="EpsilonDelta.delta"):
    accountant.rdp().compose(accountant.rdp().init(), E.EpsilonDelta(0.7, 1e-6))


RDP_EVENTS = [
    E.RandomizedResponse(0.3, 4), E.DiscreteLaplace(0.5, 2), E.DiscreteGaussian(2.0, 1),
    E.MixtureOfGaussians(1.5, [0, 1, 2], [0.81, 0.18, 0.01]), E.EpsilonDelta(1.0, 0.0),
    E.SampledLaplace(0.1, 0.8), E.PMFPair([0.1, 0.4, 0.5], [0.3, 0.45, 0.25]),
    E.Gaussian(1.2, 2.0), E.Laplace(1.5),
]


@pytest.mark.parametrize("event", RDP_EVENTS, ids=lambda e: type(e).__name__)
def test_rdp_implies_at_least_the_exact_one_step_delta(event):
  """A valid RDP curve can never certify a δ(ε) below the pair's exact δ(ε)."""
  curve = _rdp(event)
  mech = M.dominating_pairs(event)
  for eps in (0.1, 0.5, 1.0, 2.0):
    implied = float(jrdp.to_delta(curve, ORDERS, eps))
    assert implied >= mech_delta(mech, eps) * (1 - 1e-9)


# --------------------------------------------------------------------------
# events: validation, pytrees, accountant
# --------------------------------------------------------------------------


@pytest.mark.parametrize("make, match", [
    (lambda: E.RandomizedResponse(1.2, 3), r"RandomizedResponse.noise_parameter .*1\.2"),
    (lambda: E.RandomizedResponse(0.5, 2.5), r"RandomizedResponse.num_buckets .*whole"),
    (lambda: E.RandomizedResponse(0.5, 0), r"RandomizedResponse.num_buckets"),
    (lambda: E.DiscreteLaplace(0.0), r"DiscreteLaplace.parameter"),
    (lambda: E.DiscreteLaplace(1.0, 1.5), r"DiscreteLaplace.sensitivity .*1\.5"),
    (lambda: E.DiscreteGaussian(-1.0), r"DiscreteGaussian.sigma"),
    (lambda: E.DiscreteGaussian(1.0, 0), r"DiscreteGaussian.sensitivity"),
    (lambda: E.Gaussian(1.0, -2.0), r"Gaussian.sensitivity .*-2\.0"),
    (lambda: E.MixtureOfGaussians(0.0, [0, 1], [0.5, 0.5]), r"MixtureOfGaussians.sigma"),
    (lambda: E.MixtureOfGaussians(1.0, [0, -1], [0.5, 0.5]),
     r"MixtureOfGaussians.sensitivities .*-1\.0"),
    (lambda: E.MixtureOfGaussians(1.0, [0, 1], [0.5, 0.6]),
     r"MixtureOfGaussians.probabilities must sum to 1"),
    (lambda: E.MixtureOfGaussians(1.0, [0, 1, 2], [0.5, 0.5]), r"same length"),
    (lambda: E.MixtureOfGaussians(1.0, [0, 0], [0.5, 0.5]), r"positive entry"),
    (lambda: E.MixtureOfGaussians(1.0, [], []), r"must not be empty"),
    (lambda: E.EpsilonDelta(-1.0, 0.0), r"EpsilonDelta.epsilon"),
    (lambda: E.EpsilonDelta(1.0, 1.5), r"EpsilonDelta.delta .*1\.5"),
    (lambda: E.SampledLaplace(1.1, 1.0), r"SampledLaplace.q"),
    (lambda: E.SampledLaplace(0.1, 0.0), r"SampledLaplace.b"),
    (lambda: E.PMFPair([0.5, 0.5], [1.0]), r"same length"),
    (lambda: E.PMFPair([0.5, 0.6], [0.5, 0.5]), r"PMFPair.p must sum to 1"),
    (lambda: E.PMFPair([1.5, -0.5], [0.5, 0.5]), r"PMFPair.p must be in"),
    (lambda: E.PMFPair([[0.5, 0.5]], [0.5, 0.5]), r"PMFPair.p must be 1-D"),
    (lambda: E.PMFPair("ab", [0.5, 0.5]), r"PMFPair.p must be a 1-D sequence"),
])
def test_bad_events_raise_value_error(make, match):
  with pytest.raises(ValueError, match=match):
    make()


ALL_EVENTS = RDP_EVENTS + [E.EpsilonDelta(1.0, 1e-6), E.Gaussian(2.0)]


@pytest.mark.parametrize("event", ALL_EVENTS, ids=lambda e: type(e).__name__)
def test_pytree_round_trip(event):
  leaves, treedef = jax.tree_util.tree_flatten(event)
  back = jax.tree_util.tree_unflatten(treedef, leaves)
  assert type(back) is type(event) and back == event
  assert jax.tree_util.tree_map(lambda x: x, event) == event
  out = jax.jit(lambda e: e)(event)
  assert type(out) is type(event)
  for a, b in zip(out, event):
    if isinstance(b, tuple):
      assert a == b                                   # static vector fields
    elif b is not None:
      assert float(a) == pytest.approx(float(b))
  # Vector fields are static aux data, never leaves; an omitted sensitivity is no leaf.
  assert all(not isinstance(leaf, tuple) for leaf in leaves)


def test_vector_fields_are_static_and_hashable():
  ev = E.MixtureOfGaussians(jnp.array([1.0, 2.0]), np.array([0, 1, 2]), (0.81, 0.18, 0.01))
  assert ev.sensitivities == (0.0, 1.0, 2.0) and jax.tree_util.tree_leaves(ev)[0].shape == (2,)
  assert hash(jax.tree_util.tree_structure(ev))
  assert E.Gaussian(1.0) == E.Gaussian(1.0, None)
  assert jax.tree_util.tree_leaves(E.Gaussian(1.0)) == [1.0]
  with pytest.raises(ValueError, match="concrete"):
    jax.jit(lambda s: E.PMFPair(s, [0.5, 0.5]))(jnp.array([0.5, 0.5]))


def _jit_params():
  out = []
  for event in RDP_EVENTS[:-2]:
    for traced in (False, True):
      # The traced mixture compiles the sampled-Gaussian quadrature in float32 (~20 s).
      slow = traced and isinstance(event, E.MixtureOfGaussians)
      marks = (pytest.mark.slow,) if slow else ()
      out.append(pytest.param(event, traced, marks=marks,
                              id=f"{type(event).__name__}-{'traced' if traced else 'constant'}"))
  return out


@pytest.mark.parametrize("event, traced", _jit_params())
def test_rdp_accountant_composes_each_event_in_jit(event, traced):
  with jax.enable_x64(False):
    acc = accountant.rdp(orders=ORDERS)
    host = acc.compose(acc.init(), event, 3)
    if traced:   # event parameters are traced arguments
      state = jax.jit(lambda st, e: acc.compose(st, e, 3))(acc.init(), event)
    else:        # the event is a compile-time constant of the jitted step
      state = jax.jit(lambda st: acc.compose(st, event, 3))(acc.init())
    eps_host, eps_jit = float(acc.epsilon(host, 1e-6)), float(acc.epsilon(state, 1e-6))
  with jax.enable_x64(True):
    exact_eps = float(jrdp.to_epsilon(_rdp(event) * 3, ORDERS, 1e-6)[0])
  assert eps_host >= exact_eps * (1 - 1e-12)
  assert eps_jit >= exact_eps * (1 - 1e-6)   # float32 kernels: rounded up, within ~1e-6
  assert eps_jit == pytest.approx(exact_eps, rel=1e-3)


def test_gaussian_sensitivity_scales_rdp():
  a = np.asarray(accountant.event_rdp(E.Gaussian(2.0, 3.0), ORDERS, jnp.float64))
  b = np.asarray(accountant.event_rdp(E.Gaussian(2.0 / 3.0), ORDERS, jnp.float64))
  np.testing.assert_allclose(a, b, rtol=1e-12)
  np.testing.assert_allclose(a, ORDERS * 9 / 8, rtol=1e-9)
