"""Tests for the general PLD engine (jaxdp.pld_general) and its pairs (jaxdp.pairs).

Oracles: exact composition of tiny discrete pairs by enumeration; the Gaussian
closed form (Balle–Wang); the fast Poisson-Gaussian path (jaxdp.pld);
dp_accounting's PLD accountant (test-only); the exact tiny-N enumerations of
tests/sampler_reference.py (mpmath).
"""

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

import jaxdp
from jaxdp._src.core import numerics as nx
from jaxdp._src.mechanisms import sampled as S
from jaxdp import pairs, pld, pld_general as G, profiles, sampling

import sampler_reference as R

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event as E  # noqa: E402
from dp_accounting import privacy_accountant as PA  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant as PLDA  # noqa: E402
from jaxdp._src.pld import general_compose as G_compose
from jaxdp._src.pld import general_readout as G_readout


# --------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------


def _exact_discrete(p, q, p_inf, T, eps):
  """δ(ε) of the T-fold product of one direction, by enumeration (float64)."""
  p, q = np.asarray(p, float), np.asarray(q, float)
  pts = [(pi, (math.log(pi) - math.log(qi)) if qi > 0 else math.inf) for pi, qi in zip(p, q) if pi > 0]
  if p_inf > 0:
    pts.append((p_inf, math.inf))
  total = 0.0
  for combo in itertools.product(pts, repeat=T):
    mass = math.prod(c[0] for c in combo)
    loss = sum(c[1] for c in combo)
    if loss > eps:
      total += mass * (1.0 if math.isinf(loss) else -math.expm1(eps - loss))
  return total


def _exact_both(p, q, T, eps):
  return max(_exact_discrete(p, q, 0.0, T, eps), _exact_discrete(q, p, 0.0, T, eps))


def _discrete_mech(p, q):
  return pairs.Mechanism(pairs.DiscretePair(np.asarray(p), np.asarray(q)),
                         pairs.DiscretePair(np.asarray(q), np.asarray(p)))


def _gauss_delta(eps, sigma):
  with nx.x64():
    return np.asarray(profiles.gaussian(np.asarray(eps, float), float(sigma)), float)


def _gauss_eps(delta, sigma):
  with nx.x64():
    return float(profiles.gaussian_epsilon(float(delta), float(sigma)))


def _dpa_epsilon(event, delta, relation=PA.NeighboringRelation.ADD_OR_REMOVE_ONE):
  acc = PLDA.PLDAccountant(neighboring_relation=relation, value_discretization_interval=1e-4)
  acc.compose(event)
  return acc.get_epsilon(delta)


def _pair_delta_mp(t, q, qp, sigma, eps):
  """δ(ε) of the truncated-Poisson dominating pair itself (block-weighted, mpmath)."""
  blk = lambda rate, shift: {(shift,): rate, (0.0,): 1 - rate}
  n0 = {(0.0,): mp.mpf(1)}
  rem = (1 - t) * R.hockey_stick_1d(blk(q, 1.0), n0, eps, sigma) + t * R.hockey_stick_1d(blk(qp, 2.0), n0, eps, sigma)
  add = (1 - t) * R.hockey_stick_1d(n0, blk(q, 1.0), eps, sigma) + t * R.hockey_stick_1d(n0, blk(qp, 2.0), eps, sigma)
  return float(max(rem, add))


# --------------------------------------------------------------------------
# discrete pairs: brute force
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("T", [1, 2, 5])
def test_discrete_composition_inside_bounds(seed, T):
  rng = np.random.default_rng(seed)
  p = rng.dirichlet(np.ones(3))
  q = rng.dirichlet(np.ones(3))
  mech = _discrete_mech(p, q)
  eps = np.array([0.0, 0.1, 0.5, 1.0, 2.0])
  lo, up = G.delta([(mech, T)], eps, return_bounds=True)
  exact = np.array([_exact_both(p, q, T, e) for e in eps])
  tol = 1e-12
  assert np.all(lo <= exact + tol) and np.all(exact <= up + tol), (lo, exact, up)
  # Isolated atoms cannot borrow on the optimistic side (first order in h).
  assert np.all(up - lo <= 0.1 * exact + 1e-9)
  # ε: the exact δ at the bounds brackets the target.
  target = np.array([1e-1, 1e-2])
  target = target[target < exact[0]]
  elo, eup = G.epsilon([(mech, T)], target, return_bounds=True)
  for tg, a, b in zip(target, elo, eup):
    assert _exact_both(p, q, T, b) <= tg * (1 + 1e-9)
    assert a <= b
    if a > 0:
      assert _exact_both(p, q, T, a * (1 - 1e-9)) >= tg * (1 - 1e-9)


def test_discrete_infinite_loss_and_unrepresented_mass():
  # A point with q = 0 (true +inf loss) and p_inf (unrepresented mass).
  p, q = np.array([0.5, 0.49, 0.01]), np.array([0.6, 0.4, 0.0])
  mech = pairs.Mechanism(pairs.DiscretePair(p, q, 0.0), pairs.DiscretePair(q, p))
  for T in (1, 3):
    inf_mass = 1 - 0.99 ** T
    lo, up = G.delta([(mech, T)], np.array([0.0, 5.0, np.inf]), return_bounds=True)
    exact = [max(_exact_discrete(p, q, 0.0, T, e), _exact_discrete(q, p, 0.0, T, e)) for e in (0.0, 5.0)]
    assert np.all(lo[:2] <= np.array(exact) + 1e-12) and np.all(np.array(exact) <= up[:2] + 1e-12)
    assert lo[2] == pytest.approx(inf_mass, rel=1e-9) and up[2] >= inf_mass
    # Below the +inf mass no ε exists.
    assert np.isinf(G.epsilon([(mech, T)], inf_mass * 0.5))
    assert np.isinf(G.epsilon([(mech, T)], inf_mass * 0.5, return_bounds=True)[0])
  # p_inf counts at +inf only on the pessimistic side.
  mech2 = pairs.Mechanism(pairs.DiscretePair(np.array([0.5, 0.45]), np.array([0.5, 0.5]), 0.05),
                          pairs.DiscretePair(np.array([0.5, 0.5]), np.array([0.5, 0.45])))
  lo, up = G.delta([(mech2, 2)], np.inf, return_bounds=True)
  assert up >= 1 - 0.95 ** 2 and lo == 0.0


# --------------------------------------------------------------------------
# Gaussian: closed form
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma,T", [(0.5, 1), (1.0, 1), (3.0, 1), (1.0, 10), (2.0, 100), (5.0, 1000)])
def test_gaussian_closed_form_inside_bounds(sigma, T):
  mech = pairs.gaussian(sigma)
  s_T = sigma / math.sqrt(T)                      # T-fold of N(0, σ) is N(0, σ/√T)
  eps = np.array([0.0, 0.3, 1.0, 3.0])
  lo, up = G.delta([(mech, T)], eps, return_bounds=True)
  exact = _gauss_delta(eps, s_T)
  assert np.all(lo <= exact * (1 + 1e-9) + 1e-300) and np.all(exact <= up * (1 + 1e-9))
  for d in (1e-3, 1e-6, 1e-10):
    elo, eup = G.epsilon([(mech, T)], d, return_bounds=True)
    ex = _gauss_eps(d, s_T)
    assert elo <= ex * (1 + 1e-9) and ex <= eup * (1 + 1e-9)
    assert eup - elo <= 1e-3 * ex + 1e-6


def test_monotone_pair_without_q_cdfs():
  """Without Q's CDFs the u-moments come from the cells' loss ranges (finer cells)."""
  full = pairs.gaussian(1.0).remove
  bare = full._replace(log_q_cdf=None, log_q_sf=None)
  mech = pairs.Mechanism(bare, bare)
  for T in (1, 20):
    lo, up = G.epsilon([(mech, T)], 1e-6, return_bounds=True)
    ex = _gauss_eps(1e-6, 1.0 / math.sqrt(T))
    assert lo <= ex <= up and up - lo <= 0.02 * ex


def test_gaussian_heterogeneous_phases_and_sensitivity():
  # N(0,σ1) x T1 then N(0,σ2) with sensitivity 2 x T2: one Gaussian with
  # 1/σ² = T1/σ1² + 4 T2/σ2².
  phases = [(pairs.gaussian(1.5), 7), (pairs.gaussian(3.0, sensitivity=2.0), 3)]
  s = 1 / math.sqrt(7 / 1.5 ** 2 + 4 * 3 / 3.0 ** 2)
  elo, eup = G.epsilon(phases, 1e-5, return_bounds=True)
  ex = _gauss_eps(1e-5, s)
  assert elo <= ex <= eup and eup - elo <= 1e-3 * ex
  # Zero-count phases compose nothing.
  assert G.epsilon([(pairs.gaussian(1.0), 0)], 1e-5) == 0.0
  assert G.delta(phases + [(pairs.gaussian(0.1), 0)], 1.0) == pytest.approx(G.delta(phases, 1.0), rel=1e-9)


# --------------------------------------------------------------------------
# Poisson-subsampled Gaussian: the fast path and dp_accounting
# --------------------------------------------------------------------------


@pytest.mark.parametrize("q,sigma,T", [(0.01, 1.0, 1000), (0.001, 2.0, 5000), (0.1, 5.0, 10000),
                                       (0.05, 0.8, 100)])
def test_poisson_gaussian_agrees_with_fast_path(q, sigma, T):
  mech = S.poisson_gaussian(q, sigma)
  lo, up = G.epsilon([(mech, T)], 1e-5, return_bounds=True)
  flo, fup = (float(v) for v in pld.epsilon(q, sigma, T, 1e-5, return_bounds=True))
  assert max(lo, flo) <= min(up, fup) * (1 + 1e-9)   # both certified: they intersect
  assert abs(up / fup - 1) <= 1e-3
  assert up - lo <= 1e-3 * up                         # the default h meets rtol
  dlo, dup = G.delta([(mech, T)], up, return_bounds=True)
  assert dlo <= 1e-5 * (1 + 1e-9) and dup <= 1e-5 * (1 + 1e-4)


@pytest.mark.parametrize("q,sigma,T", [(0.01, 1.0, 1000), (0.05, 2.0, 500)])
def test_poisson_replace_one_matches_dp_accounting(q, sigma, T):
  mech = S.poisson_gaussian(q, sigma, "replace_one")
  up = G.epsilon([(mech, T)], 1e-5)
  ref = _dpa_epsilon(E.SelfComposedDpEvent(E.PoissonSampledDpEvent(q, E.GaussianDpEvent(sigma)), T),
                     1e-5, PA.NeighboringRelation.REPLACE_ONE)
  assert abs(up / ref - 1) <= 5e-3
  # replace-one costs more than add/remove at the same σ
  assert up > G.epsilon([(S.poisson_gaussian(q, sigma), T)], 1e-5)


# --------------------------------------------------------------------------
# sampler pairs: exact tiny-N references and dp_accounting
# --------------------------------------------------------------------------


@pytest.mark.parametrize("others,b,sigma,tight", [([-1.0] * 3, 2, 0.8, True), ([0.0] * 3, 2, 0.8, False),
                                                  ([-1.0] * 5, 3, 1.5, True)])
def test_without_replacement_replace_one_vs_enumeration(others, b, sigma, tight):
  n = len(others) + 1
  d1 = R.without_replacement_mixture(others + [1.0], b)
  d2 = R.without_replacement_mixture(others + [-1.0], b)
  mech = S.without_replacement_gaussian(n, b, sigma)
  for eps in (0.5, 2.0):
    exact = float(max(R.hockey_stick_1d(d1, d2, eps, sigma), R.hockey_stick_1d(d2, d1, eps, sigma)))
    lo, up = G.delta([(mech, 1)], eps, return_bounds=True)
    assert up >= exact
    if tight:   # others at -C attain the pair: within 1% (measured ~1e-4)
      assert lo <= exact * (1 + 1e-9) and up <= exact * 1.01


def test_symmetrized_pair_is_needed_and_dominates():
  """Pair A = ((1-γ)N(0) + γN(2), N(0)) is attained by one dataset pair and is
  the exact one-step profile for ε >= 0, but it does not dominate the reversed
  order at α < 1 (Lebeda et al. 2024); the symmetrised pair does, and composes
  to strictly more than A itself (and than the others-at-0 pair B)."""
  n, b, sigma, T = 100, 10, 1.0, 20
  g = b / n
  fwd = pairs.gaussian_mixture_pair([0.0, 2.0], [1 - g, g], [0.0], [1.0], sigma)
  sym = S.without_replacement_gaussian(n, b, sigma)
  eps = np.array([0.2, 1.0, 2.0])
  one = G.delta([(sym, 1)], eps, return_bounds=True)
  a_one = G.delta([(pairs.Mechanism(fwd, fwd), 1)], eps, return_bounds=True)
  assert np.all(one[0] <= a_one[1]) and np.all(a_one[0] <= one[1])     # same one-step profile
  a_lo = G.delta([(pairs.Mechanism(fwd, fwd), T)], eps, return_bounds=True)[0]
  b_lo = G.delta([(S.poisson_gaussian(g, sigma, "replace_one"), T)], eps, return_bounds=True)[0]
  up = G.delta([(sym, T)], eps)
  assert np.all(up >= 1.1 * np.maximum(a_lo, b_lo))


@pytest.mark.parametrize("n,q,cap,sigma", [(4, 0.4, 2, 1.0), (6, 0.3, 1, 1.2)])
def test_truncated_poisson_vs_enumeration(n, q, cap, sigma):
  """>= the exact δ of the worst-case tiny dataset; the pair itself (a disjoint
  union revealing the block, not attained at tiny N) is matched within 1%."""
  from scipy import stats
  big = R.poisson_capacity_mixture([-1.0] * (n - 1) + [1.0], q, cap)
  small = R.poisson_capacity_mixture([-1.0] * (n - 1), q, cap)
  t = stats.binom.sf(cap - 1, n - 1, q)
  qp = stats.binom.sf(cap, n, q) * cap / t / n
  mech = S.truncated_poisson_gaussian(n, q, cap, sigma)
  for eps in (0.5, 1.0):
    exact = float(max(R.hockey_stick_1d(big, small, eps, sigma), R.hockey_stick_1d(small, big, eps, sigma)))
    lo, up = G.delta([(mech, 1)], eps, return_bounds=True)
    ref = _pair_delta_mp(t, q, qp, sigma, eps)
    assert exact <= up
    assert lo <= ref * (1 + 1e-6) and ref <= up <= ref * 1.01


@pytest.mark.parametrize("n,q,cap,sigma,T,negligible", [
    (1000, 0.01, 12, 1.0, 500, False),
    (100, 0.3, 30, 2.0, 100, False),
    (10000, 0.01, 250, 1.0, 1000, True),          # P[truncation] ~ 1e-50
])
def test_truncated_poisson_vs_dp_accounting(n, q, cap, sigma, T, negligible):
  ours = max(G.epsilon([(S.truncated_poisson_gaussian(m, q, cap, sigma), T)], 1e-5) for m in (n, n + 1))
  ref = _dpa_epsilon(E.SelfComposedDpEvent(E.TruncatedSubsampledGaussianDpEvent(n, q, cap, sigma), T), 1e-5)
  assert ours <= ref * 1.005          # dp_accounting's truncated block uses a looser (REPLACE) pair
  if negligible:
    assert ours >= ref * (1 - 5e-3)


# --------------------------------------------------------------------------
# the sampler API
# --------------------------------------------------------------------------


def test_sampler_api_uses_the_general_engine():
  N, B, sigma, T, delta = 6000, 60, 1.1, 300, 1e-5
  fixed = sampling.fixed(N, B)
  got = float(jaxdp.epsilon(fixed, sigma, T, delta, accountant="pld"))
  rdp = float(jaxdp.epsilon(fixed, sigma, T, delta))
  tight = float(G.epsilon([(S.without_replacement_gaussian(N, B, sigma), T)], delta))
  assert got == pytest.approx(min(tight, rdp), rel=1e-12) and got < rdp
  d = float(jaxdp.delta(fixed, sigma, T, got, accountant="pld"))
  assert d <= delta * (1 + 1e-6)
  assert float(jaxdp.epsilon(fixed, sigma, T + 50, delta, accountant="pld")) > got
  # truncated Poisson: the larger of the neighbour sizes N and N + 1, and no Poisson substitute
  smp = sampling.poisson(N, B / N, 70)
  got = float(jaxdp.epsilon(smp, sigma, T, delta, accountant="pld"))
  per_n = [float(G.epsilon([(S.truncated_poisson_gaussian(m, B / N, 70, sigma), T)], delta)) for m in (N, N + 1)]
  assert got == pytest.approx(min(max(per_n), float(jaxdp.epsilon(smp, sigma, T, delta))), rel=1e-12)
  assert got >= float(jaxdp.epsilon(B / N, sigma, T, delta, accountant="pld"))
  # steps = 0 and broadcasting
  out = jaxdp.epsilon(fixed, np.array([1.1, 2.0]), np.array([0, T]), delta, accountant="pld")
  assert out[0] == 0.0 and 0 < out[1] < got
  bins = sampling.balls_in_bins(N, B, 120)    # random allocation's laws (issue 38)
  assert (float(jaxdp.epsilon(bins, sigma, T, delta, accountant="pld"))
          <= float(jaxdp.epsilon(bins, sigma, T, delta)))


def test_sampler_event_pairs():
  from jaxdp import events
  ev = events.SampledGaussian(0.01, 1.0)
  m = pairs.sampler_event_pairs(ev)
  assert G.epsilon([(m, 100)], 1e-5) == pytest.approx(
      G.epsilon([(S.poisson_gaussian(0.01, 1.0), 100)], 1e-5), rel=1e-12)
  # truncated Poisson: one pair dominating both neighbour sizes (never below their maximum)
  ev = events.TruncatedPoissonGaussian(2000, 0.01, 30, 1.0)
  one = G.epsilon([(pairs.sampler_event_pairs(ev), 200)], 1e-5)
  both = max(G.epsilon([(m, 200)], 1e-5) for m in S.event_mechanisms(ev))
  assert both <= one <= both * 1.05
  assert G.epsilon([(pairs.sampler_event_pairs(events.ShuffledGaussian(100, 10, 1.0)), 3)], 1e-5) == \
      pytest.approx(_gauss_eps(1e-5, 0.5 / math.sqrt(3)), rel=1e-3)
  with pytest.raises(TypeError):
    pairs.sampler_event_pairs(events.BallsInBinsGaussian(100, 10, 1.0))


# --------------------------------------------------------------------------
# properties and validation
# --------------------------------------------------------------------------


def test_monotone_in_count_and_ordered():
  mech = S.poisson_gaussian(0.02, 1.0)
  prev = 0.0
  for T in (1, 2, 10, 100, 1000):
    lo, up = G.epsilon([(mech, T)], 1e-6, return_bounds=True)
    assert lo <= up and up >= prev
    prev = up
  d = G.delta([(mech, 100)], np.linspace(0, 3, 7))
  assert np.all(np.diff(d) <= 0)


def test_memory_guard_and_user_grid():
  mech = S.poisson_gaussian(0.01, 1.0)
  with pytest.raises(ValueError, match="value_discretization_interval"):
    G.epsilon([(mech, 10 ** 5)], 1e-5, value_discretization_interval=1e-7)
  a = G.epsilon([(mech, 100)], 1e-5, value_discretization_interval=1e-3, return_bounds=True)
  b = G.epsilon([(mech, 100)], 1e-5, return_bounds=True)
  assert max(a[0], b[0]) <= min(a[1], b[1])


def test_bad_input():
  mech = pairs.gaussian(1.0)
  with pytest.raises(ValueError, match="phases"):
    G.epsilon(mech, 1e-5)
  with pytest.raises(ValueError, match="count"):
    G.epsilon([(mech, -1)], 1e-5)
  with pytest.raises(ValueError, match="count"):
    G.epsilon([(mech, 1.5)], 1e-5)
  with pytest.raises(ValueError, match="delta"):
    G.epsilon([(mech, 1)], 0.0)
  with pytest.raises(ValueError, match="epsilon"):
    G.delta([(mech, 1)], -0.1)
  with pytest.raises(ValueError, match="value_discretization_interval"):
    G.delta([(mech, 1)], 1.0, value_discretization_interval=0.0)
  with pytest.raises(ValueError, match="rtol"):
    G.delta([(mech, 1)], 1.0, rtol=0.5)
  with pytest.raises(ValueError, match="nondecreasing"):
    pairs.gaussian_mixture_pair([0.0], [1.0], [0.0, 1.0], [0.5, 0.5], 1.0)
  with pytest.raises(ValueError, match="weights_p"):
    pairs.gaussian_mixture_pair([0.0, 1.0], [0.5, 0.6], [0.0], [1.0], 1.0)
  with pytest.raises(ValueError, match="sigma"):
    pairs.gaussian(0.0)
  with pytest.raises(ValueError, match="p"):
    G.delta([(pairs.Mechanism(pairs.DiscretePair(np.array([0.7, 0.7]), np.array([0.5, 0.5])),
                              pairs.DiscretePair(np.array([0.5, 0.5]), np.array([0.5, 0.5]))), 1)], 1.0)
  with pytest.raises(ValueError, match="batch_size"):
    S.without_replacement_gaussian(10, 11, 1.0)
  with pytest.raises(ValueError, match="relation"):
    S.poisson_gaussian(0.1, 1.0, "zero_out")
  with pytest.raises(TypeError):
    G.delta([(pairs.Mechanism(object(), object()), 1)], 1.0)


# --------------------------------------------------------------------------
# sweeps (pytest -m slow)
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_sweep_dpsgd_against_fast_path(seed):
  rng = np.random.default_rng(100 + seed)
  q = float(10 ** rng.uniform(-3, -1))
  sigma = float(10 ** rng.uniform(math.log10(0.5), math.log10(5)))
  T = int(10 ** rng.uniform(1, 5))
  mech = S.poisson_gaussian(q, sigma)
  lo, up = G.epsilon([(mech, T)], 1e-5, return_bounds=True)
  flo, fup = (float(v) for v in pld.epsilon(q, sigma, T, 1e-5, return_bounds=True))
  assert max(lo, flo) <= min(up, fup) * (1 + 1e-9)
  assert up - lo <= 1e-3 * up


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_sweep_truncated_poisson_vs_dp_accounting(seed):
  rng = np.random.default_rng(2000 + seed)
  n = int(10 ** rng.uniform(2, 4.5))
  q = float(10 ** rng.uniform(-2.5, -0.7))
  cap = max(1, int(n * q + rng.uniform(-1, 4) * math.sqrt(n * q)))
  sigma = float(rng.uniform(0.7, 3.0))
  T = int(10 ** rng.uniform(1, 3))
  ours = max(G.epsilon([(S.truncated_poisson_gaussian(m, q, cap, sigma), T)], 1e-5) for m in (n, n + 1))
  ref = _dpa_epsilon(E.SelfComposedDpEvent(E.TruncatedSubsampledGaussianDpEvent(n, q, cap, sigma), T), 1e-5)
  assert ours <= ref * 1.005


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60))
def test_sweep_discrete_brute_force(seed):
  rng = np.random.default_rng(1000 + seed)
  k = int(rng.integers(2, 5))
  p, q = rng.dirichlet(np.ones(k) * 0.5), rng.dirichlet(np.ones(k) * 0.5)
  T = int(rng.integers(1, 7))
  mech = _discrete_mech(p, q)
  eps = np.array([0.0, 0.2, 1.0, 3.0])
  lo, up = G.delta([(mech, T)], eps, return_bounds=True)
  exact = np.array([_exact_both(p, q, T, e) for e in eps])
  assert np.all(lo <= exact + 1e-12) and np.all(exact <= up + 1e-12)


def test_discrete_hockey_stick_at_huge_epsilon():
  """Regression: e^ε overflowed to inf and inf·0 (an outcome Q cannot produce)
  gave NaN, which the δ guard took as its lower bound. Now the +inf-loss
  outcomes keep their P-mass at every ε, without warnings."""
  import warnings
  from jaxdp import pairs
  pr = pairs.DiscretePair(np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.3, 0.5, 0.0, 0.2]))
  eps = np.array([0.0, 0.3, 1.0, 800.0, 1e5, np.inf])
  ref = np.array([sum(max(p - math.exp(min(e, 700.0)) * q, 0.0) if q > 0 else p
                      for p, q in zip(pr.p, pr.q)) for e in eps])
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    got = pairs.hockey_stick(pr, eps)
  np.testing.assert_allclose(got, ref, rtol=1e-9)
  assert np.all(got <= ref)


def test_automatic_grid_growth_reads_the_grown_grid(monkeypatch):
  """Regression: when the automatic grid had to grow (window beyond the memory
  cap), δ and ε were read off the composed PMF with the ORIGINAL interval h,
  so losses were mislabelled: at q = 1e-3, σ = 1, 10^6 steps the upper δ(0)
  came out 0.117 where the truth is ~0.49 (only the guard, seeing lower >
  upper, caught it). With a small cap the growth happens at once; the answer
  must bracket the one computed on a fixed grid, and the true δ from the
  Gaussian closed form (q = 1 here: the exact reference)."""
  from scipy import stats
  monkeypatch.setattr(G_compose, "MAX_WINDOW", 2 ** 14)
  sigma, steps = 4.0, 400
  from jaxdp import events as E, mechanisms
  pairs = [(mechanisms.dominating_pairs(E.Gaussian(sigma)), steps)]
  mu = math.sqrt(steps) / sigma
  eps = np.array([0.0, 1.0, 3.0])
  exact = stats.norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)
  h0 = G.grid_interval(pairs)
  lo, up = G.delta(pairs, eps, return_bounds=True)
  assert np.all(lo <= exact * (1 + 1e-9)) and np.all(exact <= up * (1 + 1e-9)), (lo, exact, up)
  e_lo, e_up = G.epsilon(pairs, 1e-3, return_bounds=True)
  exact_at = lambda e: stats.norm.cdf(mu / 2 - e / mu) - math.exp(e) * stats.norm.cdf(-mu / 2 - e / mu)
  assert exact_at(e_up) <= 1e-3 * (1 + 1e-9) and exact_at(e_lo) >= 1e-3 * (1 - 1e-9)
  with pytest.raises(ValueError, match="value_discretization_interval"):
    G.delta(pairs, eps, value_discretization_interval=h0)   # the cap forces growth


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 256, 257, 5000])
@pytest.mark.parametrize("c", [0.0, 1e-300, 0.25, 0.999, 1.0 - 1e-12, 1.0])
def test_discounted_suffix_sums_match_the_sequential_recursion(n, c):
  """The blocked recursion (no SciPy signal import) against D_i = w_i + c·D_{i+1}
  in extended precision, within the (n + 4)·2u margin that _suffix applies."""
  rng = np.random.default_rng(n)
  w = rng.random(n) * np.exp(rng.uniform(-40.0, 0.0, n))
  ref = np.zeros(n + 1, np.longdouble)
  for i in range(n - 1, -1, -1):
    ref[i] = np.longdouble(w[i]) + np.longdouble(c) * ref[i + 1]
  got = G_readout.discounted_suffix_sums(w, c)
  rel = np.abs(got.astype(np.longdouble) - ref[:n]) / np.maximum(ref[:n], 1e-300)
  assert float(rel.max()) <= 2 * (n + 4) * np.finfo(np.float64).eps


def test_fast_fft_lengths_are_the_smallest_5_smooth():
  def smooth(m):
    for p in (2, 3, 5):
      while m % p == 0:
        m //= p
    return m == 1
  for n in range(1, 2000):
    got = G_compose._next_fast_len(n)
    assert got >= n and smooth(got)
    assert not any(smooth(m) for m in range(n, got))


def test_overflowed_error_bound_is_infinite_not_nan():
  """A harness draw (q = 1e-3, σ = 0.06, T = 25, ε = 147.24, in a batch of δ
  queries) renormalised a composition by a subnormal maximum: the general
  engine's L1 error bound overflowed to +inf and inf·0 in the allowance made
  its upper δ NaN (the guards then rejected pld.delta's answer). The
  allowance of an overflowed bound is +inf, never NaN."""
  import types
  comp = types.SimpleNamespace(dist=types.SimpleNamespace(err=np.inf, logc=0.0), lam=10.0)
  got = G_readout._allowance(comp, np.array([1e3, 0.0]))
  assert np.all(np.isinf(got)) and not np.any(np.isnan(got))
  comp.dist.err = 1e-20
  np.testing.assert_allclose(G_readout._allowance(comp, np.array([0.0])), [1e-20])
