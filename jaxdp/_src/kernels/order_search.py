"""The minimum over many RDP orders, evaluating few of them (host level).

``jaxdp.epsilon`` / ``jaxdp.delta`` report min over the given orders α of a
conversion c_α(T·ε(α)) that is non-decreasing in the RDP value ε(α)
(:func:`jaxdp.rdp.to_epsilon`, :func:`jaxdp.rdp.to_delta`). Evaluating every
order costs one quadrature per fractional order, although nearly all orders
are far from the minimiser. Two facts about the Rényi divergence bound the
orders not evaluated by those that are:

* f(α) = (α-1)·D_α(P‖Q) = log A_α is convex in α, with f(1) = 0
  (van Erven & Harremoës, "Rényi divergence and Kullback–Leibler divergence",
  IEEE Trans. Inf. Theory 2014, Cor. 2; A_α is a moment-generating function);
* D_α = ε(α) is non-decreasing in α (ibid., Thm 3).

For α strictly between evaluated orders a < α < b (a may be 1):

* upper bounds: f(α) ≤ chord of f on [a, b]; ε(α) ≤ ε(b);
* lower bounds: f(α) ≥ the secant through the evaluated (a', a), a' < a,
  extended to the right, and ≥ the secant through (b, b'), b' > b, extended to
  the left; ε(α) ≥ ε(a). Beyond the largest evaluated order only the lower
  bounds apply.

The conversion being monotone, every order gets an interval [lo(α), hi(α)]
for its ε (or log δ). An order with lo(α) above the smallest hi cannot be the
minimiser. The integer orders ≤ 64 are always evaluated (exact binomial sums,
cheap); then, per configuration, one "probe" (the unevaluated order with the
smallest lo, or the middle one beyond the largest evaluated order), then every
order whose interval still reaches the best hi. The answer equals the minimum
over all the orders (the lower bounds are deflated by a margin covering the
rounding and quadrature allowances of the values they come from), at the cost
of a few evaluations per configuration instead of one per order: about 2.8
instead of 94 on dp_accounting's 156 default orders over the benchmark's
(q, σ) grid. Near α = 1 the bounds also use D_α ≥ KL ≥ 2·TV² (Pinsker).

Skipping an order never affects soundness: the result is always the
conversion of a computed, rounded-up RDP value at an order that was evaluated.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from jaxdp._src.kernels import continuous_order as _continuous_order
from jaxdp._src.kernels import order_bounds as _ob
from jaxdp._src.kernels import rdp
from jaxdp._src.kernels import rdp_binomial
from jaxdp._src.kernels import rdp_convert
from jaxdp._src.core import persist

# Integer orders up to this are always evaluated (exact sums, ≤ 63 terms).
_BASE_MAX = 64
# Rounds of one probe per configuration, each taken only while there are more
# than _PROBE_WHEN candidates per configuration that has any; then every
# remaining candidate is evaluated. (More rounds evaluate fewer orders but cost
# more than they save: measured on the benchmark grid.)
_PROBE_ROUNDS = 1
_PROBE_WHEN = 2.0
# Upper ends of the size buckets of exactly summed orders evaluated in pairs
# (each pair's sum is padded to its bucket's largest order).
_PAIR_BUCKETS = (128, 256, 512, 1024, 2048, 4096)


class _Plan(NamedTuple):
  orders: np.ndarray      # sorted unique orders
  base: np.ndarray        # indices of the always-evaluated integer orders
  bucket_of: np.ndarray   # per order: index into ``buckets`` (-1: quadrature or base)
  buckets: tuple          # tuples of exact non-base orders, one per size bucket


@functools.lru_cache(maxsize=32)
def plan(orders_key: Optional[tuple]) -> Optional[_Plan]:
  """Search plan for an order set, or None to evaluate every order.

  Args:
    orders_key: tuple of orders (None: ``rdp.DEFAULT_ORDERS``).
  """
  orders = rdp.DEFAULT_ORDERS if orders_key is None else np.asarray(orders_key, np.float64)
  orders = np.unique(orders)
  if not np.all(np.isfinite(orders)):
    return None
  exact = rdp._exact_orders(orders)
  base_mask = exact & (orders <= _BASE_MAX)
  rest = ~base_mask
  # Needs two base points (with α = 1, the first chord and secant) and
  # something to skip.
  if base_mask.sum() < 2 or not np.any(rest):
    return None
  bucket_of = np.full(orders.size, -1)
  buckets = []
  lo = _BASE_MAX
  for hi in _PAIR_BUCKETS:
    if hi <= lo:
      continue
    sel = np.nonzero(rest & exact & (orders > lo) & (orders <= hi))[0]
    lo = hi
    if sel.size:
      bucket_of[sel] = len(buckets)
      buckets.append(tuple(float(o) for o in orders[sel]))
  return _Plan(orders, np.nonzero(base_mask)[0], bucket_of, tuple(buckets))


def _objective(total_rdp, orders, x, kind, method, xp=jnp):
  """Per-order ε (kind "epsilon") or log δ (kind "delta"); monotone in rdp."""
  if kind == "epsilon":
    return rdp_convert.epsilon_per_order(total_rdp, orders, x, method, xp)[0]
  return rdp_convert.log_delta_per_order(total_rdp, orders, x, xp)[0]


def candidates(table, known, q, sigma, steps, x, *, orders, kind, method, xp=jnp):
  """Orders that may still be the minimiser, and the most promising of them.

  Args:
    table, known, q, sigma, orders: as in :func:`jaxdp._src.kernels.order_bounds._bounds`.
    steps, x: (N,) step counts and δ (kind "epsilon") or ε (kind "delta").
    xp: ``jnp`` (traced: ``order_bounds._compiled_bounds`` and :func:`_compiled_select`)
      or ``numpy`` (the host path).

  Returns:
    ``(candidates, score, beyond)``: (N, m) masks of the candidates and of
    those beyond the largest evaluated order, and the candidates' lower
    bounds on the objective (+inf elsewhere), for :func:`_probes`.
  """
  rdp_lo, rdp_hi = _ob._bounds(table, known, q, sigma, orders, xp)
  return _select(rdp_lo, rdp_hi, known, steps, x, orders, kind, method, xp)


def _select(rdp_lo, rdp_hi, known, steps, x, orders, kind, method, xp=jnp):
  """:func:`candidates` from the per-step RDP intervals of every order."""
  a = xp.asarray(orders, rdp_lo.dtype)
  t = steps[:, None]
  obj_lo = _objective(t * rdp_lo, a, x, kind, method, xp)
  obj_hi = _objective(t * rdp_hi, a, x, kind, method, xp)
  thr = xp.min(obj_hi, axis=1, keepdims=True)
  thr = thr + 1e-12 * xp.abs(thr)
  cand = ~known & (obj_lo <= thr)
  if kind == "epsilon":  # ε is floored at 0: once an evaluated order reaches 0, done.
    best_known = xp.min(xp.where(known, obj_hi, xp.inf), axis=1, keepdims=True)
    cand = cand & (best_known > 0)
  score = xp.where(cand, obj_lo, xp.inf)
  beyond = cand & xp.isinf(rdp_hi)
  return cand, score, beyond


def _probe_candidates(base_table, probe, probe_value, q, sigma, steps, x, *, orders, base, kind,
                      method):
  """:func:`candidates` where the evaluated orders are the plan's base
  orders and at most one more per configuration (the search's two rounds).

  The same values as :func:`candidates` compiled on that table (the same
  arithmetic on the same neighbours), without its per-element scans and
  gathers: the base orders' neighbours are constants, and the probe moves
  them only where it lies between an order and its nearest base neighbour.

  Args:
    base_table: (N, len(base)) per-step RDP at the base orders.
    probe: (N,) int32 index into ``orders`` of the extra evaluated order, -1: none.
    probe_value: (N,) per-step RDP there (ignored where ``probe`` is -1).
    base: sorted tuple of the base orders' indices into ``orders``.
    Others: as in :func:`candidates`.

  Two programs, the bounds and then the selection: as one, XLA fused the
  bounds into each of the selection's outputs and took 1.8x as long
  (12.6 against 7.3 ms for 2048 configurations and 156 orders on one core,
  with the general neighbours' scans and gathers in the 12.6).
  """
  rdp_lo, rdp_hi, known = _ob._probe_bounds(base_table, probe, probe_value, q, sigma,
                                            orders=orders, base=base)
  return _compiled_select(rdp_lo, rdp_hi, known, steps, x, orders=orders, kind=kind, method=method)


@functools.partial(persist.jit, static_argnames=("orders", "kind", "method"))
def _compiled_select(rdp_lo, rdp_hi, known, steps, x, *, orders, kind, method):
  """Jitted :func:`_select`."""
  return _select(rdp_lo, rdp_hi, known, steps, x, orders, kind, method)


def _probes(cand, score, beyond):
  """One order per configuration with candidates (NumPy; -1: none).

  The candidate with the smallest lower bound, except beyond the largest
  evaluated order, where there are no upper bounds and the extrapolated lower
  bounds favour the farthest order: there, the middle candidate of that range.
  """
  probe = np.argmin(score, axis=1)
  rows = np.nonzero(beyond.any(axis=1))[0]
  if rows.size:
    b = beyond[rows]
    col = np.arange(b.shape[1])
    mean = (b * col).sum(axis=1) / b.sum(axis=1)
    probe[rows] = np.argmin(np.where(b, np.abs(col - mean[:, None]), np.inf), axis=1)
  return np.where(cand.any(axis=1), probe, -1)


@functools.partial(persist.jit, static_argnames=("orders", "kind", "method"))
def _minimum(table, steps, x, *, orders, kind, method):
  """Jitted :func:`minimum` (``jnp``)."""
  return minimum(table, steps, x, orders=orders, kind=kind, method=method)


def minimum(table, steps, x, *, orders, kind, method, xp=jnp):
  """min over evaluated orders (unevaluated entries are +inf), and the index
  of the order attaining it (``xp``: ``jnp`` or ``numpy``, the host path)."""
  total = steps[:, None] * table
  orders = xp.asarray(orders, table.dtype)
  best = xp.argmin(_objective(total, orders, x, kind, method, xp), axis=1)
  if kind == "epsilon":
    return rdp_convert.to_epsilon_xp(total, orders, x, method, xp)[0], best
  return rdp_convert.to_delta_xp(total, orders, x, xp), best


@functools.partial(persist.jit, static_argnames=("orders",))
def _exact_pairs(q, sigma, index, *, orders):
  """Per-step RDP at one integer order per element (exact binomial sum)."""
  q, sigma, log_q, log_1mq, dtype = rdp._prep(q, sigma)
  coef, rest, coef_err = (jnp.asarray(t, dtype)[index]
                          for t in rdp_binomial.binomial_tables(np.asarray(orders)))
  log_am1 = rdp_binomial.binomial_lse(log_q[:, None], log_1mq[:, None], sigma[:, None], coef, rest,
                              coef_err=coef_err)
  alpha = jnp.asarray(orders, dtype)[index]
  return rdp._finish(log_am1, q, sigma, alpha, exact=True)


def _padded_calls(fn, arrays, fills, size):
  """fn over the arrays in batches of ``size`` (the last one padded), so one
  shape is compiled per size."""
  n = arrays[0].size
  out = []
  for start in range(0, n, size):
    part = [a[start:start + size] for a in arrays]
    m = part[0].size
    if m < size:
      part = [np.concatenate([p, np.full(size - m, v, p.dtype)]) for p, v in zip(part, fills)]
    out.append(np.asarray(fn(*(jnp.asarray(p) for p in part)))[:m])
  return np.concatenate(out) if out else np.zeros((0,))


def quadrature_at(q, sigma, alpha, *, kind, method, nodes, size):
  """Per-step RDP at (q[i], σ[i], α[i]) by the quadrature of
  :func:`jaxdp.rdp.sampled_gaussian` (any real α > 1, rounded up), in padded
  batches of ``size`` through the chunk's one quadrature program
  (:func:`jaxdp._src.kernels.continuous_order.chunk_quadrature`, which also
  runs the chunk's golden section): flat float64 NumPy in and out, under
  ``nx.x64()``.
  """
  def fn(a, b, c, steps, x):   # (steps, x: only for the program's unused conversion)
    return _continuous_order.chunk_quadrature(a, b, steps, x, c, c, c, jnp.asarray(True),
                                              kind=kind, method=method, nodes=nodes)[2]
  ones = np.ones_like(q)
  return _padded_calls(fn, (q, sigma, alpha, ones, 0.5 * ones), (0.5, 1.0, 2.0, 1.0, 0.5), size)


def _evaluate(pl: _Plan, q, sigma, cols, nodes, kind, method, size):
  """Per-step RDP at (q[i], sigma[i], orders[cols[i]]), in batches of ``size``
  (the quadrature through the program of :func:`quadrature_at`).

  Fractional orders and orders above 4096 use the quadrature, as in
  :func:`jaxdp.rdp.sampled_gaussian`. Integer orders above _BASE_MAX use it
  too where σ ≥ 0.3 — there it is accurate to 1e-12 relative, within the
  safety factor every value carries, and an order of magnitude cheaper than a
  sum of hundreds of terms per pair — and the exact binomial sum below 0.3.
  """
  out = np.empty(cols.size)
  bucket = np.where(sigma >= 0.3, -1, pl.bucket_of[cols])
  quad = bucket < 0
  if np.any(quad):
    sel = np.nonzero(quad)[0]
    out[sel] = quadrature_at(q[sel], sigma[sel], pl.orders[cols[sel]], kind=kind, method=method,
                             nodes=nodes, size=size)
  for j, orders in enumerate(pl.buckets):
    sel = np.nonzero(bucket == j)[0]
    if sel.size:
      index = np.searchsorted(np.asarray(orders), pl.orders[cols[sel]])
      fn = lambda a, b, c, orders=orders: _exact_pairs(a, b, c, orders=orders)
      out[sel] = _padded_calls(fn, (q[sel], sigma[sel], index), (0.5, 1.0, 0), size)
  return out


def search(kind, pl: _Plan, method, nodes, q, sigma, steps, x, *, with_index=False):
  """min over ``pl.orders`` of ε (or δ) for flat float64 NumPy arrays.

  Must run under float64 (``nx.x64()``). Returns a NumPy array like ``q``
  (and, with ``with_index``, the index into ``pl.orders`` of the best order).
  """
  base_orders = tuple(float(o) for o in pl.orders[pl.base])
  base_kernel = rdp._static_kernel((len(base_orders),), base_orders, nodes)   # cached
  key = tuple(float(o) for o in pl.orders)
  args = tuple(jnp.asarray(v) for v in (q, sigma, steps, x))
  table = search_table(
      pl, q.size, lambda: np.asarray(base_kernel(q[:, None], sigma[:, None])),
      functools.partial(_compiled_candidates, pl, key, args, kind, method),
      lambda rows, cols: _evaluate(pl, q[rows], sigma[rows], cols, nodes, kind, method, q.size))
  value, best = _minimum(jnp.asarray(table), *args[2:], orders=key, kind=kind, method=method)
  value = np.asarray(value)
  return (value, np.asarray(best)) if with_index else value


def _compiled_candidates(pl: _Plan, key, args, kind, method, table, known):
  """:func:`candidates` through a compiled program: :func:`_probe_candidates`
  when at most one order beyond the base ones is evaluated per
  configuration (both rounds of :func:`search_table`), else
  ``order_bounds._compiled_bounds`` and :func:`_compiled_select`."""
  extra = known.copy()
  extra[:, pl.base] = False
  if np.any(extra.sum(axis=1) > 1):
    rdp_lo, rdp_hi = _ob._compiled_bounds(jnp.asarray(table), jnp.asarray(known), *args[:2],
                                          orders=key)
    return _compiled_select(rdp_lo, rdp_hi, jnp.asarray(known), *args[2:], orders=key, kind=kind,
                            method=method)
  probe = np.where(extra.any(axis=1), np.argmax(extra, axis=1), -1).astype(np.int32)
  value = np.where(probe >= 0, table[np.arange(probe.size), np.maximum(probe, 0)], np.inf)
  return _probe_candidates(jnp.asarray(table[:, pl.base]), jnp.asarray(probe), jnp.asarray(value),
                           *args, orders=key, base=tuple(int(b) for b in pl.base), kind=kind,
                           method=method)


def search_table(pl: _Plan, n, base, find_candidates, evaluate):
  """The per-step RDP table of the search: the base orders, then rounds of
  candidates (module docstring); +inf at the orders never evaluated.

  Args:
    pl: the plan; n: the number of configurations.
    base: ``() -> (n, len(pl.base))`` per-step RDP at the base orders.
    find_candidates: ``(table, known) ->`` :func:`candidates`'s triple.
    evaluate: ``(rows, cols) ->`` per-step RDP at (configuration, order) pairs.

  Returns:
    (n, m) float64 NumPy table.
  """
  m = pl.orders.size
  table = np.full((n, m), np.inf)
  known = np.zeros((n, m), bool)
  table[:, pl.base] = base()
  known[:, pl.base] = True
  for rnd in range(_PROBE_ROUNDS + 1):
    cand, score, beyond = find_candidates(table, known)
    cand = np.asarray(cand)
    per_row = cand.sum(axis=1)
    active = np.count_nonzero(per_row)
    if active == 0:
      break
    # Probe (one order per configuration) while candidates are many.
    if rnd < _PROBE_ROUNDS and per_row.sum() > _PROBE_WHEN * active:
      probe = _probes(cand, np.asarray(score), np.asarray(beyond))
      rows = np.nonzero(probe >= 0)[0]
      cols = probe[rows]
    else:
      rows, cols = np.nonzero(cand)
    table[rows, cols] = evaluate(rows, cols)
    known[rows, cols] = True
    if rows.size == per_row.sum():
      break
  return table
