"""The round-off allowance of jaxdp._src.kernels.bins_add, checked rather than assumed (issue 35, 2b).

Step (5) of that module's docstring charges 1e-12 × the magnitudes entering
each log-term, assuming exp/log/expm1/log1p/tanh/gammaln accurate to
``_bins_add._ULPS`` units of 2u = 2⁻⁵². Here:

* that accuracy is MEASURED on this backend against mpmath (dps 30) over the
  argument ranges the module reaches; the ranges were logged from calls over the
  domain (k = 1 … 1e7, σ = 0.3 … 30, α = 1.01 … 1024) and a slow test re-logs
  them and checks they stay inside the sampled ones;
* the bound is compared end to end with an independent evaluation of
  log E[M^{-s}]: the k = 1 closed form, mpmath's rotation formula at k = 2
  (sampler_reference), and at any k a float64 composite Gauss–Legendre
  evaluation of E - 1 = Γ(s)⁻¹ ∫ e^{sv}(φ(e^v/k)^k - e^{-e^v}) dv (positive
  integrands, no cancellation; itself checked against both of the former to
  1e-9). The bound must lie above the reference and within 5e-3 relative plus
  5e-12 absolute of it, at the domain's edges: k = 1, 2, large k; σ = 0.3 and
  30; α = 1.01 and up to 1024.
"""

import math
import types

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from jax.scipy.special import gammaln as jgammaln
from scipy.special import gammaln, logsumexp

import sampler_reference as R
from jaxdp._src.kernels import bins_add as ba

AL = np.array([1.01, 1.1, 2.0, 4.0, 16.0, 64.0, 256.0, 1024.0])   # one shape: one compile
REL, ABS = 5e-3, 5e-12                                           # stated looseness allowed
_bound = jax.jit(ba.log_neg_moment_upper)
_quadrature_only = jax.jit(ba._group)   # without the k = 1 exact (convexity) candidate


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


# --------------------------------------------------------------------------------------------
# (b) Accuracy of the elementary functions on the ranges used.

def _ranges():
  """Sample points per function, covering the logged argument ranges:
  exp (-6e303, 700], log [3e-103, 2e303] (sampled [1e-300, 1e308]),
  expm1 [-4e11, 30], log1p [-1 + 2⁻⁵³, 1.5e-13] (sampled [-1, 1]: _log1pmx can
  reach positives), tanh ±[0.1, 3e301] (1/tanh in the Langevin
  function), gammaln [0.01, 1023] (sampled α - 1 ∈ [1e-6, 1e5])."""
  lin, geo = np.linspace, np.geomspace
  return {
      "exp": np.concatenate([lin(-745.0, 700.0, 1500), lin(-1.0, 1.0, 300), -geo(745.0, 1e300, 30)]),
      "log": np.concatenate([geo(1e-300, 1e308, 1200), lin(0.5, 2.0, 300), 1.0 + lin(-1e-6, 1e-6, 101)]),
      "expm1": np.concatenate([lin(-50.0, 30.0, 1200), lin(-1e-3, 1e-3, 201), -geo(50.0, 1e12, 30)]),
      "log1p": np.concatenate([lin(-1.0 + 1e-12, 1.0, 1200), lin(-0.4143, -0.359, 600),
                               -1.0 + geo(2.0 ** -53, 1e-12, 60),
                               -geo(1e-300, 0.5, 200), geo(1e-300, 1.0, 100)]),
      "tanh": np.concatenate([lin(0.1, 25.0, 1000), -lin(0.1, 25.0, 200), geo(25.0, 1e308, 30),
                              -geo(25.0, 1e308, 30)]),
      "gammaln": np.concatenate([geo(1e-6, 1e5, 800), lin(0.9, 2.1, 200)]),
  }


_JFN = {"exp": jnp.exp, "log": jnp.log, "expm1": jnp.expm1, "log1p": jnp.log1p, "tanh": jnp.tanh,
        "gammaln": jgammaln}
_MFN = {"exp": mp.exp, "log": mp.log, "expm1": mp.expm1, "log1p": mp.log1p, "tanh": mp.tanh,
        "gammaln": mp.loggamma}


def _errors(name, x):
  """|f̂ - f| in units of 2u·|f| (gammaln: 2u·max(1, |f|)); f̂ as compiled inside a program
  (fused with other operations, as in the module), f by mpmath at dps 30."""
  got = np.asarray(jax.jit(lambda y: _JFN[name](y * 1.0) + 0.0)(jnp.asarray(x, jnp.float64)))
  floor = 1.0 if name == "gammaln" else 0.0
  out = np.zeros(x.size)
  with mp.workdps(30):
    for i, (xi, gi) in enumerate(zip(x, got)):
      ref = _MFN[name](mp.mpf(float(xi)))
      if abs(ref) < 1e-300:                  # underflow: only the value's smallness is used
        assert abs(gi) < 1e-290, (name, xi, gi)
        continue
      out[i] = float(abs(mp.mpf(float(gi)) - ref) / (max(abs(float(ref)), floor) * 2.0 ** -52))
  return out


def test_elementary_functions_meet_the_assumed_accuracy():
  measured = {}
  (wlo, whi), wide = ba._LOG1P_WIDE
  for name, x in _ranges().items():
    err = _errors(name, x)
    limit = np.where((name == "log1p") & (x >= wlo) & (x <= whi), wide, ba._ULPS[name])
    measured[name] = float(err.max())
    assert np.all(err <= limit), (name, float(np.max(err - limit)), float(x[np.argmax(err - limit)]))
  # The count of the module docstring, step (5): per term ≤ (160 + 3·16·K)·2u·(1 + Σ|t_j|)
  # plus ≤ 3 log1p calls on the wide interval (|output| ≤ 0.54), a factor ≥ 3 below _MARGIN.
  k_max = max(ba._ULPS.values())
  per_term = (160 + 3 * 16 * k_max) * 2.0 ** -52 + 3 * wide * 2.0 ** -52 * 0.54
  assert 3 * per_term <= ba._MARGIN, (per_term, measured)
  assert 4100 * 2.0 ** -53 * 2 <= ba._MARGIN                 # the final logsumexp


def test_composite_helpers_are_accurate_where_they_cancel():
  # The count of step (5) takes each helper as a chain of a few roundings with condition
  # ≤ 16: measured here, in units of 2u relative to max(1, |f|) for log-valued helpers
  # (their error enters a log-term absolutely) and to |f| for the others.
  lin = np.linspace
  h = lambda y: mp.exp(-y) - 1 + y
  cases = [
      (ba._langevin, lambda x: mp.coth(x) - 1 / x, np.concatenate([lin(-3, 3, 600), lin(0.45, 0.55, 101)]), 0.0),
      (ba._log1pmx, lambda x: mp.log1p(x) - x, np.concatenate([lin(-0.999, 2.0, 600), lin(-0.55, -0.45, 101)]), 0.0),
      (ba._log_sinhc, lambda x: mp.log(mp.sinh(x) / x), lin(-40, 40, 600), 1.0),
      (lambda w: ba._log_h_r(w)[0], lambda w: mp.log(h(mp.exp(w))), lin(-30, 30, 600), 1.0),
      (ba._log_expm1, lambda r: mp.log(mp.expm1(r)), lin(1e-3, 60, 600), 1.0),
  ]
  for f, ref, x, floor in cases:
    x = x[x != 0]
    got = np.asarray(jax.jit(f)(jnp.asarray(x)))
    with mp.workdps(40):
      err = [float(abs(mp.mpf(float(g)) - ref(mp.mpf(float(xi)))) / (max(abs(float(ref(mp.mpf(float(xi))))), floor)
                                                                   * 2.0 ** -52)) for xi, g in zip(x, got)]
    assert max(err) <= 64, (f, max(err), x[int(np.argmax(err))])


@pytest.mark.slow
def test_logged_argument_ranges_stay_inside_the_sampled_ones():
  rec = {n: [] for n in _JFN}

  def wrap(name, f):
    def g(x, *a, **kw):
      arr = np.asarray(x, np.float64).ravel()
      rec[name].append(arr[np.isfinite(arr)])
      return f(x, *a, **kw)
    return g

  proxy = types.SimpleNamespace(**{n: getattr(jnp, n) for n in dir(jnp) if not n.startswith("__")})
  for n in ("exp", "log", "expm1", "log1p", "tanh"):
    setattr(proxy, n, wrap(n, getattr(jnp, n)))
  orig = ba.jnp, ba.gammaln
  ba.jnp, ba.gammaln = proxy, wrap("gammaln", jgammaln)
  try:
    with jax.disable_jit():   # concrete values (lax.map and cummin run eagerly)
      for k, sigma in ((1.0, 0.3), (2.0, 30.0), (1e4, 0.3), (1e7, 30.0)):
        ba.log_neg_moment_upper(k, sigma, AL)
  finally:
    ba.jnp, ba.gammaln = orig
  sampled = _ranges()
  for name, chunks in rec.items():
    got = np.concatenate(chunks)
    lo, hi = sampled[name].min(), sampled[name].max()
    if name == "exp":
      lo = -np.inf           # exp(x < -745) = 0, checked as underflow
    if name == "log1p":
      got = got[got > -1.0]  # log1p(-1) = -inf is only used where the caller discards it
    assert got.size == 0 or (got.min() >= lo and got.max() <= hi), (name, got.min(), got.max(), lo, hi)


# --------------------------------------------------------------------------------------------
# (c) End to end against independent evaluations.

def _panels(n, order):
  """Composite Gauss–Legendre nodes and weights on [0, 1]."""
  x, w = np.polynomial.legendre.leggauss(order)
  e = np.linspace(0.0, 1.0, n + 1)
  a = 0.5 * np.diff(e)
  return ((e[:-1] + a)[:, None] + a[:, None] * x).ravel(), (a[:, None] * w).ravel()


def _psi_rho(v, k, tau, nz, order):
  """kψ(e^v/k) and ρ = kψ + e^v by Gauss–Legendre in z = (log L - μ)/τ: for t ≤ 1,
  φ = 1 - t + H with H = E[e^{-tL} - 1 + tL] (positive integrand), else φ directly."""
  mu, (xi, wi) = -0.5 * tau * tau, _panels(nz, order)
  lt = (v - math.log(k))[:, None]
  b = lt[:, 0] <= 0.0
  z0 = (-lt - mu) / tau                                      # t e^w = 1 at z0
  lo = np.where(lt <= 0, -14.0, np.minimum(-14.0, z0 - 14.0))
  hi = np.where(lt <= 0, 2.0 * tau + 14.0, np.minimum(14.0, z0 + 8.0 / tau))
  z, w = lo + (hi - lo) * xi, (hi - lo) * wi
  lw = np.log(w) - 0.5 * z * z - 0.5 * math.log(2 * math.pi)
  y = np.exp(np.minimum(lt + mu + tau * z, 700.0))
  h = np.where(y < 1e-2, y * y * (0.5 - y / 6 + y * y / 24 - y ** 3 / 120 + y ** 4 / 720), np.expm1(-y) + y)
  hh = np.sum(np.exp(lw) * h, axis=1)
  x = hh - np.exp(np.minimum(lt[:, 0], 0.0))
  with np.errstate(divide="ignore", invalid="ignore"):
    l1 = np.where(np.abs(x) > 1e-3, np.log1p(x) - x, -x * x / 2 + x ** 3 / 3 - x ** 4 / 4 + x ** 5 / 5)
    kpsi = np.where(b, k * np.log1p(x), k * logsumexp(lw - y, axis=1))
  return kpsi, np.where(b, k * (l1 + hh), kpsi + np.exp(np.minimum(v, 700.0)))


def _log_integrand(s, v, kpsi, rho):
  """log(e^{sv}(φ^k - e^{-u})) = sv + kψ + log(1 - e^{-ρ})."""
  with np.errstate(divide="ignore", invalid="ignore"):
    small = rho < 1.0
    l1m = np.where(small, np.log(np.expm1(np.where(small, rho, 0.5))) - rho,
                   np.log1p(-np.exp(-np.where(small, 1.0, rho))))
  return s * v + kpsi + l1m


def log_moment_gl(k, sigma, alphas, nz=96, nv=96, order=16):
  """log E[M^{-s}] = log1p(Γ(s)⁻¹ ∫ e^{sv}(φ(e^v/k)^k - e^{-e^v}) dv) by composite
  Gauss–Legendre in v (over where the integrand is within e^{-100} of its peak) and z."""
  tau, out = 1.0 / sigma, []
  for a in np.atleast_1d(np.asarray(alphas, np.float64)):
    s = a - 1.0
    vc = np.linspace(-80.0, max(40.0, math.log(s + 2) + (s + 1) * tau * tau + 5 * tau + 10), 1601)
    lc = _log_integrand(s, vc, *_psi_rho(vc, k, tau, nz // 2, order))
    keep = np.nonzero(lc > np.max(lc) - 100.0)[0]
    lo, hi = vc[max(keep[0] - 1, 0)], vc[min(keep[-1] + 1, vc.size - 1)]
    xi, wi = _panels(nv, order)
    v, w = lo + (hi - lo) * xi, (hi - lo) * wi
    li = _log_integrand(s, v, *_psi_rho(v, k, tau, nz, order))
    out.append(float(np.logaddexp(0.0, logsumexp(li, b=w) - gammaln(s))))
  return np.array(out)


def _check(got, ref):
  got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
  assert np.all(got >= ref * (1 - 1e-9)), (got, ref)       # the reference is good to ~1e-10
  assert np.all(got <= ref * (1 + REL) + ABS), (got / ref - 1, got - ref)


@pytest.mark.slow
def test_gauss_legendre_reference_against_mpmath_and_the_closed_form():
  some = AL[[0, 2, 5]]
  for sigma in (0.3, 30.0):
    exact = some * (some - 1) / (2 * sigma * sigma)
    np.testing.assert_allclose(log_moment_gl(1.0, sigma, some), exact, rtol=1e-9)
    mpref = [float(R.balls_in_bins_add_renyi(2, float(a), sigma, dps=20)) * (a - 1) for a in some]
    np.testing.assert_allclose(log_moment_gl(2.0, sigma, some), mpref, rtol=1e-9)


@pytest.mark.slow
def test_k1_quadrature_alone_at_the_edges():
  # k = 1: E M^{-s} = e^{s(s+1)/(2σ²)} exactly; the quadrature alone (without the
  # convexity candidate that is exact here) must stay above it.
  for sigma in (0.3, 30.0):
    _check(_quadrature_only(1.0, sigma, AL - 1.0), AL * (AL - 1) / (2 * sigma * sigma))


def test_k2_edges_against_mpmath_and_the_reference_with_it():
  orders = AL[:7]                                           # mpmath's quad at α ≤ 256
  for sigma in (0.3, 30.0):
    ref = [float(R.balls_in_bins_add_renyi(2, float(a), sigma, dps=20)) * (a - 1) for a in orders]
    _check(np.asarray(_bound(2.0, sigma, AL))[:7], ref)
  np.testing.assert_allclose(log_moment_gl(2.0, 30.0, AL[[0, 6]]), np.array(ref)[[0, 6]], rtol=1e-9)


def test_large_k_and_tiny_values_against_gauss_legendre():
  # k = 1e7, σ = 30: log E ≈ 6e-13 at α = 1.01, where the absolute allowance dominates.
  for k, sigma in ((1e4, 0.3), (1e7, 30.0)):
    _check(_bound(k, sigma, AL), log_moment_gl(k, sigma, AL))


@pytest.mark.slow
def test_domain_grid_against_gauss_legendre():
  for k in (1.0, 2.0, 3.0, 20.0, 234.0, 1e4, 1e7):
    for sigma in (0.3, 1.0, 3.0, 30.0):
      _check(_bound(k, sigma, AL), log_moment_gl(k, sigma, AL))
