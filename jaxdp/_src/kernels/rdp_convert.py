"""RDP → (ε, δ) conversions: per grid order (Mironov 2017; Balle et al. 2020)
and refined between grid orders along the chord of log A_α.

The public :func:`to_epsilon`, :func:`to_delta`, :func:`to_epsilon_refined`
and :func:`to_delta_refined` are re-exported by :mod:`jaxdp._src.kernels.rdp`
(and ``jaxdp.rdp``); split out of it (moves only).
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels.rdp_common import result_float_dtype, safety_factor


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------


def _conversion_inputs(rdp, orders, target, xp=jnp):
  """``rdp``, ``orders`` and the per-configuration target (δ or ε, given an
  orders axis) in the RDP values' float dtype."""
  rdp = xp.asarray(rdp)
  dtype = result_float_dtype(rdp) if xp is jnp else np.float64
  return (rdp.astype(dtype), xp.asarray(orders, dtype), xp.asarray(target, dtype)[..., None],
          dtype)


def epsilon_per_order(rdp, orders, delta, method, xp=jnp):
  """ε(α) of :func:`to_epsilon` before the minimum (non-decreasing in ``rdp``)."""
  rdp, orders, delta, dtype = _conversion_inputs(rdp, orders, delta, xp)
  am1 = orders - 1.0
  log_delta = xp.log(delta)
  if method == "classic":
    eps = rdp - log_delta / am1
  elif method == "improved":
    # ε(α) + log(1 - 1/α) - log(α)/(α-1) - log(δ)/(α-1); the order-only
    # terms are formed once per order.
    log_orders = xp.log(orders)
    log_1m = nx.log1p(-1.0 / orders, xp)
    const, const_mag = log_1m - log_orders / am1, xp.abs(log_1m) + log_orders / am1
    tail = -log_delta / am1                                   # >= 0 for δ <= 1
    eps = rdp + const + tail
    # Its terms cancel where ε is small (O(1) terms, ε ~ 1e-7: -24% in
    # float32 under the relative safety factor alone): each order's value
    # carries the terms' rounding (_numerics.rounding_allowance's constant;
    # inf stays inf, NaN becomes inf below).
    ulp = nx._ROUNDING_ULPS * float(xp.finfo(dtype).eps)
    eps = eps + ulp * (xp.abs(rdp) + const_mag + xp.abs(tail) + xp.abs(eps))
    # KL clause δ >= √(1 - e^{-ε(α)}), taken only where it holds beyond the
    # rounding of its two cancelling terms (it decides ε = 0; in float32 its
    # sign near the boundary depended on whether XLA fused δ² into the sum:
    # ε = 0 against an exact 19.14 in batches of 128): δ² + expm1(-ε(α)) >
    # 2·ulp·(δ² + |expm1(-ε(α))|), with expm1(-ε(α)) <= 0.
    sq = delta * delta
    kl_ok = sq * (1.0 - 2.0 * ulp) + xp.expm1(-rdp) * (1.0 + 2.0 * ulp) > 0
    # Floored at 0 per order: the formula alone goes negative at large δ
    # (δ = 0.9, T·ε(1.1) = 1.1: -0.097) while the KL clause gives exactly 0
    # at smaller RDP values, so without the floor ε(α) was not monotone in
    # the RDP value and the order search (jaxdp._src.kernels.order_search),
    # whose bounds rely on that, dropped the orders where ε is 0
    # (q = 1, σ = 1, T = 2, δ = 0.9 reported 0.557 instead of 0, while
    # T = 3 and 4 reported 0). Every caller floors the minimum at 0 anyway.
    eps = xp.where(kl_ok, 0.0, xp.maximum(eps, 0.0))
  else:
    raise ValueError(f"method must be 'improved' or 'classic'; found {method!r}.")
  return xp.where(xp.isnan(eps), xp.inf, eps), orders, dtype


def log_delta_per_order(rdp, orders, epsilon, xp=jnp):
  """log δ(α) of :func:`to_delta` before the minimum (non-decreasing in ``rdp``)."""
  rdp, orders, epsilon, dtype = _conversion_inputs(rdp, orders, epsilon, xp)
  log_kl = 0.5 * nx.log1mexp(xp.maximum(rdp, 0.0), xp)
  log_rdp = (orders - 1.0) * (rdp - epsilon + nx.log1p(-1.0 / orders, xp)) - xp.log(orders)
  log_d = xp.minimum(log_kl, log_rdp)
  return xp.where(xp.isnan(log_d), xp.inf, log_d), dtype


def to_epsilon(rdp, orders, delta, method: str = "improved") -> Tuple[jax.Array, jax.Array]:
  """Smallest ε over orders (last axis) such that the mechanism is (ε, δ)-DP.

  ``"classic"`` (Mironov 2017, Prop. 3): ε = ε(α) + log(1/δ)/(α-1).
  ``"improved"`` (Balle et al. 2020, arXiv:2004.00010 Prop. 12; also
  Canonne–Kamath–Steinke 2020 eq. 20)::

      ε = ε(α) + log((α-1)/α) - (log δ + log α)/(α-1),

  both floored at 0; the improved one also returns 0 where the KL bound
  δ ≥ √(1 - e^{-ε(α)}) already holds (Pinsker-type bound, any α ≥ 1).

  Args:
    rdp: RDP values, orders on the last axis.
    orders: the orders, shape (n,) or broadcastable to ``rdp``.
    delta: target δ in (0, 1), broadcast against ``rdp[..., 0]``.
    method: "improved" (default) or "classic".

  Returns:
    ``(epsilon, best_order)`` with the shape of ``rdp[..., 0]``.
  """
  return to_epsilon_xp(rdp, orders, delta, method)


def to_epsilon_xp(rdp, orders, delta, method, xp=jnp):
  """:func:`to_epsilon` on either array namespace (``jnp`` or ``numpy``)."""
  eps, orders, dtype = epsilon_per_order(rdp, orders, delta, method, xp)
  idx = xp.argmin(eps, axis=-1)
  best = xp.take_along_axis(eps, idx[..., None], axis=-1)[..., 0]
  best_order = xp.broadcast_to(orders, eps.shape)
  best_order = xp.take_along_axis(best_order, idx[..., None], axis=-1)[..., 0]
  # Round up: one ulp-scale margin so the conversion's own rounding is safe.
  best = xp.maximum(best, 0.0) * safety_factor(dtype)
  return best, best_order


def to_delta(rdp, orders, epsilon) -> jax.Array:
  """Smallest δ over orders (last axis) such that the mechanism is (ε, δ)-DP.

  ::

    δ = min_α min( √(1 - e^{-ε(α)}),
                   exp((α-1)(ε(α) - ε + log(1 - 1/α)) - log α) )

  (Balle et al. 2020, arXiv:2004.00010 Prop. 12, with the KL/Pinsker bound),
  capped at 1.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: the orders.
    epsilon: ε ≥ 0, broadcast against ``rdp[..., 0]``.

  Returns:
    δ with the shape of ``rdp[..., 0]``.
  """
  return to_delta_xp(rdp, orders, epsilon)


def to_delta_xp(rdp, orders, epsilon, xp=jnp):
  """:func:`to_delta` on either array namespace (``jnp`` or ``numpy``)."""
  log_d, dtype = log_delta_per_order(rdp, orders, epsilon, xp)
  best = xp.min(log_d, axis=-1)
  return xp.minimum(xp.exp(best) * safety_factor(dtype), 1.0)


# --------------------------------------------------------------------------
# Conversions refined between grid orders (chord of log A_α)
# --------------------------------------------------------------------------
#
# f(α) = (α-1)·D_α = log A_α is convex in α (van Erven & Harremoës 2014,
# Cor. 2), so between two orders a < b with RDP bounds R_a, R_b the chord
#   F(α) = F_a + m·(α - a),  F_a = (a-1)R_a, F_b = (b-1)R_b, m = (F_b-F_a)/(b-a)
# bounds f from above: R(α) = F(α)/(α-1) is a valid RDP bound at every α in
# [a, b]. Written with x = α - 1, R(α) = w_a·R_a + w_b·R_b with weights
#   w_a = x_a(x_b - x)/((x_b - x_a)x),  w_b = x_b(x - x_a)/((x_b - x_a)x),
# non-negative and summing to 1 (no cancellation). The conversions along the
# chord are minimised in closed form:
# * improved ε (Balle et al. 2020, Prop. 12):
#     ε(x) = m + C/x + log x - (1 + 1/x)·log(1 + x),  C = F_a - m·x_a - log δ,
#   ε'(x) = (log(1 + x) - C)/x², so the minimiser is α* = e^C (clipped);
# * log δ(x) = F(x) - x·ε + x·log(x/(1+x)) - log(1+x) is convex with
#   derivative m - ε + log(x/(1+x)): x* = 1/expm1(m - ε) where m > ε, else b.
# α* only picks the order: any α in [a, b] gives a valid bound, evaluated by
# the ordinary per-order conversion of the chord's RDP bound there (with its
# rounding allowance), so rounding in α* cannot cost soundness.

# Relative allowance (in ulps) for the chord's weights and the final min.
_CHORD_ULPS = 16.0


def readout_margin(dtype) -> float:
  """Final upward factor of the refined read-outs: 16 ulps, and in float64
  the 4e-12 that :func:`to_epsilon` also applies (the same number where both
  pick the same order); float32 keeps 16 ulps (2e-6), not 256 (3e-5)."""
  return 1.0 + max(_CHORD_ULPS * float(jnp.finfo(dtype).eps), 4e-12)


def _chord_rdp(rdp, orders, x_star, xp=jnp):
  """The chord's RDP bound at x* = α* - 1 in each interval, rounded up.

  Args:
    rdp: RDP values, orders on the last axis (n).
    orders: the increasing orders, shape (n,).
    x_star: α* - 1 per interval, shape (..., n - 1), inside [x_a, x_b].

  Returns:
    Shape (..., n - 1).
  """
  xa, xb = orders[:-1] - 1.0, orders[1:] - 1.0
  ra, rb = rdp[..., :-1], rdp[..., 1:]
  den = (xb - xa) * x_star
  wa = xp.maximum(xa * (xb - x_star) / den, 0.0)
  wb = xp.maximum(xb * (x_star - xa) / den, 0.0)
  # 0·inf is 0 here (an infinite end contributes only where it is weighted).
  val = xp.where(wa > 0, wa * ra, 0.0) + xp.where(wb > 0, wb * rb, 0.0)
  return val * (1.0 + _CHORD_ULPS * float(xp.finfo(val.dtype).eps))


def _chord_ends(rdp, orders):
  xa, xb = orders[:-1] - 1.0, orders[1:] - 1.0
  fa, fb = xa * rdp[..., :-1], xb * rdp[..., 1:]
  return xa, xb, fa, (fb - fa) / (xb - xa)


def to_epsilon_refined(rdp, orders, delta, xp=jnp):
  """Improved-conversion ε minimised over every real order in [min, max] of
  ``orders``: the grid values and, between neighbours, the chord bound
  (see above). Never above :func:`to_epsilon`'s grid minimum (up to its
  rounding margin); a valid (ε, δ) bound.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: 1-D increasing concrete orders > 1.
    delta: δ in (0, 1), broadcast against ``rdp[..., 0]``.
    xp: ``jnp`` (jittable) or ``numpy``.

  Returns:
    ε with the shape of ``rdp[..., 0]``, rounded up.
  """
  grid, o, dtype = epsilon_per_order(rdp, orders, delta, "improved", xp)
  r = xp.asarray(rdp).astype(dtype)
  xa, xb, fa, m = _chord_ends(r, o)
  log_d = xp.log(xp.asarray(delta, dtype))[..., None]
  c = fa - m * xa - log_d
  x_star = xp.clip(xp.expm1(xp.minimum(c, 700.0)), xa, xb)
  x_star = xp.where(xp.isfinite(x_star), x_star, xb)
  chord = _chord_rdp(r, o, x_star, xp)
  eps_chord = epsilon_per_order(chord, x_star + 1.0, xp.asarray(delta, dtype), "improved", xp)[0]
  best = xp.minimum(xp.min(grid, axis=-1), xp.min(eps_chord, axis=-1))
  return xp.maximum(best, 0.0) * readout_margin(dtype)


def to_delta_refined(rdp, orders, epsilon, xp=jnp):
  """δ of :func:`to_delta` minimised over every real order in [min, max] of
  ``orders`` (grid values and the chord bound between neighbours), capped at 1.

  Args:
    rdp: RDP values, orders on the last axis.
    orders: 1-D increasing concrete orders > 1.
    epsilon: ε ≥ 0, broadcast against ``rdp[..., 0]``.
    xp: ``jnp`` (jittable) or ``numpy``.

  Returns:
    δ with the shape of ``rdp[..., 0]``.
  """
  grid, dtype = log_delta_per_order(rdp, orders, epsilon, xp)
  r = xp.asarray(rdp).astype(dtype)
  o = xp.asarray(orders, dtype)
  xa, xb, _, m = _chord_ends(r, o)
  e = xp.asarray(epsilon, dtype)[..., None]
  gap = m - e
  x_star = xp.where(gap > 0, 1.0 / xp.expm1(xp.clip(gap, 1e-300, 700.0)), xb)
  x_star = xp.clip(x_star, xa, xb)
  x_star = xp.where(xp.isfinite(x_star), x_star, xb)
  chord = _chord_rdp(r, o, x_star, xp)
  log_chord = log_delta_per_order(chord, x_star + 1.0, xp.asarray(epsilon, dtype), xp)[0]
  best = xp.minimum(xp.min(grid, axis=-1), xp.min(log_chord, axis=-1))
  return xp.minimum(xp.exp(best) * readout_margin(dtype), 1.0)
