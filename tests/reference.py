"""Independent arbitrary-precision (mpmath) references for the tests. Functions are self-contained."""


# --------------------------------------------------------------------------
# Privacy profiles (issue 3): independent mpmath references
# --------------------------------------------------------------------------


def ref_gaussian_delta(epsilon, sigma, sensitivity=1.0, dps=80):
  """δ(ε) of the Gaussian mechanism, Balle–Wang closed form, in mpmath."""
  import mpmath as mp
  with mp.workdps(dps):
    th = mp.mpf(sensitivity) / mp.mpf(sigma)
    e = mp.mpf(epsilon)
    return +(mp.ncdf(th / 2 - e / th) - mp.exp(e) * mp.ncdf(-th / 2 - e / th))


def _ref_hockey_integral(log_p, log_q, epsilon, x_star, side, scale, dps):
  """∫ [p - e^ε q]_+ over (x*, ∞) (side=+1) or (-∞, x*) (side=-1) in mpmath."""
  import mpmath as mp
  with mp.workdps(dps):
    e = mp.mpf(epsilon)

    def f(x):
      return mp.exp(log_p(x)) - mp.exp(e + log_q(x))

    # Beyond x* the integrand decays on the scale σ²/|x*| (or σ): subdivide.
    scale = scale * min(1, scale / (abs(x_star) + 1))
    steps = (0, 0.01, 0.03, 0.1, 0.3, 1, 2, 4, 8, 16, 32, 64, 128)
    pts = [x_star + side * scale * c for c in steps]
    if side > 0:
      pts = pts + [mp.inf]
    else:
      pts = [-mp.inf] + pts[::-1]
    return +mp.quad(f, pts)


def ref_gaussian_delta_integral(epsilon, sigma, sensitivity=1.0, dps=50):
  """δ(ε) of the Gaussian mechanism by direct integration of [p - e^ε q]_+.

  p = N(Δ, σ²), q = N(0, σ²); the crossing point is found by root finding.
  """
  import mpmath as mp
  with mp.workdps(dps):
    s = mp.mpf(sigma)
    dl = mp.mpf(sensitivity)
    lp = lambda x: -((x - dl) / s) ** 2 / 2 - mp.log(s * mp.sqrt(2 * mp.pi))
    lq = lambda x: -(x / s) ** 2 / 2 - mp.log(s * mp.sqrt(2 * mp.pi))
    x_star = mp.findroot(lambda x: lp(x) - lq(x) - epsilon, dl / 2)
    return _ref_hockey_integral(lp, lq, epsilon, x_star, +1, s, dps)


def ref_sampled_gaussian_delta(epsilon, q, sigma, direction, dps=50):
  """One-step Poisson-sampled Gaussian hockey-stick divergence by integration.

  remove: D(q N(1,σ²) + (1-q) N(0,σ²) ‖ N(0,σ²)); add: the reverse order.
  Returns an mpmath number (may be far below float range).
  """
  import mpmath as mp
  with mp.workdps(dps):
    s = mp.mpf(sigma)
    qq = mp.mpf(q)
    e = mp.mpf(epsilon)
    c = -mp.log(s * mp.sqrt(2 * mp.pi))
    l0 = lambda x: -(x / s) ** 2 / 2 + c
    l1 = lambda x: -((x - 1) / s) ** 2 / 2 + c
    lmix = lambda x: mp.log(qq * mp.exp(l1(x)) + (1 - qq) * mp.exp(l0(x)))
    if direction == "remove":
      lp, lq_, side = lmix, l0, +1
    else:
      if qq < 1 and e >= -mp.log(1 - qq):
        return mp.mpf(0)
      lp, lq_, side = l0, lmix, -1
    # The privacy loss log p/q is monotone in x; bracket its crossing with e.
    g = lambda x: lp(x) - lq_(x) - e
    lo, hi = mp.mpf(-10), mp.mpf(10)
    while side * g(hi) <= 0:
      hi = hi * 2
    while side * g(lo) >= 0:
      lo = lo * 2
    for _ in range(4 * dps):  # bisection: robust, ~dps digits
      mid = (lo + hi) / 2
      if side * g(mid) > 0:
        hi = mid
      else:
        lo = mid
    x_star = (lo + hi) / 2
    return _ref_hockey_integral(lp, lq_, e, x_star, side, s, dps)


def ref_laplace_delta(epsilon, b, sensitivity=1.0, dps=40):
  """δ(ε) of the Laplace mechanism by integrating [Lap(0,b) - e^ε Lap(Δ,b)]_+."""
  import mpmath as mp
  with mp.workdps(dps):
    bb = mp.mpf(b)
    dl = mp.mpf(sensitivity)
    e = mp.mpf(epsilon)
    p = lambda x: mp.exp(-abs(x) / bb) / (2 * bb)
    q = lambda x: mp.exp(-abs(x - dl) / bb) / (2 * bb)
    f = lambda x: max(p(x) - mp.exp(e) * q(x), 0)
    # p/q is non-increasing in x; p > e^ε q exactly left of x* = (Δ - εb)/2.
    x_star = (dl - e * bb) / 2
    if x_star <= 0:
      return mp.mpf(0)
    return +mp.quad(f, [-mp.inf, 0, x_star])


def ref_hockey_stick(p, q, epsilon, dps=40):
  """Σ [p_i - e^ε q_i]_+ in mpmath for 1-d sequences p, q."""
  import mpmath as mp
  with mp.workdps(dps):
    c = mp.exp(mp.mpf(epsilon))
    return +mp.fsum(max(mp.mpf(float(a)) - c * mp.mpf(float(b)), 0) for a, b in zip(p, q))


# --------------------------------------------------------------------------
# Sampled Gaussian RDP (issue 2): direct integration, independent of the
# binomial sum and of the MTZ §3.3 series.
# --------------------------------------------------------------------------


def ref_sgm_rdp(q, sigma, alpha, dps=40):
  """RDP ε(α) of the Poisson-sampled Gaussian by mpmath quadrature.

  A_α - 1 = ∫ φ_σ(z) [(1+u)^α - 1 - αu] dz with u = q·expm1((2z-1)/(2σ²))
  (the subtracted terms integrate to 0 since E[u] = 0, and keep the
  integrand non-negative so tiny q is resolved), ε = log1p(A_α - 1)/(α-1).
  """
  import mpmath as mp
  with mp.workdps(dps):
    q = mp.mpf(q)
    s = mp.mpf(sigma)
    a = mp.mpf(alpha)
    if q == 0:
      return mp.mpf(0)
    if q == 1:
      return a / (2 * s * s)

    def integrand(z):
      u = q * mp.expm1((2 * z - 1) / (2 * s * s))
      return mp.npdf(z, 0, s) * (mp.power(1 + u, a) - 1 - a * u)

    pts = sorted(set([-mp.inf, -12 * s, mp.mpf(0), mp.mpf(1) / 2, mp.mpf(2), a * q, a / 2, a,
                      a + 12 * s, mp.inf]))
    return mp.log1p(mp.quad(integrand, pts)) / (a - 1)


# --------------------------------------------------------------------------
# Audit references (issue 8): conversions, exact one-step profiles, pure-DP
# composition. Independent of jaxdp's formulas where possible.
# --------------------------------------------------------------------------


def ref_sgm_rdp_auto(q, sigma, alpha):
  """``ref_sgm_rdp`` with the working precision raised for tiny q and huge σ.

  A_α - 1 ~ C(α,2) q² (e^{1/σ²} - 1) cancels about 2·log10(1/q) + 2·log10(σ)
  digits inside (1+u)^α - 1 - αu, so the precision grows with them.
  """
  import math
  dps = 30 + int(2 * max(0.0, -math.log10(q)) + 2 * max(0.0, math.log10(sigma)))
  return ref_sgm_rdp(q, sigma, alpha, dps=dps)


def ref_rdp_to_epsilon(rdp, alpha, delta, method="improved", dps=40):
  """ε at one order from RDP value(s), in mpmath (mp numbers in, mpf out).

  classic (Mironov 2017, Prop 3): ε(α) + log(1/δ)/(α-1);
  improved (Balle et al. 2020, Prop 12): ε(α) + log((α-1)/α) - (log δ + log α)/(α-1),
  and 0 where the Bretagnolle–Huber bound already gives δ >= TV.
  Both floored at 0.
  """
  import mpmath as mp
  with mp.workdps(dps):
    r, a, d = mp.mpf(rdp), mp.mpf(alpha), mp.mpf(delta)
    if method == "classic":
      e = r + mp.log(1 / d) / (a - 1)
    else:
      e = r + mp.log((a - 1) / a) - (mp.log(d) + mp.log(a)) / (a - 1)
      # (0, δ)-DP once δ >= TV, and TV <= √(1 - e^{-KL}) <= √(1 - e^{-D_α})
      # (Bretagnolle–Huber; KL <= D_α).
      if d >= mp.sqrt(-mp.expm1(-r)):
        e = mp.mpf(0)
    return max(e, mp.mpf(0))


def ref_sgm_delta(epsilon, q, sigma, dps=50):
  """Exact one-step δ(ε) of the Poisson-sampled Gaussian: max over add/remove."""
  return max(ref_sampled_gaussian_delta(epsilon, q, sigma, "remove", dps=dps),
             ref_sampled_gaussian_delta(epsilon, q, sigma, "add", dps=dps))


def ref_pure_dp_composition_delta(epsilon, delta, k, epsilon_total, dps=50):
  """Exact δ of the k-fold composition of (ε, δ)-DP mechanisms at ε_total.

  The worst case is k-fold randomized response (Kairouz, Oh & Viswanath 2015):
  with p = e^ε/(1+e^ε) the loss is ε(k-2i) with probability
  C(k,i) p^{k-i}(1-p)^i, so δ_pure = Σ_i C(k,i)[p^{k-i}(1-p)^i - e^{ε_tot} p^i (1-p)^{k-i}]_+
  (a direct hockey-stick sum over the output distribution), and
  δ_total = 1 - (1-δ)^k (1 - δ_pure).
  """
  import mpmath as mp
  with mp.workdps(dps):
    e = mp.mpf(epsilon)
    p = mp.exp(e) / (1 + mp.exp(e))
    c = mp.exp(mp.mpf(epsilon_total))
    k = int(k)
    total = mp.fsum(
        max(mp.binomial(k, i) * (p ** (k - i) * (1 - p) ** i - c * p ** i * (1 - p) ** (k - i)), 0)
        for i in range(k + 1))
    return 1 - (1 - mp.mpf(delta)) ** k * (1 - total)


def ref_randomized_response_delta(epsilon_total, epsilon, dps=40):
  """δ of one ε-DP randomized response at ε_total: [p - e^{ε_tot}(1-p)]_+."""
  return ref_pure_dp_composition_delta(epsilon, 0.0, 1, epsilon_total, dps=dps)
