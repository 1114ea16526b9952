"""Certified upper bound on log E_Q[M^{1-α}] for one balls-in-bins epoch (add direction).

Q = N(0, σ²I_k), P = (1/k) Σ_i N(e_i, σ²I_k), M = dP/dQ = (1/k) Σ_i L_i with
L_i iid, log L ~ N(μ, τ²), τ = 1/σ, μ = -τ²/2 (E L = 1). For s = α - 1 > 0,
D_α(Q‖P) = log E[M^{-s}] / s. Everything below is an inequality in the safe
(upward) direction; no step is a mere approximation.

(1) Gamma identity + Tonelli (all non-negative): M^{-s} = Γ(s)⁻¹ ∫₀^∞ u^{s-1} e^{-uM} du,
    so E[M^{-s}] = Γ(s)⁻¹ ∫ u^{s-1} φ(u/k)^k du, φ(t) = E e^{-tL}. Write
    ψ = log φ (a cumulant generating function: convex, decreasing) and
    ρ(u) = k ψ(u/k) + u ≥ 0 (Jensen), increasing (ρ' = 1 - E_t L, and the
    e^{-tL}-tilted mean E_t L ≤ E L = 1) and convex (ρ'' ∝ Var_t L). Since
    Γ(s)⁻¹ ∫ u^{s-1} e^{-u} du = 1, E[M^{-s}] - 1 = Γ(s)⁻¹ ∫ u^{s-1} e^{-u}(e^ρ - 1) du.
    In v = log u the integrand of E is e^{g(v)}, g(v) = s v + k ψ(e^v/k), and g
    is concave (Prékopa: ψ(e^v) = log ∫ exp(-e^{v+w}) N(w; μ, τ²) dw integrates
    a log-concave function of (v, w)).
(2) Upper bounds on ψ at grid points t_j, by quadrature over z = (log L - μ)/τ:
    A: φ(t) = ∫ e^{ℓ_A}, ℓ_A = log ϕ(z) - e^w, w = log t + μ + τ z (concave);
    B: φ(t) = 1 - t + H(t), H = E h(tL), h(y) = e^{-y} - 1 + y, H = ∫ e^{ℓ_B},
       ℓ_B = log ϕ(z) + log h(e^w), concave because d log h(e^w)/dw =
       y(1-e^{-y})/h(y) is decreasing (its derivative has the sign of
       y²e^{-y} - (1-e^{-y})², ≤ 0 as 2 sinh(y/2) ≥ y).
    On each z-cell a concave ℓ lies below its tangent at the midpoint, whose
    exponential integrates exactly (d · sinhc(ℓ' d/2)); below the chord is a
    lower bound (used once, at the anchor of (4)). Outside the window:
    e^{-tL} ≤ 1 and Φ(a) ≤ ½e^{-a²/2} or ϕ(a)/|a| (a < 0); e^{-tL} ≤ e^{-t e^{μ+τb}}
    for z > b; h(tL) ≤ h(t e^{μ+τa}) for z < a (h increasing); h(y) ≤ min(y, y²/2)
    for z > b (Gaussian moments in closed form). From H̄ ≥ H: ψ ≤ log(1 - t + H̄)
    (increasing in H̄); both bounds are taken where defined and the smaller kept.
    The bounds are made monotone (kψ̄ non-increasing, ρ̄ non-decreasing) by
    running minima, which keeps them valid because ψ decreases and ρ increases.
(3) v-cells [v_j, v_{j+1}], y = v - m (midpoint m, half-width a), each bounded
    twice and the smaller taken (both bound the cell's share of E - 1):
    D: ∫ e^g. ψ convex ⇒ kψ(u/k) ≤ its chord in u through the kψ̄ values, so
       g ≤ s v + kψ̄_j + Δ_j (e^{a+y} - 1)/(e^{2a} - 1) (Δ_j ≤ 0): concave in y,
       below its tangent at y = 0, integrated exactly.
    I: ∫ Γ(s)⁻¹ e^{sv - e^v}(e^ρ - 1). e^ρ - 1 convex in u ⇒ below its chord
       A_j + (A_{j+1} - A_j)(e^{a+y} - 1)/(e^{2a} - 1) ≤ A_j + (A_{j+1} - A_j)(y+a)/(2a)
       (A = expm1 ρ̄; e^{a+y} convex in y); s v - e^v is concave ⇒ below its
       tangent at m; the product integrates in closed form.
    Tails: v < v_0: ∫ ≤ min(expm1 ρ̄_0, 1) u_0^s / Γ(s+1) (e^ρ - 1 increasing,
    e^{-u} ≤ 1, φ ≤ 1). v > v_J: g concave ⇒ g(v) ≤ g(v_J) + σ_R (v - v_J) with
    σ_R = (ḡ_J - g_*)/(v_J - v_*) ≥ g'(v_J) from a certified lower bound g_* at
    some v_* < v_J; if σ_R < 0 the tail is ≤ e^{ḡ_J}/(|σ_R| Γ(s)), else the
    whole bound is +∞ (the caller then keeps its other bounds).
(4) Rounding: every log-quantity gets an additive margin of 1e-12 × (sum of the
    magnitudes of the terms entering it), i.e. thousands of ulps, and cells
    are defined by the floats actually computed (widths by exact-or-correctly
    rounded subtraction), so round-off never lowers the result.

Only window placement uses un-certified estimates (a bisection for the mode of
g); a poor placement loosens the bound but never invalidates it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

__all__ = ["log_neg_moment_upper"]

_NZ = 256          # z-cells per quadrature (relative error ≈ 13.5 / _NZ² per φ or H)
_NZ_PILOT = 32     # z-nodes of the (uncertified) pilot that places windows
_JF = 128          # v-cells in each of the two fine windows
_JG = 16           # geometric points per side and centre
_JU = 32           # uniform coarse points over the whole v-range
_MARGIN = 1e-12    # relative round-off allowance (≈ 4500 ulps)
_U_MAX_I = 1e8     # the I form is used only where u ≤ this (else its terms cancel)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _poly(x, coeffs):
  out = jnp.zeros_like(x) + coeffs[-1]
  for c in coeffs[-2::-1]:
    out = out * x + c
  return out


_SINHC = [1.0 / math.factorial(2 * n + 1) for n in range(10)]
_W = [1.0 / (math.factorial(n) * (n + 1 if n % 2 == 0 else n + 2)) for n in range(26)]
_HS = [(-1.0) ** n / math.factorial(n + 2) for n in range(22)]


def _log_sinhc(x):
  """log(sinh x / x)."""
  ax = jnp.abs(x)
  small = ax < 0.5
  xs = jnp.where(small, x, 0.0)
  xl = jnp.where(small, 1.0, ax)
  return jnp.where(small, jnp.log(_poly(xs * xs, _SINHC)),
                   xl + jnp.log1p(-jnp.exp(-2.0 * xl)) - jnp.log(2.0 * xl))


def _log_w(x):
  """log W(x), W(x) = ½ ∫_{-1}^{1} (r + 1) e^{xr} dr = (2x eˣ - eˣ + e⁻ˣ) / (2x²)."""
  small = jnp.abs(x) < 1.0
  xs = jnp.where(small, x, 0.0)
  xp = jnp.where(x >= 1.0, x, 1.0)
  xn = jnp.where(x <= -1.0, x, -1.0)
  pos = xp + jnp.log(2.0 * xp - 1.0 + jnp.exp(-2.0 * xp)) - jnp.log(2.0 * xp * xp)
  neg = -xn + jnp.log1p((2.0 * xn - 1.0) * jnp.exp(2.0 * xn)) - jnp.log(2.0 * xn * xn)
  return jnp.where(small, jnp.log(_poly(xs, _W)), jnp.where(x > 0, pos, neg))


def _log1pmx(x):
  """log(1 + x) - x for x > -1 (atanh series for |x| < ½: no cancellation)."""
  small = jnp.abs(x) < 0.5
  xs = jnp.where(small, x, 0.0)
  y = xs / (2.0 + xs)
  y2 = y * y
  ser = -xs * xs / (2.0 + xs) + 2.0 * y * y2 * _poly(y2, [1.0 / (2 * n + 3) for n in range(18)])
  xl = jnp.where(small, 0.0, x)
  return jnp.where(small, ser, jnp.log1p(xl) - xl)


def _log_h_r(w):
  """log h(e^w) and r = y h'(y)/h(y) ∈ (1, 2) at y = e^w, h(y) = e^{-y} - 1 + y."""
  small = w < 0.0
  ys = jnp.exp(jnp.minimum(w, 0.0))
  s_ser = _poly(-ys, _HS)                                  # h(y)/y², y ≤ 1
  e1 = jnp.where(ys < 1e-8, 1.0 - 0.5 * ys, -jnp.expm1(-ys) / jnp.where(ys > 0, ys, 1.0))
  wl = jnp.clip(w, 0.0, 700.0)
  yl = jnp.exp(wl)
  g1 = -jnp.expm1(-yl)
  log_hl = jnp.where(w > 700.0, w, wl + jnp.log1p(-g1 / yl))
  log_h = jnp.where(small, 2.0 * w + jnp.log(s_ser), log_hl)
  r = jnp.where(small, e1 / s_ser, g1 / (1.0 - g1 / yl))
  return log_h, r


def _log_sf_upper(x):
  """Elementary upper bound on log Φ̄(x) (0 for x ≤ 0; ½e^{-x²/2}, ϕ(x)/x)."""
  xp = jnp.where(x > 0, x, 1.0)
  b = -0.5 * xp * xp + jnp.minimum(-math.log(2.0), -_LOG_SQRT_2PI - jnp.log(xp))
  return jnp.where(x > 0, b, 0.0)


def _bisect(f, lo, hi, iters):
  """Root of a function with f(lo) > 0 > f(hi) (sign only), vectorised."""
  def body(_, c):
    lo, hi = c
    mid = 0.5 * (lo + hi)
    pos = f(mid) > 0
    return jnp.where(pos, mid, lo), jnp.where(pos, hi, mid)
  lo, hi = jax.lax.fori_loop(0, iters, body, (lo, hi))
  return 0.5 * (lo + hi)


def _window(log_t, tau, kind, n):
  """Cell endpoints (…, n+1) around the mode of ℓ_A or ℓ_B (placement only)."""
  mu = -0.5 * tau * tau
  if kind == "A":   # root of z + τ e^{w(z)} on z < 0
    c = jnp.log(tau) + log_t + mu
    lo = jnp.minimum(-1.0, -c / tau) - 1.0
    zc = _bisect(lambda z: jnp.log(-z) - (c + tau * z), lo, jnp.zeros_like(lo) - 1e-300, 64)
    kappa = 1.0 - tau * zc
  else:             # root of τ r(e^{w(z)}) - z on [τ, 2τ]
    f = lambda z: tau * _log_h_r(log_t + mu + tau * z)[1] - z
    zc = _bisect(f, tau + jnp.zeros_like(log_t), 2.0 * tau + jnp.zeros_like(log_t), 40)
    w0 = log_t + mu + tau * zc
    dr = (_log_h_r(w0 + 0.01)[1] - _log_h_r(w0 - 0.01)[1]) / 0.02
    kappa = 1.0 + tau * tau * jnp.abs(dr)
  half = 9.0 / jnp.sqrt(kappa)
  offs = jnp.asarray(np.linspace(-1.0, 1.0, n + 1))
  return zc[..., None] + half[..., None] * offs


def _ell(z, log_t, tau, kind):
  mu = -0.5 * tau * tau
  w = log_t[..., None] + mu + tau * z
  base = -0.5 * z * z - _LOG_SQRT_2PI
  if kind == "A":
    ew = jnp.exp(w)
    return base - ew, -z - tau * ew
  log_h, r = _log_h_r(w)
  return base + log_h, -z + tau * r


def _lse(x, axis=-1):
  m = jnp.max(x, axis=axis, keepdims=True)
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  return jnp.squeeze(m, axis) + jnp.log(jnp.sum(jnp.exp(x - m), axis=axis))


def _quad(log_t, tau, kind, n, upper=True):
  """Certified bound on log φ(t) (kind A) or log H(t) (kind B); upper or lower."""
  e = _window(log_t, tau, kind, n)
  d = e[..., 1:] - e[..., :-1]
  if upper:
    z = e[..., :-1] + 0.5 * d
    l, dl = _ell(z, log_t, tau, kind)
    ok = jnp.isfinite(l) & jnp.isfinite(dl)
    terms = jnp.where(ok, l + jnp.log(d) + _log_sinhc(jnp.where(ok, dl, 0.0) * 0.5 * d), -jnp.inf)
    mu = -0.5 * tau * tau
    a, b = e[..., 0], e[..., -1]
    wa, wb = log_t + mu + tau * a, log_t + mu + tau * b
    if kind == "A":
      tails = [_log_sf_upper(-a), -jnp.exp(jnp.minimum(wb, 700.0)) + _log_sf_upper(b)]
    else:
      tails = [_log_h_r(wa)[0] + _log_sf_upper(-a),
               jnp.minimum(2.0 * log_t - math.log(2.0) + tau * tau + _log_sf_upper(b - 2.0 * tau),
                           log_t + _log_sf_upper(b - tau))]
    terms = jnp.concatenate([terms] + [t[..., None] for t in tails], axis=-1)
    slope = jnp.where(ok, jnp.abs(dl), 0.0) * (d + jnp.abs(z))
  else:
    l, _ = _ell(e, log_t, tau, kind)
    la, lb = l[..., :-1], l[..., 1:]
    ok = jnp.isfinite(la) & jnp.isfinite(lb)
    terms = jnp.where(ok, 0.5 * (la + lb) + jnp.log(d)
                      + _log_sinhc(jnp.where(ok, 0.5 * (lb - la), 0.0)), -jnp.inf)
    slope = jnp.where(ok, jnp.abs(lb - la), 0.0)
    l = la
  mag = (1.0 + jnp.max(jnp.where(jnp.isfinite(l), jnp.abs(l), 0.0), axis=-1)
         + jnp.max(jnp.abs(jnp.log(d)), axis=-1) + jnp.max(slope, axis=-1) + math.log(n + 3))
  out = _lse(terms)
  return out + (1.0 if upper else -1.0) * _MARGIN * (mag + jnp.abs(out))


def _k_psi_rho(v, lk, k, tau, n, upper=True):
  """Bounds on k ψ(e^v/k) and ρ(e^v) at grid points v (upper, or lower)."""
  log_t = v - lk
  t = jnp.exp(jnp.minimum(log_t, 700.0))
  u = jnp.exp(jnp.minimum(v, 700.0))
  big = v > 700.0
  la = _quad(log_t, tau, "A", n, upper)
  kpsi_a = k * la
  kpsi_a = kpsi_a + (1.0 if upper else -1.0) * _MARGIN * jnp.abs(kpsi_a)
  useb = log_t <= 0.0
  lt_b = jnp.where(useb, log_t, 0.0)
  hb = jnp.exp(_quad(lt_b, tau, "B", n, upper))
  tb = jnp.where(useb, t, 1.0)
  lpm = _log1pmx(hb - tb)
  kb = lpm + hb
  kb = kb + (1.0 if upper else -1.0) * _MARGIN * (jnp.abs(lpm) + hb)
  rho_b = k * kb
  sgn = 1.0 if upper else -1.0
  rho_b = rho_b + sgn * _MARGIN * jnp.abs(rho_b)
  bad = jnp.inf if upper else -jnp.inf
  kpsi_b = jnp.where(useb, rho_b - u + sgn * _MARGIN * (u + jnp.abs(rho_b)), bad)
  rho_b = jnp.where(useb, rho_b, bad)
  rho_a = jnp.where(big, bad, kpsi_a + u + sgn * _MARGIN * (u + jnp.abs(kpsi_a)))
  if upper:
    return jnp.minimum(kpsi_a, kpsi_b), jnp.minimum(rho_a, rho_b)
  jensen = jnp.where(big, -jnp.inf, -u)
  return jnp.maximum(jnp.maximum(kpsi_a, kpsi_b), jensen), jnp.maximum(jnp.maximum(rho_a, rho_b), 0.0)


def _log_e_tilted(v, lk, tau, n):
  """Pilot (uncertified): log(u · E_t L) at t = e^v / k, midpoint rule."""
  log_t = v - lk
  e = _window(log_t, tau, "A", n)
  z = 0.5 * (e[..., 1:] + e[..., :-1])
  l, _ = _ell(z, log_t, tau, "A")
  return v + _lse(l - 0.5 * tau * tau + tau * z) - _lse(l)


def _one(k, sigma, s):
  """Certified upper bound on log E[M^{-s}] for scalars k ≥ 1, σ > 0, s > 0."""
  tau = 1.0 / sigma
  lk = jnp.log(k)
  ls = jnp.log(s)
  # Pilot: mode v* of the concave g (g' = s - u E_t L) and its curvature.
  lo = ls - 2.0
  hi = ls + (s + 1.0) * tau * tau + 5.0 * tau + 5.0
  vstar = _bisect(lambda v: ls - _log_e_tilted(v, lk, tau, _NZ_PILOT), lo, hi, 60)
  dv = 0.02
  curv = (jnp.exp(_log_e_tilted(vstar + dv, lk, tau, _NZ_PILOT))
          - jnp.exp(_log_e_tilted(vstar - dv, lk, tau, _NZ_PILOT))) / (2 * dv)
  wd = jnp.clip(1.0 / jnp.sqrt(jnp.maximum(curv, 1e-8)), 1e-3, 1e3)
  ci, wi = jnp.log(s + 2.0), 1.0 / jnp.sqrt(s + 2.0)
  v_lo = jnp.minimum(ci - 7.0 * wi, vstar - 8.0 * wd) - 30.0 / (s + 2.0) - 2.0
  v_hi = jnp.maximum(ci + 7.0 * wi + 4.0, vstar + 10.0 * wd)
  fine = jnp.asarray(np.linspace(-1.0, 1.0, _JF + 1))
  geo = jnp.asarray(1.35 ** np.arange(1, _JG + 1))
  pts = jnp.concatenate([
      vstar + 8.0 * wd * fine, ci + 7.0 * wi * fine,
      vstar + 8.0 * wd * geo, vstar - 8.0 * wd * geo, ci + 7.0 * wi * geo, ci - 7.0 * wi * geo,
      jnp.linspace(v_lo, v_hi, _JU)])
  v = jnp.sort(jnp.clip(pts, v_lo, v_hi))
  kpsi, rho = _k_psi_rho(v, lk, k, tau, _NZ)
  kpsi = jnp.minimum(jax.lax.cummin(kpsi), 0.0)
  rho = jnp.maximum(jax.lax.cummin(rho, reverse=True), 0.0)
  lg = gammaln(s)
  # Cells.
  v0, v1 = v[:-1], v[1:]
  h = v1 - v0
  pos = h > 0
  a = jnp.where(pos, 0.5 * h, 1.0)
  m = v0 + a
  log2a = jnp.log(2.0 * a)
  # D form.
  delta = kpsi[1:] - kpsi[:-1]
  ea = jnp.exp(-a)
  beta_d = s + delta * ea / (1.0 - ea * ea)          # s + Δ / (2 sinh a)
  val_d = s * m + kpsi[:-1] + delta * ea / (1.0 + ea)  # … + Δ / (e^a + 1)
  cell_d = val_d + log2a + _log_sinhc(beta_d * a) - lg
  cell_d = cell_d + _MARGIN * (1.0 + jnp.abs(s * m) + jnp.abs(kpsi[:-1]) + jnp.abs(delta)
                               + jnp.abs(beta_d) * (a + jnp.abs(m)) + jnp.abs(lg) + jnp.abs(log2a))
  # I form.
  um = jnp.exp(jnp.minimum(m, 700.0))
  beta_i = s - um
  x = beta_i * a
  r0, r1 = rho[:-1], rho[1:]
  log_a0 = jnp.where(r0 > 1.0, r0 + jnp.log1p(-jnp.exp(-r0)), jnp.log(jnp.expm1(r0)))
  log_da = jnp.where(r1 > r0, r1 + jnp.log(-jnp.expm1(r0 - r1)), -jnp.inf)
  inner = jnp.logaddexp(math.log(2.0) + log_a0 + _log_sinhc(x), log_da + _log_w(x))
  cell_i = jnp.log(a) + s * m - um - lg + inner
  cell_i = cell_i + _MARGIN * (1.0 + jnp.abs(s * m) + um + jnp.abs(lg) + jnp.abs(inner)
                               + jnp.abs(beta_i) * (a + jnp.abs(m)) + r1 + jnp.abs(jnp.log(a)))
  cell_i = jnp.where(v1 <= math.log(_U_MAX_I), cell_i, jnp.inf)
  cells = jnp.where(pos, jnp.minimum(cell_d, cell_i), -jnp.inf)
  # Left tail.
  log_a_first = jnp.where(rho[0] > 1.0, rho[0] + jnp.log1p(-jnp.exp(-rho[0])), jnp.log(jnp.expm1(rho[0])))
  tail_l = jnp.minimum(log_a_first, 0.0) + s * v[0] - gammaln(s + 1.0)
  tail_l = tail_l + _MARGIN * (1.0 + jnp.abs(s * v[0]) + jnp.abs(gammaln(s + 1.0)))
  # Right tail, from a certified lower bound at the anchor v* < v_J.
  kpsi_lo, _ = _k_psi_rho(vstar[None], lk, k, tau, _NZ, upper=False)
  g_lo = s * vstar + kpsi_lo[0]
  g_lo = g_lo - _MARGIN * (1.0 + jnp.abs(s * vstar) + jnp.abs(kpsi_lo[0]))
  g_hi = s * v[-1] + kpsi[-1]
  g_hi = g_hi + _MARGIN * (1.0 + jnp.abs(s * v[-1]) + jnp.abs(kpsi[-1]))
  slope = (g_hi - g_lo) / (v[-1] - vstar)
  tail_r = jnp.where(slope < 0, g_hi - lg - jnp.log(jnp.where(slope < 0, -slope, 1.0)), jnp.inf)
  tail_r = tail_r + _MARGIN * (1.0 + jnp.abs(g_hi) + jnp.abs(lg))
  total = _lse(jnp.concatenate([cells, tail_l[None], tail_r[None]]))
  out = jnp.logaddexp(0.0, total)
  return out + _MARGIN * (1.0 + jnp.abs(out))


def log_neg_moment_upper(k, sigma, alpha):
  """Certified upper bound on log E_Q[M^{1-α}] (see the module docstring).

  Args:
    k, sigma, alpha: broadcast together; k ≥ 1 (steps), σ > 0, α > 1. Orders
      α ≤ 1 or non-finite give +∞ (no bound). Jittable; the work is a
      ``lax.map`` over the broadcast elements (each a few ms).

  Returns:
    The bound, broadcast shape, in the dtype of the inputs (float64 expected).
  """
  k, sigma, alpha = jnp.broadcast_arrays(k, sigma, alpha)
  shape = k.shape
  ok = jnp.isfinite(alpha) & (alpha > 1.0) & (sigma > 0) & (k >= 1.0)
  s = jnp.where(ok, alpha - 1.0, 1.0).ravel()
  kk = jnp.where(ok, k, 1.0).ravel()
  ss = jnp.where(ok, sigma, 1.0).ravel()
  out = jax.lax.map(lambda x: _one(*x), (kk, ss, s))
  out = jnp.where(jnp.isnan(out), jnp.inf, out)
  return jnp.where(ok, out.reshape(shape), jnp.inf)
