"""The RDP conversion minimised over all real orders α > 1 (host-level helper).

With no explicit order list, :func:`jaxdp.epsilon` / :func:`jaxdp.delta`
(accountant "rdp") report min over *all* real α > 1 rather than over a fixed
grid. The grid minimum is found first (:mod:`jaxdp._src.kernels.order_search`, exact over
:data:`jaxdp.rdp.DEFAULT_ORDERS`); then a golden-section search runs on
u = log(α - 1) inside the bracket formed by the two grid neighbours of the
grid's best order, and the reported value is the minimum of everything
evaluated.

Why the bracket holds the minimiser. f(α) = (α-1)·ε(α) = log A_α is convex
(van Erven & Harremoës 2014, Cor. 2). With the classic conversion,
ε_δ(α) = (T·f(α) + log(1/δ))/(α-1) has convex sublevel sets
{α : T·f(α) - c·(α-1) + log(1/δ) ≤ 0}, so it is quasi-convex (unimodal) and
its minimiser lies between the grid neighbours of the best grid order. The
improved conversion (Balle et al. 2020, Prop. 12) adds the smooth terms
log(1-1/α) - log(α)/(α-1), which leave it unimodal in practice.

Soundness never depends on that: every reported value is the conversion of a
rounded-up RDP value (quadrature path of :func:`jaxdp.rdp.sampled_gaussian`,
valid for every real order) at an order that was actually evaluated, and the
result is never above the grid minimum (which is included in the min).
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_convert
from jaxdp._src.kernels import rdp_quadrature
from jaxdp._src.core import persist

# Golden-section iterations (one RDP evaluation each). The bracket in
# u = log(α-1) shrinks by 0.618 per iteration; 22 leave ~2e-5 of a grid gap,
# where ε is flat to ~1e-10 relative (14 left ~1e-8: the in-jit read-out of
# jaxdp.optax, on a finer order table, then read below the host's answer).
ITERATIONS = 22
_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0


def _converted(kind, method, steps, x, alpha, per, xp=jnp):
  """Converted ε (or δ) of T steps of per-step RDP ``per`` at orders ``alpha``."""
  total = (steps * per)[:, None]
  if kind == "epsilon":
    return rdp_convert.to_epsilon_xp(total, alpha[:, None], x, method, xp)[0]
  return rdp_convert.to_delta_xp(total, alpha[:, None], x, xp)


def _parts(kind, method, nodes, q, sigma, steps, x, xp=jnp):
  """The per-step RDP (quadrature, rounded up) and conversion of :func:`golden_section`."""
  if xp is np:
    per_step = lambda alpha: distinct_quadrature(q, sigma, alpha, nodes)
  else:
    per_step = lambda alpha: rdp.quadrature_rdp(q, sigma, alpha, nodes, xp)
  return per_step, functools.partial(_converted, kind, method, steps, x, xp=xp)


def distinct_quadrature(q, sigma, alpha, nodes):
  """``rdp.quadrature_rdp`` in NumPy on flat arrays, each distinct (q, σ, α)
  once (elementwise, so the same values; the host path's configurations
  often share (q, σ), e.g. a PLD profile's RDP guard over its ε grid)."""
  q, sigma, alpha = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (q, sigma, alpha)))
  per_step = lambda q, s, a: rdp.quadrature_rdp(q, s, a, nodes, np)
  return nx.on_distinct_rows(per_step, q.ravel(), sigma.ravel(), alpha.ravel()).reshape(q.shape)


@functools.partial(persist.jit, static_argnames=("kind", "method", "nodes", "iterations",
                                             "with_argmin"))
def golden_minimum(q, sigma, steps, x, lo, hi, *, kind, method, nodes, iterations=ITERATIONS,
                   with_argmin=False):
  """min of the converted value over orders in [lo, hi] (golden section on log(α-1)).

  Args:
    q, sigma, steps, x: flat float arrays (x is δ for kind "epsilon", ε for "delta").
    lo, hi: the bracket per configuration, 1 < lo < hi.
    kind: "epsilon" or "delta".
    method: conversion ("improved" or "classic"), kind "epsilon" only.
    nodes: quadrature nodes per window (:func:`jaxdp.rdp.sampled_gaussian`).
    iterations: golden-section steps.
    with_argmin: also return the order at which the smallest value was seen.

  Returns:
    The smallest value evaluated, per configuration (a valid bound for each);
    with ``with_argmin``, ``(value, order)``.
  """
  value, order, _ = golden_section(*_parts(kind, method, nodes, q, sigma, steps, x), lo, hi,
                                   iterations, with_argmin)
  return (value, order) if with_argmin else value


@functools.partial(persist.jit, static_argnames=("kind", "method", "nodes"))
def chunk_quadrature(q, sigma, steps, x, lo, hi, alpha, exact, *, kind, method, nodes):
  """The one quadrature program of a compiled chunk of the RDP driver.

  A chunk needs the quadrature twice: at (configuration, order) pairs of its
  order search (:mod:`jaxdp._src.kernels.order_search`) and in the golden
  section between orders (:func:`refine`). Both run through this program:
  the RDP kernel appears once in it, so a chunk size compiles one program
  (~1.1 s on the 2-core CPU) instead of the golden section's and the pair
  kernel's (~1.1 + 0.7 s, the pair kernel at two batch sizes).

  Args:
    q, sigma, steps, x, lo, hi: as in :func:`golden_minimum` (flat arrays).
    alpha: orders for ``exact``, one per configuration.
    exact: traced bool scalar: True evaluates the per-step RDP at ``alpha``
      (one evaluation); False runs :func:`golden_minimum` with its argmin.
    kind, method, nodes: as in :func:`golden_minimum`.

  Returns:
    ``(value, order, per_step)``: with ``exact``, ``per_step`` is the
    rounded-up per-step RDP at ``alpha`` (the rest unused); otherwise
    golden_minimum's ``(value, order)`` (``per_step`` unused).
  """
  per_step, convert = _parts(kind, method, nodes, q, sigma, steps, x)
  return golden_section(per_step, convert, lo, hi, ITERATIONS, True, exact=(alpha, exact))


def golden_section(per_step, convert, lo, hi, iterations, with_argmin, xp=jnp, exact=None):
  """The loop of :func:`golden_minimum` for the converted value
  ``convert(alpha, per_step(alpha))`` on either array namespace (``jnp``:
  traced; ``numpy``: the host path).

  Besides the golden-section points, the two ends of the bracket are
  evaluated (the last two loop steps): where the minimiser is an end (the
  bracket beyond the grid's largest or smallest order, e.g. tiny ε at
  δ = 1e-12 wants α ≥ 8192) the interior points only approach it.

  ``exact``: ``(alpha, on)``; where ``on`` (a traced bool) holds, the loop
  takes one step, at ``alpha`` itself (:func:`chunk_quadrature`).

  Returns:
    ``(value, order, per_step at the last point evaluated)``; the order is
    ``None`` unless ``with_argmin``.
  """
  a = xp.log(lo - 1.0)
  b = xp.log(hi - 1.0)
  c = b - _INV_PHI * (b - a)
  d = a + _INV_PHI * (b - a)
  a0, b0 = a, b
  last = iterations + 2

  # One evaluation of f per loop step, the two interior points included
  # (steps 0 and 1) and the two ends (the last two steps): f, the RDP kernel,
  # appears once in the compiled program (three copies compiled ~3x longer,
  # ~3 s on the 2-core CPU).
  def body(i, s):
    a, b, c, d, fc, fd, best, arg, _ = s
    left = fc <= fd   # the minimiser is in [a, d]
    a2 = xp.where(left, a, c)
    b2 = xp.where(left, d, b)
    new = xp.where(left, b2 - _INV_PHI * (b2 - a2), a2 + _INV_PHI * (b2 - a2))
    point = xp.where(i == 0, c, xp.where(i == 1, d, new))
    point = xp.where(i == last, b0, xp.where(i == last + 1, a0, point))
    alpha = 1.0 + xp.exp(point)
    # With ``exact`` only the per-step value is used (the conversion of the
    # golden point's alpha keeps its compiled form, and its answers' bits).
    per = per_step(alpha if exact is None else xp.where(exact[1], exact[0], alpha))
    fn = convert(alpha, per)
    golden = (i >= 2) & (i < last)
    a3, b3 = xp.where(golden, a2, a), xp.where(golden, b2, b)
    c3 = xp.where(golden, xp.where(left, new, d), c)
    d3 = xp.where(golden, xp.where(left, c, new), d)
    fc3 = xp.where(golden, xp.where(left, fn, fd), xp.where(i == 0, fn, fc))
    fd3 = xp.where(golden, xp.where(left, fc, fn), xp.where(i == 1, fn, fd))
    arg2 = xp.where(i == 0, point, xp.where(fn < best, point, arg))
    return a3, b3, c3, d3, fc3, fd3, xp.minimum(best, fn), arg2, per

  inf = xp.full_like(a, xp.inf)
  state = (a, b, c, d, inf, inf, inf, c, inf)
  steps = last + 2 if exact is None else xp.where(exact[1], 1, last + 2)
  out = nx.fori_loop(0, steps, body, state, xp)
  return out[-3], (1.0 + xp.exp(out[-2]) if with_argmin else None), out[-1]


def bracket(orders, best_index):
  """The grid neighbours of each configuration's best grid order.

  Below the smallest order the bracket reaches 1 + (α_min - 1)/4; above the
  largest, 2·α_max.
  """
  orders = np.asarray(orders, np.float64)
  k = np.asarray(best_index)
  lo = np.where(k > 0, orders[np.maximum(k - 1, 0)], 1.0 + (orders[0] - 1.0) / 4.0)
  hi = np.where(k < orders.size - 1, orders[np.minimum(k + 1, orders.size - 1)], 2.0 * orders[-1])
  return lo, hi


def refine(kind, method, nodes, grid_value, orders, best_index, q, sigma, steps, x,
           with_order=False, xp=jnp):
  """min(grid value, golden-section value in the grid bracket), NumPy float64.

  Must run under float64 (``nx.x64()``) unless ``xp`` is ``numpy`` (the host
  path, which runs the same golden section in NumPy). With ``with_order``,
  also the order at which that minimum was evaluated: ``(value, order)``.
  """
  lo, hi = bracket(orders, best_index)
  if xp is np:   # the host path (jaxdp._src.kernels.host_rdp): no compilation
    val, arg, _ = golden_section(*_parts(kind, method, nodes, q, sigma, steps, x, np), lo, hi,
                                 ITERATIONS, True, np)
  else:
    val, arg, _ = chunk_quadrature(*(jnp.asarray(v) for v in (q, sigma, steps, x, lo, hi, lo)),
                                   jnp.asarray(False), kind=kind, method=method, nodes=nodes)
  val = np.asarray(val, np.float64)
  grid_value = np.asarray(grid_value, np.float64)
  use_grid = np.isnan(val) | (grid_value <= val)
  value = np.where(use_grid, grid_value, val)
  if not with_order:
    return value
  grid_order = np.asarray(orders, np.float64)[np.asarray(best_index)]
  return value, np.where(use_grid, grid_order, np.asarray(arg, np.float64))


def minimum_over_all_orders(kind, method, q, sigma, steps, x, *,
                            nodes=rdp_quadrature.NODES_PER_WINDOW):
  """Jittable: the grid minimum over ``DEFAULT_ORDERS`` refined by
  :func:`golden_minimum` (what the host path computes, in one traced program;
  used by the sharded sweep kernels).

  Args:
    kind: "epsilon" or "delta".
    method: conversion, kind "epsilon" only.
    q, sigma, steps, x: arrays of one shape.
    nodes: quadrature nodes per window.

  Returns:
    The value per configuration, never above the grid minimum.
  """
  orders = rdp.DEFAULT_ORDERS
  total = rdp.dpsgd_rdp(q, sigma, steps, orders, _nodes=nodes)
  o = jnp.asarray(orders, total.dtype)
  if kind == "epsilon":
    grid_value = rdp.to_epsilon(total, o, x, method)[0]
    per_order = rdp_convert.epsilon_per_order(total, o, x, method)[0]
  else:
    grid_value = rdp.to_delta(total, o, x)
    per_order = rdp_convert.log_delta_per_order(total, o, x)[0]
  k = jnp.argmin(per_order, axis=-1)
  lo = jnp.where(k > 0, o[jnp.maximum(k - 1, 0)], 1.0 + (o[0] - 1.0) / 4.0)
  hi = jnp.where(k < o.size - 1, o[jnp.minimum(k + 1, o.size - 1)], 2.0 * o[-1])
  shape = grid_value.shape
  flat = [jnp.broadcast_to(v, shape).reshape(-1) for v in (q, sigma, steps, x, lo, hi)]
  val = golden_minimum(*flat, kind=kind, method=method, nodes=nodes).reshape(shape)
  return jnp.where(jnp.isnan(val), grid_value, jnp.minimum(grid_value, val))
