"""Certified upper bound on log E_Q[M^{1-α}]: balls-in-bins epoch, add direction.

Q = N(0, σ²I_k), P = (1/k) Σ_i N(e_i, σ²I_k), M = dP/dQ = (1/k) Σ_i L_i, L_i iid,
log L ~ N(μ, τ²), τ = 1/σ, μ = -τ²/2 (E L = 1); s = α - 1 > 0 and
D_α(Q‖P) = log E[M^{-s}]/s. Every step is an inequality in the upward direction.

(1) Gamma integral + Tonelli (integrands ≥ 0): M^{-s} = Γ(s)⁻¹ ∫₀^∞ u^{s-1} e^{-uM} du, so
    E M^{-s} = Γ(s)⁻¹ ∫ u^{s-1} φ(u/k)^k du, φ(t) = E e^{-tL}. ψ = log φ is a cumulant
    generating function (convex, decreasing). ρ(u) = kψ(u/k) + u ≥ 0 (Jensen) is
    increasing (ρ' = 1 - E_t L ≥ 0: L and e^{-tL} are negatively correlated) and
    convex (ρ'' = Var_t L/k), hence convex in v = log u too; as Γ(s)⁻¹∫u^{s-1}e^{-u} = 1,
    E M^{-s} - 1 = Γ(s)⁻¹ ∫ u^{s-1} e^{-u}(e^ρ - 1) du. In v the integrand of E is e^g,
    g(v) = sv + kψ(e^v/k), concave by Prékopa (ψ(e^v) = log ∫ exp(-e^{v+w}) N(w; μ, τ²) dw
    integrates a jointly log-concave function of (v, w)).
(2) φ by quadrature in z = (log L - μ)/τ, w = log t + μ + τz: for t > 1 (A)
    φ = ∫ ϕ(z) e^q dz, q = -e^w; for t ≤ 1 (B) φ = 1 - t + H, H = E h(tL) = ∫ ϕ e^q,
    h(y) = e^{-y} - 1 + y, q = log h(e^w), and ψ ≤ log(1 - t + H̄) (increasing in H̄;
    no cancellation as φ ≥ e^{-t}). Both q are concave (for B, d log h(e^w)/dw =
    y(1 - e^{-y})/h(y) decreases: its derivative has the sign of
    y²e^{-y} - (1 - e^{-y})² ≤ 0, as 2 sinh(y/2) ≥ y). On a z-cell (midpoint m,
    half-width a, y = z - m): log ϕ(z) = log ϕ(m) - my - y²/2 exactly, q ≤ its
    tangent at m and ≥ its chord, and 1 - y²/2 ≤ e^{-y²/2} ≤ 1 - y²/2 + y⁴/8, all
    integrated in closed form. Beyond the window log(ϕ e^q) lies below its end
    tangents (∫ ≤ e^ℓ/|ℓ'|). Running minima/maxima over the grid make the bounds
    monotone, valid as ψ decreases and ρ increases; ψ ≥ -t (Jensen) bounds below.
(3) v-cells [v_j, v_{j+1}] (midpoint m, half-width a, y = v - m); each cell's share
    of E - 1 is bounded by the smallest of
    D1 ∫ e^g with kψ(u/k) ≤ its chord in u (ψ convex): g ≤ sv + kψ̄_j +
       Δ_j(e^{a+y} - 1)/(e^{2a} - 1), Δ_j ≤ 0, concave in y, ≤ its tangent at y = 0;
    D2 ∫ e^g with g below the extended secants of the neighbouring cells (g
       concave; slopes from an upper bound at one end and a lower bound at the
       other keep each line above g), ∫ exp(min of the two lines) exactly;
    I  ∫ Γ(s)⁻¹ e^{sv - e^v}(e^ρ - 1): sv - e^v ≤ its tangent T0 + βy, ρ ≤ its chord
       c0 + by in v, and ∫ e^{βy}(e^{c0+by} - 1) = 2a[expm1(c0) sinhc x2 + sinhc x2 - sinhc x1]
       ≤ 2a sinhc(x2)[expm1 c0 + ab L(x2)] (x1 = βa, x2 = x1 + ab, L = coth - 1/x;
       sinhc is convex, so the difference is ≤ (x2 - x1) sinhc'(x2)).
    Tails: v < v_0: min(expm1 ρ̄_0, 1) u_0^s/Γ(s+1) (e^ρ - 1 increasing, e^{-u} ≤ 1,
    φ ≤ 1) or e^{ḡ_0}/σ_L, σ_L = max_i (g̲_i - ḡ_0)/(v_i - v_0) ≤ g'(v_0) (g concave);
    v > v_J: e^{ḡ_J}/|σ_R|, σ_R = min_i (ḡ_J - g̲_i)/(v_J - v_i) ≥ g'(v_J), else +∞.
(4) Also: E M^{-s} ≤ E L^{-s} = e^{s(s+1)/(2σ²)} (x^{-s} convex; exact at k = 1), and
    D_α non-decreasing in α, so the bound at α' ≥ α also holds at α.
(5) Rounding: an error analysis with MEASURED elementary functions, not a
    machine-checked proof. Model: float64, u = 2⁻⁵³; + - × / sqrt correctly
    rounded (|δ| ≤ u); each f ∈ {exp, log, expm1, log1p, tanh, gammaln}
    returns f(x)(1 + δ), |δ| ≤ K_f·2u (gammaln: absolute error ≤ K·2u·max(1, |f|),
    as its zeros at 1 and 2 forbid a relative bound). K_f is not taken from any
    documentation: tests/kernels/test_bins_add_margin.py measures it against mpmath on
    this backend over the argument ranges this module reaches (logged from calls
    over the domain) and enforces ``_ULPS``. Measured (XLA CPU, jax 0.10, units
    of 2u): exp 0.95, log 0.48, expm1 1.97, tanh 3.5, gammaln 5.6, log1p ≤ 1.3
    except 120 on [-0.4142, -0.36]; enforced: ``_ULPS`` = 2, 2, 4, 8, 16, 16 and
    ``_LOG1P_WIDE`` = 256 on [-0.4143, -0.359].
    Counting. Every certified quantity is a log-term T = Σ_j t_j (≤ 8 summands)
    followed by one logsumexp, and is charged ``_MARGIN``·(1 + Σ_j|t_j|) (plus the
    positional terms below). Each t_j is (i) a rounded combination of inputs
    (≤ 6 roundings), (ii) the log of a sum of nonnegative terms or of a series
    (≤ 20 roundings; the series are positive or alternating with ratio ≤ ½ and
    are truncated below 1e-16 of their leading term), or (iii) a chain of ≤ 3
    elementary calls. Where a helper cancels, its error is measured too (same
    test file, ≤ 64·2u relative to max(1, |f|) for logs, to |f| otherwise):
    log1p(x) - x for x ∈ [-1, -½] (atanh series for |x| < ½), log sinhc and
    log expm1 near their branch points, log h(e^w) near w = 0, the Langevin
    function coth x - 1/x (series below ½: condition ≤ 13); the a² and a⁴ Gauss-cell
    moments cancel but carry a factor ≤ 3e-3 (a ≤ 13/256). Condition numbers
    are ≤ 16 throughout. log1p meets its wide interval only in log sinhc, log h
    (w ≥ 0) and log expm1, where its output (|y| ≤ 0.54) is added to the rest
    of the term: ≤ 256·2u·0.54 ≈ 3.1e-14 absolute per call, ≤ 3 per term,
    ≤ 1e-13 in all, against the allowance's 1e-12. A positional error in an
    abscissa (rounded midpoints m, w = log t + μ + τz, t = e^{v - log k}) moves
    a term by |slope| × that error, charged as |slope| × 1e-12 × (|position| +
    the magnitudes summed into it); gaps between rounded cells are covered by
    the ϕ-exponent m²/2 and the 1 in each cell's allowance. Hence a term's
    round-off is at most (Σ n_j + 3·16·16)·2u·(1 + Σ|t_j|) + 1e-13
    ≤ (160 + 768)·2.2e-16·(…) + 1e-13 ≤ 3.1e-13·(1 + Σ|t_j|): a safety factor
    ≥ 3 below ``_MARGIN`` = 1e-12 (≈ 4500·2u). logsumexp over ≤ 4100 positive
    terms adds ≤ 4100u relative (4.6e-13), a factor ≥ 2 below the final
    1e-12·(1 + |T|). This count was done by reading the code path by path; it
    is not machine-checked, hence the end-to-end tests below. Widths are
    correctly rounded differences of grid points, and only the rounded width is
    used afterwards. End to end (same test file): never below mpmath at k = 2,
    the k = 1 closed form, or a float64 Gauss–Legendre evaluation of the
    identity (checked against both to 1e-9) at k = 1 … 1e7, σ = 0.3 … 30,
    α = 1.01 … 1024, and within 5e-3 relative + 5e-12 absolute of them. Use
    float64 only.

All orders at one (k, σ) share one v-grid (quadratures are the cost): its
density is the largest K/width of the windows (around the modes of g and of
the I integrand) covering each point. Placement uses uncertified estimates; a
poor placement loosens the bound but cannot invalidate it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxdp._src.kernels import rdp_quadrature as _rdp_quadrature

__all__ = ["log_neg_moment_upper"]

_NZ = 128          # z-cells per quadrature
_ZW = 6.5          # z-window half-width, in units of the integrand's width
_NZ_PILOT = 32     # z-nodes of the (uncertified) pilot that places windows
_K = 16.0          # grid points per window width (per order, where the windows lie)
_DMAX = 200.0      # … but at most this many per unit of v
_JU = 32           # floor: uniform density of this many points over the whole v-range
_NG_BASE, _NG_PER_ORDER, _NG_MAX = 512, 32, 4096   # shared grid size
_MARGIN = 1e-12    # relative round-off allowance, see (5)
# Accuracy (units of 2u = 2⁻⁵²) assumed of the elementary functions, and enforced
# by measurement against mpmath on this backend (tests/kernels/test_bins_add_margin.py).
_ULPS = {"exp": 2.0, "log": 2.0, "expm1": 4.0, "log1p": 16.0, "tanh": 8.0, "gammaln": 16.0}
_LOG1P_WIDE = ((-0.4143, -0.359), 256.0)   # … except log1p on this interval (XLA CPU: 120)
_U_MAX_I = 1e8     # the I bound is used only where u ≤ this
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_SINHC = [1.0 / math.factorial(2 * n + 1) for n in range(9)]
_HS = [(-1.0) ** n / math.factorial(n + 2) for n in range(18)]          # h(y)/y²
_MU = [[2.0 / (math.factorial(n) * (n + j + 1)) for n in range(0, 18, 2)] for j in (0, 2, 4)]
# coth x - 1/x = Σ_n 2^{2n} B_{2n} x^{2n-1}/(2n)! (radius π; 12 terms: < 3e-18 relative at |x| ≤ ½)
_LGV = [0.3333333333333333, -0.022222222222222223, 0.0021164021164021165, -0.00021164021164021165,
        2.1377799155576935e-05, -2.1644042808063972e-06, 2.1925947851873778e-07,
        -2.2214608789979678e-08, 2.2507846516808994e-09, -2.2805151204592183e-10,
        2.3106432599002624e-11, -2.3411706819824882e-12]


def _poly(x, coeffs):
  out = jnp.zeros_like(x) + coeffs[-1]
  for c in coeffs[-2::-1]:
    out = out * x + c
  return out


def _log_sinhc(x):
  ax = jnp.abs(x)
  small = ax < 0.5
  xl = jnp.where(small, 1.0, ax)
  return jnp.where(small, jnp.log(_poly(jnp.where(small, x * x, 0.0), _SINHC)),
                   xl + jnp.log1p(-jnp.exp(-2.0 * xl)) - jnp.log(2.0 * xl))


def _langevin(x):
  """coth x - 1/x: the series below ½, where the difference would cancel (condition ≤ 13 above)."""
  small = jnp.abs(x) < 0.5
  xs, xl = jnp.where(small, x, 0.0), jnp.where(small, 1.0, x)
  return jnp.where(small, xs * _poly(xs * xs, _LGV), 1.0 / jnp.tanh(xl) - 1.0 / xl)


def _log1pmx(x):
  """log(1 + x) - x, x > -1 (atanh series for |x| < ½: no cancellation)."""
  small = jnp.abs(x) < 0.5
  xs, xl = jnp.where(small, x, 0.0), jnp.where(small, 0.0, x)
  y = xs / (2.0 + xs)
  ser = -xs * xs / (2.0 + xs) + 2.0 * y ** 3 * _poly(y * y, [1.0 / (2 * n + 3) for n in range(18)])
  return jnp.where(small, ser, jnp.log1p(xl) - xl)


def _log_expm1(r):
  return jnp.where(r > 1.0, r + jnp.log1p(-jnp.exp(-jnp.maximum(r, 1.0))), jnp.log(jnp.expm1(r)))


def _log_h_r(w):
  """log h(y) and r = y h'(y)/h(y) ∈ (1, 2) at y = e^w."""
  ys = jnp.exp(jnp.minimum(w, 0.0))
  ser = _poly(ys, _HS)
  e1 = jnp.where(ys < 1e-8, 1.0 - 0.5 * ys, -jnp.expm1(-ys) / jnp.where(ys > 0, ys, 1.0))
  wl = jnp.clip(w, 0.0, 700.0)
  yl = jnp.exp(wl)
  g1 = -jnp.expm1(-yl)
  log_hl = jnp.where(w > 700.0, w, wl + jnp.log1p(-g1 / yl))
  small = w < 0.0
  return (jnp.where(small, 2.0 * w + jnp.log(ser), log_hl),
          jnp.where(small, e1 / ser, g1 / (1.0 - g1 / yl)))


def _lse(x, axis=-1):
  m = jnp.max(x, axis=axis, keepdims=True)
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  return jnp.squeeze(m, axis) + jnp.log(jnp.sum(jnp.exp(x - m), axis=axis))


def _bisect(f, lo, hi, iters):
  """Root of f with f(lo) > 0 > f(hi), vectorised (signs only): the midpoint
  of :func:`jaxdp._src.kernels.rdp_quadrature.bisect_bracket`'s final bracket."""
  lo, hi = _rdp_quadrature.bisect_bracket(f, lo, hi, iters)  # pylint: disable=protected-access
  return 0.5 * (lo + hi)


def _q(z, log_t, tau, isb):
  """q and q' of form B (isb) or A at z; w = log t + μ + τz."""
  w = log_t + (-0.5 * tau * tau) + tau * z
  ew = jnp.exp(jnp.minimum(w, 700.0))
  qa, dqa = jnp.where(w > 700.0, -jnp.inf, -ew), -tau * ew
  if isb is False:
    return qa, dqa
  log_h, r = _log_h_r(w)
  return jnp.where(isb, log_h, qa), jnp.where(isb, tau * r, dqa)


def _window(log_t, tau, isb, n, zw=_ZW):
  """Cell endpoints (…, n+1) around the mode of ϕ e^q (placement only)."""
  mu = -0.5 * tau * tau
  # A: root of z + τe^w (z < 0): z = -W(e^L)/τ, L = 2 log τ + log t + μ; Newton on
  # ℓ = log W: e^ℓ + ℓ = L, convex increasing, from the right (monotone convergence).
  big_l = 2.0 * jnp.log(tau) + log_t + mu
  ell = jnp.where(big_l > 1.0, jnp.log(jnp.maximum(big_l, 1.0)), big_l)
  for _ in range(8):
    ex = jnp.exp(ell)
    ell = ell - (ex + ell - big_l) / (ex + 1.0)
  za = -jnp.exp(ell) / tau
  if isb is False:                                     # (the pilot: form A only)
    zb = drb = 0.0
  else:
    fb = lambda z: tau * _log_h_r(jnp.minimum(log_t, 0.0) + mu + tau * z)[1] - z
    zb = _bisect(fb, tau + jnp.zeros_like(za), 2.0 * tau + jnp.zeros_like(za), 30)   # B: in [τ, 2τ]
    wb = jnp.minimum(log_t, 0.0) + mu + tau * zb
    rr = _log_h_r(jnp.stack([wb + 0.01, wb - 0.01]))[1]
    drb = (rr[0] - rr[1]) / 0.02
  zc = jnp.where(isb, zb, za)
  half = zw / jnp.sqrt(jnp.where(isb, 1.0 + tau * tau * jnp.abs(drb), 1.0 - tau * za))
  hi = jnp.where(isb, zc + half,   # A: stop where e^w = 80 (integrand < e^{-80})
                 jnp.maximum(jnp.minimum(zc + half, (math.log(80.0) - log_t - mu) / tau), zc + 0.5 * half))
  lo = zc - half
  return lo[..., None] + (hi - lo)[..., None] * jnp.asarray(np.linspace(0.0, 1.0, n + 1))


def _log_gauss_cell(x, a, upper):
  """log ∫_{-1}^{1} e^{xr} P(ar) dr, P(y) = 1 - y²/2 (+ y⁴/8 where ``upper``)."""
  small = jnp.abs(x) < 1.0
  xs = jnp.where(small, x, 0.0) ** 2
  c4 = jnp.where(upper, 0.125 * a ** 4, 0.0)
  ser = _poly(xs, _MU[0]) - 0.5 * a * a * _poly(xs, _MU[1]) + c4 * _poly(xs, _MU[2])
  big = jnp.where(small, 1.0, jnp.abs(x))
  e, ib = jnp.exp(-2.0 * big), 1.0 / big
  nu = ((1.0 - e) * ib - 0.5 * a * a * ((1.0 - e) * (ib + 2.0 * ib ** 3) - (1.0 + e) * 2.0 * ib ** 2)
        + c4 * ((1.0 - e) * (ib + 12.0 * ib ** 3 + 24.0 * ib ** 5) - (1.0 + e) * (4.0 * ib ** 2 + 24.0 * ib ** 4)))
  return jnp.where(small, jnp.log(ser), big + jnp.log(nu))


def _quad(log_t, tau, isb, n):
  """Certified (upper, lower) bounds on log φ(t) (A) or log H(t) (B), see (2)."""
  e = _window(log_t, tau, isb, n)
  lt, ib = log_t[..., None], isb[..., None]
  a = 0.5 * (e[..., 1:] - e[..., :-1])
  m = e[..., :-1] + a
  qq, dqq = _q(jnp.concatenate([m, e], -1), lt, tau, ib)
  q, dq, qe, dqe = qq[..., :n], dqq[..., :n], qq[..., n:], dqq[..., n:]
  lphi, la = -0.5 * m * m - _LOG_SQRT_2PI, jnp.log(a)
  pos_err = _MARGIN * (jnp.abs(m) + a)
  ok = jnp.isfinite(q)
  gam = jnp.where(ok, dq - m, 0.0)
  qa, qb = qe[..., :-1], qe[..., 1:]
  okl = jnp.isfinite(qa) & jnp.isfinite(qb)
  qs = jnp.where(okl, (qb - qa) / (2.0 * a), 0.0)
  gc = _log_gauss_cell(jnp.stack([gam, qs - m]) * a, a, np.array([True, False]).reshape((2,) + (1,) * a.ndim))
  up = lphi + q + la + gc[0]
  # w = log t + μ + τz is rounded with absolute error ≲ 3u(|log t| + τ²/2 + τ|z|); the τ|z| part
  # is in pos_err, the rest moves q by |dq/dw| = |dq/dz|/τ times it.
  wpos = _MARGIN * (jnp.abs(lt) + 0.5 * tau * tau) / tau
  up = up + _MARGIN * (1.0 + jnp.abs(lphi) + jnp.abs(q) + jnp.abs(la)) + jnp.abs(gam) * pos_err \
      + jnp.abs(dq) * wpos
  up = jnp.where(ok, up, -jnp.inf)
  lo = lphi + 0.5 * (qa + qb) + la + gc[1]
  lo = lo - _MARGIN * (1.0 + jnp.abs(lphi) + jnp.abs(qa) + jnp.abs(qb) + jnp.abs(la)) \
      - (jnp.abs(qs) + jnp.abs(m)) * pos_err - (jnp.abs(dqe[..., :-1]) + jnp.abs(dqe[..., 1:])) * wpos
  lo = jnp.where(okl, lo, -jnp.inf)
  # Beyond the window: log(ϕ e^q) is concave, so below its tangents at the ends.
  zz, sg = e[..., jnp.array([0, n])], jnp.array([1.0, -1.0])
  lz = -0.5 * zz * zz - _LOG_SQRT_2PI + qe[..., jnp.array([0, n])]
  dqz = dqe[..., jnp.array([0, n])]
  gap = sg * (dqz - zz) - _MARGIN * (jnp.abs(zz) + jnp.abs(dqz))
  tails = jnp.where(gap > 0, lz - jnp.log(jnp.where(gap > 0, gap, 1.0)), jnp.inf) + _MARGIN * (1.0 + jnp.abs(lz)) \
      + jnp.abs(dqz) * wpos
  up = _lse(jnp.concatenate([up, tails], axis=-1))
  lo = _lse(lo)
  return up + _MARGIN * (1.0 + jnp.abs(up)), lo - _MARGIN * (1.0 + jnp.where(jnp.isfinite(lo), jnp.abs(lo), 0.0))


def _bounds(v, lk, k, tau, n):
  """Upper bounds on kψ(e^v/k) and ρ(e^v), and a lower bound on kψ, at points v."""
  log_t = v - lk
  isb = log_t <= 0.0
  t, u = jnp.exp(jnp.minimum(log_t, 0.0)), jnp.exp(jnp.minimum(v, 700.0))
  big = v > 700.0
  lq = jnp.stack(_quad(log_t, tau, isb, n))
  sg = jnp.array([1.0, -1.0])[:, None]
  hb = jnp.exp(lq)
  lpm = _log1pmx(hb - t)
  rho_b = k * (lpm + hb + sg * _MARGIN * (jnp.abs(lpm) + hb))
  rho_b = rho_b + sg * _MARGIN * jnp.abs(rho_b)
  kpsi_a = k * lq
  kpsi_a = kpsi_a + sg * _MARGIN * jnp.abs(kpsi_a)
  kp = jnp.where(isb, rho_b - u + sg * _MARGIN * (u + jnp.abs(rho_b)), kpsi_a)
  rho = jnp.where(isb, rho_b[0], jnp.where(big, jnp.inf, kpsi_a[0] + u + _MARGIN * (u + jnp.abs(kpsi_a[0]))))
  kpsi, kpsi_l = kp[0], kp[1]
  kpsi = jnp.minimum(jax.lax.cummin(kpsi), 0.0)                  # ψ decreasing, ≤ 0
  rho = jnp.maximum(jax.lax.cummin(rho, reverse=True), 0.0)      # ρ increasing, ≥ 0
  kpsi_l = jnp.maximum(kpsi_l, jnp.where(big, -jnp.inf, -u))    # Jensen: ψ(t) ≥ -t
  kpsi_l = jnp.minimum(jax.lax.cummax(kpsi_l, reverse=True), kpsi)
  return kpsi, rho, kpsi_l


def _pilot(v, lk, tau, n):
  """Uncertified log(u E_t L), t = e^v/k (midpoint rule), for window placement."""
  log_t = v - lk
  e = _window(log_t, tau, False, n)
  z = 0.5 * (e[..., 1:] + e[..., :-1])
  l = _q(z, log_t[..., None], tau, False)[0] - 0.5 * z * z
  return v + _lse(l - 0.5 * tau * tau + tau * z) - _lse(l)


def _log_int_line(c, slope, p, q):
  """log ∫_p^q exp(c + slope·y) dy (−∞ when q ≤ p)."""
  w = q - p
  ok = w > 0
  ws = jnp.where(ok, w, 1.0)
  return jnp.where(ok, c + slope * 0.5 * (p + q) + jnp.log(ws) + _log_sinhc(slope * 0.5 * ws), -jnp.inf)


def _grid(k, tau, s, n_grid):
  """Shared v-grid for the orders s (O,) at one (k, σ); placement only."""
  lk, ls = jnp.log(k), jnp.log(s)
  # Mode v* of each g (g' = s - u E_t L, bisection) and width wd from g''.
  hi = ls + (s + 1.0) * tau * tau + 5.0 * tau + 5.0
  vstar = _bisect(lambda v: ls - _pilot(v, lk, tau, _NZ_PILOT), ls - 2.0, hi, 60)
  pe = jnp.exp(_pilot(vstar[None] + jnp.array([[0.02], [-0.02]]), lk, tau, _NZ_PILOT))
  wd = jnp.clip(1.0 / jnp.sqrt(jnp.maximum((pe[0] - pe[1]) / 0.04, 1e-8)), 1e-3, 1e3)
  ci, wi = jnp.log(s + 2.0), 1.0 / jnp.sqrt(s + 2.0)          # mode/width of u^{s+1} e^{-u}
  v_lo = jnp.min(jnp.minimum(ci - 6.0 * wi, vstar - 8.0 * wd) - 30.0 / (s + 2.0) - 2.0)
  v_hi = jnp.max(jnp.maximum(ci + 3.0 * wi + 4.0, vstar + 10.0 * wd))
  # Point density: max over the windows covering v of K/width (≤ _DMAX), plus a floor.
  wlo = jnp.concatenate([vstar - 8.0 * wd, ci - 6.0 * wi])
  whi = jnp.concatenate([vstar + 8.0 * wd, ci + 3.0 * wi])
  wden = jnp.minimum(_K / jnp.concatenate([wd, wi]), _DMAX)
  brk = jnp.sort(jnp.clip(jnp.concatenate([wlo, whi, jnp.stack([v_lo, v_hi])]), v_lo, v_hi))
  mid = 0.5 * (brk[1:] + brk[:-1])
  inside = (wlo[None, :] <= mid[:, None]) & (mid[:, None] < whi[None, :])
  dens = jnp.maximum(jnp.max(jnp.where(inside, wden[None, :], 0.0), axis=1), _JU / (v_hi - v_lo))
  cum = jnp.concatenate([jnp.zeros(1), jnp.cumsum(dens * (brk[1:] - brk[:-1]))])
  v = jnp.interp(jnp.linspace(0.0, 1.0, n_grid) * cum[-1], cum, brk)
  return jnp.sort(jnp.clip(v.at[0].set(v_lo).at[-1].set(v_hi), v_lo, v_hi))


def _assemble(s, v, kpsi, rho, kpsi_l):
  """Certified upper bound on log E[M^{-s}] from the bounds at the grid v, see (3)."""
  lg = gammaln(s)
  gu = s * v + kpsi + _MARGIN * (jnp.abs(s * v) + jnp.abs(kpsi))
  gl = s * v + kpsi_l - _MARGIN * (jnp.abs(s * v) + jnp.abs(kpsi_l))
  h = v[1:] - v[:-1]
  pos = h > 0
  a = jnp.where(pos, 0.5 * h, 1.0)
  m = v[:-1] + a
  mag0 = 1.0 + jnp.abs(s * m) + jnp.abs(lg) + jnp.abs(jnp.log(a))
  # D1 (row 0), D2 (rows 1-4) and I (row 5): integrals of exp(c + slope·y).
  delta = kpsi[1:] - kpsi[:-1]
  ea = jnp.exp(-a)
  beta = s + delta * ea / (1.0 - ea * ea)                        # s + Δ / (2 sinh a)
  hp, hn = jnp.concatenate([jnp.zeros(1), h[:-1]]), jnp.concatenate([h[1:], jnp.zeros(1)])
  gl_p = jnp.concatenate([jnp.full(1, -jnp.inf), gl[:-2]])
  gl_n = jnp.concatenate([gl[2:], jnp.full(1, -jnp.inf)])
  ok1, ok2 = (hp > 0) & jnp.isfinite(gl_p), (hn > 0) & jnp.isfinite(gl_n)
  s1 = jnp.where(ok1, (gu[:-1] - gl_p) / jnp.where(ok1, hp, 1.0), 0.0)
  s2 = jnp.where(ok2, (gl_n - gu[1:]) / jnp.where(ok2, hn, 1.0), 0.0)
  c1, c2 = gu[:-1] + s1 * a, gu[1:] - s2 * a                   # the lines c + s·y
  yc = jnp.clip((c2 - c1) / jnp.where(s1 > s2, s1 - s2, 1.0), -a, a)
  um = jnp.exp(jnp.minimum(m, 700.0))
  bi = s - um
  r0, r1 = rho[:-1], rho[1:]
  bslope = bi + (r1 - r0) / (2.0 * a)
  li = _log_int_line(jnp.stack([s * m + kpsi[:-1] + delta * ea / (1.0 + ea), c1, c2, c1, c2, 0.0 * a]),
                     jnp.stack([beta, s1, s2, s1, s2, bslope]),
                     jnp.stack([-a, -a, yc, -a, -a, -a]), jnp.stack([a, yc, a, a, a, a]))
  d1 = li[0] - lg + _MARGIN * (mag0 + jnp.abs(kpsi[:-1]) + jnp.abs(delta) * (1.0 + jnp.abs(m) / a)
                               + jnp.abs(beta) * (a + jnp.abs(m)))
  d2 = jnp.minimum(jnp.where(ok1 & ok2 & (s1 > s2), jnp.logaddexp(li[1], li[2]), jnp.inf),
                   jnp.minimum(jnp.where(ok1, li[3], jnp.inf), jnp.where(ok2, li[4], jnp.inf))) - lg
  amp = 1.0 + 2.0 * a / jnp.where(ok1, hp, jnp.inf) + 2.0 * a / jnp.where(ok2, hn, jnp.inf)
  d2 = d2 + _MARGIN * (mag0 + amp * (jnp.abs(gu[:-1]) + jnp.abs(gu[1:]) + jnp.abs(jnp.where(ok1, gl_p, 0.0))
                                     + jnp.abs(jnp.where(ok2, gl_n, 0.0)))
                       + (jnp.abs(s1) + jnp.abs(s2)) * (a + jnp.abs(m)))
  c0, x2 = 0.5 * (r0 + r1), bslope * a
  corr = 0.5 * (r1 - r0) * _langevin(x2)                        # a·b·L(x2)
  em = jnp.expm1(jnp.minimum(c0, 30.0))
  br = em + corr + _MARGIN * (em + jnp.abs(corr))
  log_br = jnp.where(c0 > 30.0, c0 + jnp.log1p((corr - 1.0) * jnp.exp(-jnp.maximum(c0, 30.0))),
                     jnp.where(br > 0, jnp.log(jnp.where(br > 0, br, 1.0)), jnp.inf))
  ic = li[5] + s * m - um - lg + log_br                          # li[5] = log(2a sinhc(x2))
  ic = ic + _MARGIN * (mag0 + um + jnp.abs(log_br) + (jnp.abs(bi) + jnp.abs(r1 - r0) / a) * (a + jnp.abs(m)) + r1)
  ic = jnp.where(v[1:] <= math.log(_U_MAX_I), ic, jnp.inf)
  cells = jnp.where(pos, jnp.minimum(jnp.minimum(d1, d2), ic), -jnp.inf)
  # Tails.
  lg1 = lg + jnp.log(s)                                          # log Γ(s + 1)
  tl = jnp.minimum(_log_expm1(rho[0]), 0.0) + s * v[0] - lg1
  tl = tl + _MARGIN * (1.0 + jnp.abs(s * v[0]) + jnp.abs(lg1) + jnp.abs(rho[0]))
  dl = v[1:] - v[0]
  sl = jnp.max(jnp.where(dl > 0, (gl[1:] - gu[0]) / jnp.where(dl > 0, dl, 1.0), -jnp.inf))
  tl2 = jnp.where(sl > 0, gu[0] - lg - jnp.log(jnp.where(sl > 0, sl, 1.0)), jnp.inf)
  tl = jnp.minimum(tl, tl2 + 10.0 * _MARGIN * (1.0 + jnp.abs(gu[0]) + jnp.abs(lg) + jnp.abs(v[0]) * jnp.abs(sl)))
  dr = v[-1] - v[:-1]
  sr = jnp.min(jnp.where(dr > 0, (gu[-1] - gl[:-1]) / jnp.where(dr > 0, dr, 1.0), jnp.inf))
  tr = jnp.where(sr < 0, gu[-1] - lg - jnp.log(jnp.where(sr < 0, -sr, 1.0)), jnp.inf)
  tr = tr + 10.0 * _MARGIN * (1.0 + jnp.abs(gu[-1]) + jnp.abs(lg) + jnp.abs(v[-1]) * jnp.abs(sr))
  out = jnp.logaddexp(0.0, _lse(jnp.concatenate([cells, tl[None], tr[None]])))
  return out + _MARGIN * (1.0 + jnp.abs(out))


def _group(k, sigma, s):
  """Bounds for the orders s (O,) at scalars k, σ: one grid and one set of quadratures."""
  tau = 1.0 / sigma
  v = _grid(k, tau, s, min(_NG_MAX, _NG_BASE + _NG_PER_ORDER * s.shape[0]))
  kpsi, rho, kpsi_l = _bounds(v, jnp.log(k), k, tau, _NZ)
  return jax.lax.map(lambda si: _assemble(si, v, kpsi, rho, kpsi_l), s)


def log_neg_moment_upper(k, sigma, alpha):
  """Certified upper bound on log E_Q[M^{1-α}] (module docstring).

  Args:
    k, sigma, alpha: broadcast together; k ≥ 1 steps, σ > 0, α > 1. Other
      values (α ≤ 1, non-finite) give +∞, i.e. no bound. Jittable. The axes
      along which only α varies share one grid of quadratures (cost ≈ one
      grid per (k, σ) plus a cheap pass per order).

  Returns:
    The bound, broadcast, in the inputs' floating dtype (float64 intended).
  """
  k, sigma = jnp.broadcast_arrays(jnp.asarray(k), jnp.asarray(sigma))
  alpha = jnp.asarray(alpha)
  full = jnp.broadcast_shapes(k.shape, alpha.shape)
  ks = (1,) * (len(full) - k.ndim) + k.shape
  grp = [i for i in range(len(full)) if ks[i] != 1]              # axes where (k, σ) vary
  ordr = [i for i in range(len(full)) if ks[i] == 1]
  perm = grp + ordr
  g = int(np.prod([full[i] for i in grp], dtype=np.int64))
  o = int(np.prod([full[i] for i in ordr], dtype=np.int64))
  to2 = lambda x: jnp.transpose(jnp.broadcast_to(x.reshape(ks), full), perm).reshape(g, o)
  k2, s2, a2 = to2(k), to2(sigma), jnp.transpose(jnp.broadcast_to(alpha, full), perm).reshape(g, o)
  ok = jnp.isfinite(a2) & (a2 > 1.0) & (s2 > 0) & jnp.isfinite(s2) & (k2 >= 1.0) & jnp.isfinite(k2)
  okg = (s2[:, 0] > 0) & jnp.isfinite(s2[:, 0]) & (k2[:, 0] >= 1.0) & jnp.isfinite(k2[:, 0])
  kg, sg = jnp.where(okg, k2[:, 0], 1.0), jnp.where(okg, s2[:, 0], 1.0)
  sv = jnp.where(ok, a2 - 1.0, 1.0)
  out = (_group(kg[0], sg[0], sv[0])[None] if g == 1 else jax.lax.map(lambda x: _group(*x), (kg, sg, sv)))
  # x ↦ x^{-s} convex ⇒ E M^{-s} ≤ E L^{-s} = e^{s(s+1)/(2σ²)} (exact at k = 1).
  out = jnp.minimum(out, sv * (sv + 1.0) / (2.0 * s2 * s2) * (1.0 + 4.0 * _MARGIN))
  out = jnp.where(ok & ~jnp.isnan(out), out, jnp.inf)
  # D_α = log E / (α - 1) is non-decreasing in α: a bound at α' ≥ α also holds at α.
  idx = jnp.argsort(sv, axis=1)
  d = jnp.take_along_axis(out / sv, idx, axis=1)
  d = jnp.take_along_axis(jax.lax.cummin(d, axis=1, reverse=True), jnp.argsort(idx, axis=1), axis=1)
  out = jnp.where(ok, jnp.minimum(out, d * sv * (1.0 + 4.0 * _MARGIN)), jnp.inf)
  inv = np.argsort(perm)
  return jnp.transpose(out.reshape([full[i] for i in perm]), inv)
