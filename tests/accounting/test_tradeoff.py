"""Certified trade-off curves (jaxdp.tradeoff): closed forms, brute force, peers.

Every check compares against something that does not go through
jaxdp.tradeoff: the μ-GDP closed form of the Gaussian mechanism, the exact
Neyman–Pearson curves of small discrete pairs (enumerated likelihood-ratio
tests), and dp_accounting's pessimistic PLD profile.
"""

import numpy as np
import pytest
from scipy import stats

from jaxdp import accountant, events
from jaxdp import tradeoff as tr

FPR = np.unique(np.concatenate([[0.0, 1.0], np.geomspace(1e-8, 0.5, 30),
                                1.0 - np.geomspace(1e-6, 0.5, 12)]))


def _gdp(mu, fpr):
  return stats.norm.cdf(stats.norm.ppf(fpr) + mu)


# --------------------------------------------------------------------------
# exact curves of discrete pairs (brute force)
# --------------------------------------------------------------------------


def _roc_vertices(p, q):
  """(FPR, TPR) vertices of the best tests of H0: P against H1: Q.

  Neyman–Pearson: reject for large Q/P; randomising on the boundary atom
  gives the segments between consecutive deterministic threshold tests.
  """
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = np.where(p > 0, q / p, np.inf)
  order = np.argsort(-ratio, kind="stable")
  a = np.concatenate([[0.0], np.cumsum(p[order])])
  b = np.concatenate([[0.0], np.cumsum(q[order])])
  return np.minimum(a, 1.0), np.minimum(b, 1.0)


def _upper_concave_hull(x, y):
  pts = sorted(set(zip(x.tolist(), y.tolist())))
  hull = []
  for pt in pts:
    while len(hull) >= 2:
      (x1, y1), (x2, y2) = hull[-2], hull[-1]
      if (x2 - x1) * (pt[1] - y1) - (y2 - y1) * (pt[0] - x1) >= 0:
        hull.pop()
      else:
        break
    hull.append(pt)
  hx, hy = np.array(hull).T
  return hx, hy


def _exact_curves(p, q, fpr):
  """(max of the two directions' best TPR, its concave hull = 1 - f_δ)."""
  a1, b1 = _roc_vertices(p, q)
  a2, b2 = _roc_vertices(q, p)
  best = np.maximum(np.interp(fpr, a1, b1), np.interp(fpr, a2, b2))
  hx, hy = _upper_concave_hull(np.concatenate([a1, a2]), np.concatenate([b1, b2]))
  return best, np.interp(fpr, hx, hy)


def _profile(p, q, eps):
  """Exact δ(ε) = max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P))."""
  u = np.exp(np.asarray(eps))[..., None]
  h1 = np.maximum(p - u * q, 0.0).sum(-1)
  h2 = np.maximum(q - u * p, 0.0).sum(-1)
  return np.maximum(h1, h2)


def _profile_kinks(p, q):
  """ε of every kink of the profile: the likelihood ratios of both directions
  and the points where the two directions' hockey-stick curves cross (each
  is linear in u = e^ε between the ratios)."""
  ratios = np.concatenate([p / q, q / p, [1.0]])
  u = np.unique(ratios[ratios >= 1.0])
  h = lambda a, b, x: np.maximum(a - x[..., None] * b, 0.0).sum(-1)  # noqa: E731
  g0 = h(p, q, u) - h(q, p, u)
  cross = []
  for i in range(len(u) - 1):
    if g0[i] * g0[i + 1] < 0:
      cross.append(u[i] + (u[i + 1] - u[i]) * g0[i] / (g0[i] - g0[i + 1]))
  return np.log(np.concatenate([u, cross]))


def _random_pair(rng, k):
  p = rng.dirichlet(np.ones(k) * 0.7)
  q = rng.dirichlet(np.ones(k) * 0.7)
  return p, q


def test_randomized_response_exact_curve():
  # Binary randomized response at ε0: the NP curve has one vertex
  # (1 - p, p), p = e^ε0/(1 + e^ε0); ε0 on the grid makes both bounds exact.
  e0 = 1.3
  pr = np.exp(e0) / (1 + np.exp(e0))
  p, q = np.array([pr, 1 - pr]), np.array([1 - pr, pr])
  eps = np.linspace(0.0, 2.6, 27)
  b = tr.from_profile(_profile(p, q, eps), _profile(p, q, eps), eps, FPR)
  exact = np.interp(FPR, [0.0, 1 - pr, 1.0], [0.0, pr, 1.0])
  np.testing.assert_allclose(b.tpr_upper, exact, atol=1e-14)
  assert np.all(b.tpr_lower <= exact + 1e-15)
  assert np.max(exact - b.tpr_lower) < 2e-2


@pytest.mark.parametrize("seed", range(6))
def test_from_profile_certified_on_any_grid(seed):
  """Upper >= the best attack in either direction; lower <= 1 - f_δ, for
  random asymmetric pairs and random (also coarse) grids."""
  rng = np.random.default_rng(seed)
  fpr = np.unique(np.concatenate([FPR, rng.uniform(0, 1, 200)]))
  for _ in range(8):
    p, q = _random_pair(rng, int(rng.integers(2, 7)))
    best, hull = _exact_curves(p, q, fpr)
    n = int(rng.choice([1, 2, 3, 5, 12, 40]))
    top = rng.uniform(0.1, 6.0)
    eps = np.sort(rng.uniform(0.0, top, n))
    if rng.uniform() < 0.5:
      eps[0] = 0.0
    eps = np.unique(eps)
    d = _profile(p, q, eps)
    widen = rng.uniform(0.0, 0.05, d.shape) * (rng.uniform() < 0.5)
    b = tr.from_profile(np.minimum(d + widen, 1.0), np.maximum(d - widen, 0.0), eps, fpr)
    assert np.all(b.tpr_upper >= hull - 1e-12)
    assert np.all(b.tpr_upper >= best - 1e-12)
    assert np.all(b.tpr_lower <= hull + 1e-12)
    assert np.all(b.tpr_lower <= b.tpr_upper)


def test_from_profile_exact_when_grid_holds_the_kinks():
  """A discrete pair's profile is piecewise linear in e^ε with kinks at the
  likelihood ratios and where the two directions cross.  With those on the
  grid the upper curve is exact; the lower one is exact as well once every
  kink's neighbouring cells lie on the same linear piece (then the
  neighbours' chords are the true slopes)."""
  rng = np.random.default_rng(7)
  for _ in range(5):
    p, q = _random_pair(rng, 5)
    _, hull = _exact_curves(p, q, FPR)
    kinks = _profile_kinks(p, q)
    eps = np.unique(np.concatenate([kinks, np.linspace(0.0, kinks.max() + 0.5, 100)]))
    d = _profile(p, q, eps)
    b = tr.from_profile(d, d, eps, FPR)
    np.testing.assert_allclose(b.tpr_upper, hull, atol=1e-13)
    np.testing.assert_allclose(b.tpr_lower, hull, atol=1e-13)


# --------------------------------------------------------------------------
# DP-SGD and the Gaussian closed form
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sigma,steps", [(2.0, 10), (5.0, 100)])
def test_gaussian_gdp_closed_form_bracketed(sigma, steps):
  # T Gaussian steps are √T/σ-GDP exactly (Dong, Roth & Su 2022, Cor. 2.13).
  b = tr.tradeoff(1.0, sigma, steps, FPR)
  exact = _gdp(np.sqrt(steps) / sigma, FPR)
  assert np.all(b.tpr_upper >= exact - 1e-13)
  assert np.all(b.tpr_lower <= exact + 1e-13)
  assert np.max(b.tpr_upper - b.tpr_lower) < 1e-3


@pytest.fixture(scope="module")
def dpsgd():
  return tr.tradeoff([0.01, 0.05], [1.0, 2.0], 1000, FPR)


def test_dpsgd_curve_properties(dpsgd):
  up, lo = dpsgd.tpr_upper, dpsgd.tpr_lower
  assert up.shape == lo.shape == dpsgd.fpr.shape == (2, FPR.size)
  assert np.all(lo <= up)
  assert np.all(up <= 1.0) and np.all(lo >= FPR)
  assert np.all(np.diff(up, axis=-1) >= 0) and np.all(np.diff(lo, axis=-1) >= 0)
  assert np.all(up[:, 0] >= 0) and np.all(up[:, -1] == 1.0)
  mid = (FPR > 1e-3) & (FPR < 0.5)
  assert np.max(up - lo) < 1e-3
  assert np.all(up[:, mid] > FPR[mid] + 1e-3)   # the mechanism is not perfectly private


def test_dpsgd_matches_dp_accounting_profile(dpsgd):
  """dp_accounting 0.6 has no trade-off curve: feed its pessimistic PLD profile
  to the same profile-to-curve step.  Its curve is an upper bound too, so it
  is >= our certified lower curve, and close to our upper one."""
  pldlib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
  pld = pldlib.from_gaussian_mechanism(1.0, sampling_prob=0.01, pessimistic_estimate=True,
                                       value_discretization_interval=1e-3,
                                       use_connect_dots=True).self_compose(1000)
  eps = np.asarray(tr.epsilon_grid(0.01, 1.0, 1000))
  theirs = tr.from_profile(np.asarray(pld.get_delta_for_epsilon(eps)), None, eps, FPR)
  assert np.all(np.isnan(theirs.tpr_lower))
  assert np.all(theirs.tpr_upper >= dpsgd.tpr_lower[0] - 1e-12)
  np.testing.assert_allclose(theirs.tpr_upper, dpsgd.tpr_upper[0], rtol=2e-3, atol=2e-4)


def test_more_noise_less_risk(dpsgd):
  # σ = 2, q = 0.05 vs σ = 1, q = 0.01: not ordered in general; use σ alone.
  b = tr.tradeoff(0.01, [1.0, 1.5], 1000, [1e-3, 0.1])
  assert np.all(b.tpr_upper[1] < b.tpr_lower[0])


def test_tradeoff_of_state():
  fpr = np.array([1e-3, 1e-2, 0.1, 0.5])
  acc = accountant.rdp()
  st = acc.compose(acc.init(), events.SampledGaussian(0.01, 1.0), 1000)
  b = tr.tradeoff_of_state(acc, st, fpr, num_eps=128)
  tight = tr.tradeoff(0.01, 1.0, 1000, fpr)
  assert np.all(np.isnan(b.tpr_lower))
  assert np.all(b.tpr_upper >= tight.tpr_lower)      # RDP is an upper bound too
  assert np.all(b.tpr_upper <= 1.0) and np.all(b.tpr_upper >= fpr)
  g = accountant.rdp()
  st = g.compose(g.init(), events.Gaussian(3.0), 4)
  b = tr.tradeoff_of_state(g, st, fpr, num_eps=128)
  assert np.all(b.tpr_upper >= _gdp(2.0 / 3.0, fpr) - 1e-13)


# --------------------------------------------------------------------------
# GDP estimate and calibration
# --------------------------------------------------------------------------


def test_gdp_mu_estimate():
  est = tr.gdp_mu(1.0, 4.0, [16, 64])
  exact = np.sqrt([16, 64]) / 4.0
  assert np.all(est.mu >= exact) and np.all(est.mu <= exact * 1.01)
  est = tr.gdp_mu(0.01, 1.0, 1000)
  np.testing.assert_allclose(est.mu_clt, 0.01 * np.sqrt(1000 * np.expm1(1.0)))
  b = tr.tradeoff(0.01, 1.0, 1000, tr.DEFAULT_GDP_FPR)
  assert np.all(tr.gdp_tpr(est.mu, tr.DEFAULT_GDP_FPR) >= b.tpr_upper - 1e-12)
  assert 0.8 * est.mu_clt < est.mu < 1.5 * est.mu_clt


def test_gdp_mu_reads_the_profile_tradeoff_computed(monkeypatch):
  """A report asks tradeoff() and gdp_mu() for one configuration: the second
  reads the kept profile (no PLD call) and answers bit for bit what it
  computes alone; any other input bit, or strict guards, computes again."""
  from jaxdp._src.accounting import tradeoff_dpsgd
  from jaxdp._src.pld import kernel as pld
  calls = []
  delta = pld.delta
  monkeypatch.setattr(pld, "delta", lambda *a, **k: calls.append(1) or delta(*a, **k))
  q, s, t = 256 / 60000, 1.1, 3750
  alone = tr.gdp_mu(q, s, t)
  assert len(calls) == 1
  tradeoff_dpsgd.clear_memo()
  b = tr.tradeoff(q, s, t, [1e-3])
  est = tr.gdp_mu(q, s, t)
  assert len(calls) == 2                      # gdp_mu computed nothing
  np.testing.assert_array_equal(est.mu, alone.mu)
  np.testing.assert_array_equal(tr.tradeoff(q, s, t, [1e-3]).tpr_upper, b.tpr_upper)
  assert len(calls) == 2
  tr.gdp_mu(q, np.nextafter(s, 2.0), t)       # one bit of σ: computed
  assert len(calls) == 3
  monkeypatch.setenv("JAXDP_STRICT_GUARDS", "0")
  np.testing.assert_array_equal(tr.gdp_mu(q, s, t).mu, alone.mu)
  assert len(calls) == 4                      # the guards' mode is part of the key
  grid, up, lo = tradeoff_dpsgd._memo[next(reversed(tradeoff_dpsgd._memo))]
  with pytest.raises(ValueError):
    up[0, 0] = 0.0                            # kept profiles are shared: read-only
  big = np.full(tradeoff_dpsgd._MEMO_ROWS + 1, 0.05)
  kept = len(tradeoff_dpsgd._memo)
  tr.tradeoff(big, 2.0, 10, [1e-3])
  assert len(tradeoff_dpsgd._memo) == kept    # large batches are not kept


def test_gdp_tpr_edges():
  np.testing.assert_array_equal(tr.gdp_tpr(1.0, [0.0, 1.0]), [0.0, 1.0])
  np.testing.assert_allclose(tr.gdp_tpr(0.0, [0.2, 0.7]), [0.2, 0.7])


def test_calibrate_sigma_gaussian_closed_form():
  # q = 1: TPR = Φ(Φ⁻¹(α) + √T/σ), so σ* = √T / (Φ⁻¹(target) - Φ⁻¹(α)).
  target, alpha, steps, rtol = np.array([0.05, 0.3]), 0.01, 25, 1e-3
  sig = tr.calibrate_sigma(1.0, steps, target_tpr=target, at_fpr=alpha, rtol=rtol)
  exact = np.sqrt(steps) / (stats.norm.ppf(target) - stats.norm.ppf(alpha))
  assert np.all(sig >= exact) and np.all(sig <= exact * (1 + 3 * rtol))
  assert np.all(tr.tradeoff(1.0, sig, steps, [alpha]).tpr_upper[:, 0] <= target)
  assert np.all(tr.tradeoff(1.0, sig * (1 - rtol), steps, [alpha]).tpr_upper[:, 0] > target)


def test_calibrate_sigma_dpsgd_feasible_and_tight(monkeypatch):
  """Feasible and tight on the reported curve; and no PLD question is asked
  twice: the search's last σ, checked as returned, reads the answer the
  search computed for it (same bits in, same bits out)."""
  from jaxdp._src.solvers import tradeoff_calibrate as tc
  tpr_at, asked = tc._tpr_at, []

  def counted(*a):   # (q, sigma, steps, fpr, num_eps, rtol, upper_only)
    asked.append((np.asarray(a[0]).tobytes(), np.asarray(a[1]).tobytes(), a[6]))
    return tpr_at(*a)

  monkeypatch.setattr(tc, "_tpr_at", counted)
  q, steps, rtol = 0.02, 500, 1e-3
  sig = tr.calibrate_sigma(q, steps, target_tpr=0.02, at_fpr=1e-3, rtol=rtol)
  assert len(asked) == len(set(asked)) >= 3
  monkeypatch.setattr(tc, "_tpr_at", tpr_at)
  assert tr.tradeoff(q, sig, steps, 1e-3).tpr_upper <= 0.02
  assert tr.tradeoff(q, sig * (1 - rtol), steps, 1e-3).tpr_upper > 0.02


def test_calibrate_sigma_at_the_lower_end_of_its_range():
  """Where σ = sigma_range[0] already meets the target for every row, the
  answer is that end (it raised IndexError: the tightness check ran on no
  rows), and the reported curve there meets the target."""
  q, steps, fpr, target = 1e-3, 10, 0.1, 0.5
  sig = tr.calibrate_sigma([q, q], steps, target_tpr=target, at_fpr=fpr, sigma_range=(0.5, 100.0))
  np.testing.assert_array_equal(sig, [0.5, 0.5])
  assert tr.tradeoff(q, 0.5, steps, fpr).tpr_upper <= target


def test_upper_only_profile_bounds_the_reported_one():
  """calibrate_sigma's rounds read the PLD upper end alone: its TPR bound is
  never below tradeoff()'s (so what the rounds find feasible is), and equal
  where neither the general engine nor the RDP bound binds."""
  from jaxdp._src.accounting import tradeoff as _tr
  from jaxdp._src.core import numerics as nx
  q = np.array([256 / 60000, 0.05, 1e-3, 0.3])
  s = np.array([1.1, 0.6, 0.45, 3.0])
  t = np.array([3750.0, 300.0, 20000.0, 50.0])
  fpr = np.broadcast_to([[1e-5, 1e-3, 0.1]], (4, 3))
  with nx.x64():
    full, _ = _tr._dpsgd_bounds(q, s, t, fpr, 64, 1e-3)
    alone, lower = _tr._dpsgd_bounds(q, s, t, fpr, 64, 1e-3, upper_only=True)
  assert np.all(alone >= full) and np.all(np.isnan(lower))
  np.testing.assert_array_equal(alone[0], full[0])


def test_calibrate_sigma_searches_again_where_the_rounds_were_loose(monkeypatch):
  """Where the rounds' profile is looser than tradeoff()'s (forced here: its
  TPR bound 3% high), the tightness check at σ/(1 + rtol) finds it feasible
  on the reported curve and the search runs again there: the answer is the
  all-full search's, feasible and tight."""
  from jaxdp._src.solvers import tradeoff_calibrate as tc
  tpr_at = tc._tpr_at
  q, steps, target, fpr, rtol = 0.02, 500, 0.02, 1e-3, 1e-3
  monkeypatch.setattr(tc, "_tpr_at", lambda *a: tpr_at(*a[:6], False))   # every call full
  reference = tr.calibrate_sigma(q, steps, target_tpr=target, at_fpr=fpr, rtol=rtol)

  def loose(*a):   # (q, sigma, steps, fpr, num_eps, rtol, upper_only)
    up = tpr_at(*a)
    return np.minimum(up * 1.03, 1.0) if a[6] else up

  monkeypatch.setattr(tc, "_tpr_at", loose)
  sig = tr.calibrate_sigma(q, steps, target_tpr=target, at_fpr=fpr, rtol=rtol)
  assert sig == reference
  assert tr.tradeoff(q, sig, steps, fpr).tpr_upper <= target
  assert tr.tradeoff(q, sig / (1 + rtol), steps, fpr).tpr_upper > target


# --------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("fpr", [-0.1, 1.5, np.nan, [0.1, np.nan]])
def test_bad_fpr(fpr):
  eps = np.linspace(0, 1, 5)
  with pytest.raises(ValueError, match="fpr"):
    tr.from_profile(np.zeros(5), None, eps, fpr)
  with pytest.raises(ValueError, match="fpr"):
    tr.tradeoff(0.01, 1.0, 10, fpr)


def test_bad_profiles():
  eps = np.linspace(0, 1, 5)
  with pytest.raises(ValueError, match="strictly increasing"):
    tr.from_profile(np.zeros(5), None, eps[::-1], 0.1)
  with pytest.raises(ValueError, match="delta_lower must not exceed"):
    tr.from_profile(np.zeros(5), np.full(5, 0.1), eps, 0.1)
  with pytest.raises(ValueError, match="delta_upper"):
    tr.from_profile(np.full(5, 1.5), None, eps, 0.1)
  with pytest.raises(ValueError, match="eps_grid"):
    tr.from_profile(np.zeros(5), None, eps - 1, 0.1)
  with pytest.raises(ValueError, match="do not broadcast"):
    tr.from_profile(np.zeros(4), None, eps, 0.1)


def test_bad_calibration_targets():
  with pytest.raises(ValueError, match="target_tpr must exceed at_fpr"):
    tr.calibrate_sigma(0.01, 100, target_tpr=0.01, at_fpr=0.05)
  with pytest.raises(ValueError, match="at_fpr"):
    tr.calibrate_sigma(0.01, 100, target_tpr=0.5, at_fpr=0.0)
  with pytest.raises(ValueError, match="q"):
    tr.calibrate_sigma(1.5, 100, target_tpr=0.5, at_fpr=0.1)


def test_from_profile_shapes_and_trivial_mechanism():
  eps = np.linspace(0, 2, 9)
  b = tr.from_profile(np.zeros((3, 1)), np.zeros((3, 1)), eps, np.full((2, 2), 0.25))
  assert b.tpr_upper.shape == (3, 2, 2)
  np.testing.assert_allclose(b.tpr_upper, 0.25, atol=1e-14)   # δ ≡ 0: TPR = FPR
  np.testing.assert_allclose(b.tpr_lower, 0.25, atol=1e-14)
  b = tr.tradeoff(0.0, 1.0, 10, [0.1, 0.5])
  np.testing.assert_allclose(b.tpr_upper, [0.1, 0.5], atol=1e-14)


@pytest.mark.slow
def test_calibrate_sigma_dispatches_target_tpr():
  import jaxdp
  q, t, tpr, fpr = 0.01, 500, 0.05, 0.01
  s = float(jaxdp.calibrate.sigma(q=q, steps=t, target_tpr=tpr, at_fpr=fpr))
  assert float(tr.tradeoff(q, s, t, fpr).tpr_upper) <= tpr


def test_calibrate_sigma_target_tpr_arguments():
  import jaxdp
  q, t, tpr, fpr = 0.01, 500, 0.05, 0.01
  with pytest.raises(ValueError, match="target_tpr"):
    jaxdp.calibrate.sigma(1.0, 1e-5, q, t, target_tpr=tpr, at_fpr=fpr)
  with pytest.raises(ValueError, match="at_fpr"):
    jaxdp.calibrate.sigma(q=q, steps=t, target_tpr=tpr)
