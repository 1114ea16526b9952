"""Mixed configurations on the batched FFT kernel (jaxdp._src.pld.extra).

A configuration with (sampled) Gaussian phases and other events (Laplace,
discrete Gaussian, randomized response, ...) is composed by the batched
kernel of jaxdp.pld, the other events discretised on the host on the same
grid. References: exact δ by mpmath (Gaussian x T composed with Laplace and
randomized response, and one sampled-Gaussian step with randomized response),
the general engine (jaxdp.pld_general, an independent host composition on its
own grid) and dp_accounting (tests/accounting/test_pld_batch.py).
"""

import math

import mpmath as mp
import numpy as np
import pytest

from jaxdp import accountant
from jaxdp import events as E
from jaxdp import mechanisms
from jaxdp import pld_accountant as PA
from jaxdp import pld_general
from jaxdp._src.accounting import pld_accountant as PA_impl
from jaxdp._src.pld import general as pld_general_impl

mp.mp.dps = 40


@pytest.fixture
def hybrid_only(monkeypatch):
  """Fails the test if a configuration falls back to the general engine; one
  mixed configuration per call (the accountant's) goes to the kernel too."""
  def boom(*a, **k):
    raise AssertionError("configuration went to the general engine")
  monkeypatch.setattr(PA_impl, "_general_one", boom)
  monkeypatch.setattr(PA_impl, "_MIXED_KERNEL_MIN", 1)


def _bounds(phases, value, want_epsilon):
  acc = accountant.pld()
  st = acc.init()
  for ev, c in phases:
    st = acc.compose(st, ev, c)
  fn = acc.epsilon if want_epsilon else acc.delta
  return fn(st, np.asarray(value, np.float64), return_bounds=True)


def _general(phases, value, want_epsilon):
  pairs = [(mechanisms.dominating_pairs(ev), c) for ev, c in phases]
  fn = pld_general.epsilon if want_epsilon else pld_general.delta
  return fn(pairs, np.asarray(value, np.float64), return_bounds=True)


# ---------------------------------------------------------------------------
# exact references (mpmath)
# ---------------------------------------------------------------------------


def _phi(x):
  return mp.ncdf(x)


def _delta_gauss(mu, e):
  """δ(e) of N(μ,1) vs N(0,1) for any real e: E_P[(1 - e^{e-L})_+], L ~ N(μ²/2, μ²)."""
  return _phi(mu / 2 - e / mu) - mp.e ** e * _phi(-mu / 2 - e / mu)


def _rr_pmf(p, k):
  """k-ary randomized response (outcomes: true bucket, neighbour's bucket, others)."""
  a, b = 1 - p + p / k, p / k
  return [a, b, (k - 2) * b], [b, a, (k - 2) * b]


def _rr_losses(p, k, times):
  """(P-mass, loss) atoms of ``times`` independent RR steps."""
  pp, qq = _rr_pmf(mp.mpf(p), k)
  atoms = [(mp.mpf(1), mp.mpf(0))]
  for _ in range(times):
    atoms = [(w * pi, l + mp.log(pi / qi)) for w, l in atoms for pi, qi in zip(pp, qq) if pi > 0]
  return atoms


def _exact_gauss_laplace_rr(sigma, steps, b, rr, eps):
  """Exact δ(ε) of Gaussian(σ) x T, Laplace(b) x 1 and RR(p, k) x m (all symmetric).

  Under P = Lap(1, b) the loss (|x| - |x-1|)/b is 1/b with mass 1/2, -1/b with
  mass e^{-1/b}/2, and (2x-1)/b for x in (0, 1) with density e^{-(1-x)/b}/(2b).
  """
  mu = mp.sqrt(steps) / sigma
  b = mp.mpf(b)
  eps = mp.mpf(eps)
  total = mp.mpf(0)
  for w, l in _rr_losses(*rr):
    e = eps - l
    part = _delta_gauss(mu, e - 1 / b) / 2 + mp.e ** (-1 / b) / 2 * _delta_gauss(mu, e + 1 / b)
    part += mp.quad(lambda x: mp.e ** (-(1 - x) / b) / (2 * b) * _delta_gauss(mu, e - (2 * x - 1) / b),
                    [0, 0.5, 1])
    total += w * part
  return total


def _delta_sampled_gauss(q, sigma, e, remove):
  """δ(e) of one Poisson-sampled Gaussian step, either direction, any real e."""
  q, s, e = mp.mpf(q), mp.mpf(sigma), mp.mpf(e)
  sf = lambda x: 1 - _phi(x)  # noqa: E731
  if remove:   # P = (1-q)N(0,σ²) + qN(1,σ²), Q = N(0,σ²); loss increasing in x
    if e <= mp.log(1 - q):
      return 1 - mp.e ** e
    x = s ** 2 * mp.log((mp.e ** e - (1 - q)) / q) + mp.mpf(1) / 2
    p_tail = (1 - q) * sf(x / s) + q * sf((x - 1) / s)
    return p_tail - mp.e ** e * sf(x / s)
  # add: P = N(0,σ²), Q = (1-q)N(0,σ²) + qN(1,σ²); loss decreasing in x
  if e >= -mp.log(1 - q):
    return mp.mpf(0)
  x = s ** 2 * mp.log((mp.e ** (-e) - (1 - q)) / q) + mp.mpf(1) / 2   # L > e <=> x < this
  return _phi(x / s) - mp.e ** e * ((1 - q) * _phi(x / s) + q * _phi((x - 1) / s))


def _exact_sampled_gauss_rr(q, sigma, rr, eps):
  return max(sum(w * _delta_sampled_gauss(q, sigma, eps - l, remove) for w, l in _rr_losses(*rr))
             for remove in (True, False))


def test_rr_pair_matches_reference_pmf():
  """The pair the kernel discretises is the RR law written out here."""
  pair = mechanisms.dominating_pairs(E.RandomizedResponse(0.4, 5)).remove
  p, q = _rr_pmf(0.4, 5)
  np.testing.assert_allclose(sorted(np.asarray(pair.p)), sorted(p), rtol=1e-14)
  np.testing.assert_allclose(sorted(np.asarray(pair.q)), sorted(q), rtol=1e-14)


@pytest.mark.parametrize("sigma, steps, b, rr", [
    (2.0, 40, 3.0, (0.6, 4, 2)),
    (0.9, 5, 1.0, (0.3, 2, 1)),
    pytest.param(8.0, 400, 10.0, (0.8, 10, 3), marks=pytest.mark.slow),   # 27 RR atoms, ~10 s
])
def test_exact_gaussian_laplace_rr(hybrid_only, sigma, steps, b, rr):
  """lower <= exact δ <= upper at several ε, and ε(δ) brackets the exact root."""
  phases = [(E.Gaussian(sigma), steps), (E.Laplace(b), 1), (E.RandomizedResponse(rr[0], rr[1]), rr[2])]
  eps = np.array([0.0, 0.3, 1.0, 2.5])
  lo, up = _bounds(phases, eps, want_epsilon=False)
  for e, l, u in zip(eps, lo, up):
    exact = float(_exact_gauss_laplace_rr(sigma, steps, b, rr, e))
    assert l <= exact * (1 + 1e-9) + 1e-15 and exact <= u * (1 + 1e-9), (e, l, exact, u)
    assert u - l <= 0.02 * exact + 1e-12, (e, l, exact, u)
  for target in (1e-3, 1e-6):
    lo_e, up_e = _bounds(phases, target, want_epsilon=True)
    assert float(_exact_gauss_laplace_rr(sigma, steps, b, rr, up_e)) <= target * (1 + 1e-9)
    if lo_e > 0:
      assert float(_exact_gauss_laplace_rr(sigma, steps, b, rr, lo_e)) >= target * (1 - 1e-9)
    assert up_e - lo_e <= 0.01 * up_e + 1e-9


@pytest.mark.parametrize("q, sigma, rr", [(0.1, 1.0, (0.5, 3, 1)), (0.5, 0.7, (0.2, 2, 1))])
def test_exact_sampled_gaussian_rr(hybrid_only, q, sigma, rr):
  """One Poisson-sampled Gaussian step with randomized response, both directions."""
  phases = [(E.SampledGaussian(q, sigma), 1), (E.RandomizedResponse(rr[0], rr[1]), rr[2])]
  eps = np.array([0.0, 0.2, 0.8, 2.0])
  lo, up = _bounds(phases, eps, want_epsilon=False)
  for e, l, u in zip(eps, lo, up):
    exact = float(_exact_sampled_gauss_rr(q, sigma, rr, e))
    assert l <= exact * (1 + 1e-9) + 1e-15 and exact <= u * (1 + 1e-9), (e, l, exact, u)
  lo_e, up_e = _bounds(phases, 1e-4, want_epsilon=True)
  assert float(_exact_sampled_gauss_rr(q, sigma, rr, up_e)) <= 1e-4 * (1 + 1e-9)
  assert float(_exact_sampled_gauss_rr(q, sigma, rr, lo_e)) >= 1e-4 * (1 - 1e-9)


# ---------------------------------------------------------------------------
# against the general engine, every event kind
# ---------------------------------------------------------------------------

EXTRAS = [
    (E.Laplace(5.0), 20),
    (E.SampledLaplace(0.05, 0.5), 50),
    (E.DiscreteLaplace(0.7), 10),
    (E.DiscreteGaussian(4.0), 10),
    (E.RandomizedResponse(0.5, 4), 5),
    (E.EpsilonDelta(0.2, 1e-8), 3),
    (E.PureDP(0.05), 30),
    (E.MixtureOfGaussians(2.0, [1.0, 2.0], [0.7, 0.3]), 20),
    (E.SampledGaussian(0.02, 1.2, "replace_one"), 100),
    (E.PMFPair([0.5, 0.3, 0.2], [0.3, 0.4, 0.3]), 5),
]


@pytest.mark.parametrize("extra", EXTRAS, ids=lambda x: type(x[0]).__name__)
def test_agrees_with_general_engine(hybrid_only, extra):
  """Intervals of the kernel and of the general engine overlap (both are
  certified), for ε(δ) and δ(ε), and the upper bounds agree to 0.5%."""
  phases = [(E.SampledGaussian(0.02, 1.0), 300), extra]
  lo, up = _bounds(phases, [1e-5, 1e-8], want_epsilon=True)
  glo, gup = _general(phases, [1e-5, 1e-8], want_epsilon=True)
  assert np.all(lo <= gup * (1 + 1e-9)) and np.all(glo <= up * (1 + 1e-9)), (lo, up, glo, gup)
  np.testing.assert_allclose(up, gup, rtol=5e-3)
  eps = np.array([0.0, 0.5, float(up[0]), np.inf])
  dlo, dup = _bounds(phases, eps, want_epsilon=False)
  glo, gup = _general(phases, eps, want_epsilon=False)
  assert np.all(dlo <= gup * (1 + 1e-9) + 1e-300), (dlo, gup)
  assert np.all(glo <= dup * (1 + 1e-9) + 1e-300), (glo, dup)
  assert dup[-1] >= glo[-1] and np.all(np.diff(dup) <= 1e-15)


def test_two_gaussian_phases_and_two_extras(hybrid_only):
  phases = [(E.SampledGaussian(0.01, 0.9), 500), (E.Laplace(20.0), 10),
            (E.SampledGaussian(0.05, 2.0), 200), (E.DiscreteGaussian(30.0), 5)]
  lo, up = _bounds(phases, 1e-6, want_epsilon=True)
  glo, gup = _general(phases, 1e-6, want_epsilon=True)
  assert lo <= gup and glo <= up
  assert abs(up / gup - 1) <= 5e-3


def test_batch_mixes_configurations(hybrid_only):
  """epsilon_batch answers each configuration as the kernel does alone,
  whatever else is in the batch (different extras, none, several)."""
  cfgs = [[(E.SampledGaussian(0.01, 1.0), 1000), (E.Laplace(20.0), 10)],
          [(E.SampledGaussian(0.02, 1.5), 300)],
          [(E.SampledGaussian(0.005, 0.8), 2000), (E.DiscreteGaussian(30.0), 5),
           (E.RandomizedResponse(0.5, 3), 2)]]
  lo, up = PA.epsilon_batch(cfgs, 1e-5, return_bounds=True)
  for i, ph in enumerate(cfgs):
    l1, u1 = _bounds(ph, 1e-5, want_epsilon=True)
    np.testing.assert_allclose([lo[i], up[i]], [l1, u1], rtol=1e-9)


# ---------------------------------------------------------------------------
# properties, routing, memory
# ---------------------------------------------------------------------------


def test_random_mixes_ordered_and_monotone(hybrid_only):
  """lower <= upper; one more event never lowers the upper bound below the
  smaller composition's certified lower bound (nor by more than the width)."""
  rng = np.random.default_rng(7)
  pool = [E.Laplace(10.0), E.DiscreteGaussian(8.0), E.RandomizedResponse(0.6, 3),
          E.DiscreteLaplace(1.0), E.PureDP(0.1)]
  for _ in range(6):
    q, s, t = 10 ** rng.uniform(-3, -1), rng.uniform(0.7, 3.0), int(rng.integers(50, 3000))
    ph = [(E.SampledGaussian(q, s), t)]
    ph += [(pool[k], int(rng.integers(1, 6))) for k in rng.choice(len(pool), 2, replace=False)]
    lo, up = _bounds(ph[:-1], 1e-6, want_epsilon=True)
    lo2, up2 = _bounds(ph, 1e-6, want_epsilon=True)
    assert lo <= up and lo2 <= up2
    assert up2 >= lo * (1 - 1e-9), (ph, lo, up, lo2, up2)
    assert up2 >= up - 2 * (up - lo) - 1e-9, (ph, lo, up, lo2, up2)


def test_routing(monkeypatch):
  """Other events with more steps than the Gaussian phases go to the general
  engine (the grid is chosen from every phase there); otherwise the kernel,
  when the call holds at least two mixed configurations (one goes to the
  general engine: no compilation for a single question)."""
  calls = []
  real = PA_impl._general_one
  monkeypatch.setattr(PA_impl, "_general_one", lambda *a: calls.append(1) or real(*a))
  ok = [(E.SampledGaussian(0.01, 1.0), 100), (E.Laplace(5.0), 100)]
  PA.epsilon_batch([ok, ok], 1e-5)
  assert not calls
  _bounds(ok, 1e-5, True)
  assert len(calls) == 1
  many = [(E.SampledGaussian(0.01, 1.0), 100), (E.Laplace(5.0), 101)]
  PA.epsilon_batch([many, many], 1e-5)
  assert len(calls) == 3


def test_single_question_agrees_with_batch():
  """The accountant's single mixed question (general engine) and the batch's
  answer (kernel) are both certified: their intervals overlap."""
  ph = [(E.SampledGaussian(0.01, 1.0), 1000), (E.Laplace(20.0), 10), (E.DiscreteGaussian(30.0), 5)]
  lo1, up1 = _bounds(ph, 1e-5, want_epsilon=True)
  lo, up = PA.epsilon_batch([ph, ph], 1e-5, return_bounds=True)
  assert lo[0] <= up1 and lo1 <= up[0]
  assert abs(up[0] / up1 - 1) <= 2e-3


def test_extra_grid_beyond_cap_grows_h(hybrid_only):
  """A pure-DP event of ε0 = 60 next to a fine Gaussian grid needs ~10^7 one-step
  cells: the automatic grid grows (still a certified, finite answer); a fixed
  grid raises naming value_discretization_interval."""
  phases = [(E.SampledGaussian(1e-3, 1.0), 1000), (E.PureDP(60.0), 1)]
  lo, up = _bounds(phases, 1e-5, want_epsilon=True)
  assert np.isfinite(up) and lo <= up and up >= 60.0 * (1 - 1e-9) - 1e-6
  acc = accountant.pld(value_discretization_interval=1e-6)
  st = acc.compose(acc.compose(acc.init(), *phases[0]), *phases[1])
  with pytest.raises(ValueError, match="value_discretization_interval"):
    acc.epsilon(st, 1e-5)


def test_laplace_inverse_is_only_a_hint():
  """A wrong loss_inverse changes nothing but speed (every x is checked)."""
  from jaxdp import pairs
  pair = mechanisms.dominating_pairs(E.Laplace(3.0)).remove
  wrong = pair._replace(loss_inverse=lambda level: np.zeros_like(np.asarray(level)) + 0.37)
  none = pair._replace(loss_inverse=None)
  for h in (1e-3, 7e-3):
    ref = pairs.discretize(none, h)
    for p in (pair, wrong):
      got = pairs.discretize(p, h)
      for a, b in zip(got, ref):
        np.testing.assert_allclose(a.p, b.p, rtol=1e-6, atol=1e-15)   # brackets of ~1e-10 in x
        assert a.lo == b.lo and math.isclose(a.inf, b.inf, rel_tol=1e-9, abs_tol=1e-300)


@pytest.mark.parametrize("q, sigma, steps", [
    (1.0, 0.5, 20), (0.999, 2.0, 100),
    pytest.param(0.01, 0.05, 10, marks=pytest.mark.slow),
    pytest.param(1e-6, 0.01, 1000, marks=pytest.mark.slow),
    pytest.param(1e-3, 1.0, 10 ** 6, marks=pytest.mark.slow),
])
def test_edges_of_the_domain(q, sigma, steps):
  """σ down to 0.01, q from 1e-6 to 1, 10^6 steps, δ = 1e-12, next to Laplace
  and randomized response: no NaN or warning, the kernel's interval overlaps
  the general engine's, and δ(ε) is never below the exact one-step δ. (Where
  the kernel's round-off allowance exceeds δ = 1e-12 its upper bound is +inf:
  sound, and noted as a gap.)"""
  import warnings
  ph = [(E.SampledGaussian(q, sigma), steps), (E.Laplace(2.0), 3), (E.RandomizedResponse(0.5, 3), 2)]
  pairs = [(mechanisms.dominating_pairs(ev), c) for ev, c in ph]
  eps = np.array([0.0, 1.0, 50.0])
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    lo, up = PA.epsilon_batch([ph, ph], 1e-12, return_bounds=True)
    dlo, dup = PA.delta_batch([ph, ph], np.tile(eps, (2, 1)), return_bounds=True)
  glo, gup = pld_general.epsilon(pairs, 1e-12, return_bounds=True)
  assert not np.isnan(up[0]) and lo[0] <= up[0]
  assert lo[0] <= gup * (1 + 1e-9) and glo <= up[0] * (1 + 1e-9), (lo[0], up[0], glo, gup)
  assert np.all(dup[0] >= pld_general_impl.one_step_delta(pairs, eps) * (1 - 1e-9))
  gdlo, gdup = pld_general.delta(pairs, eps, return_bounds=True)
  assert np.all(dlo[0] <= gdup * (1 + 1e-9) + 1e-300) and np.all(gdlo <= dup[0] * (1 + 1e-9) + 1e-300)
