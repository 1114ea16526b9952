"""Differentiable internals of :mod:`jaxdp.calibrate` (pure, jittable).

The custom-JVP ε (envelope theorem) and σ*(q) (implicit function theorem)
behind :func:`jaxdp.calibrate.differentiable_epsilon` and
:func:`jaxdp.calibrate.solve_sigma`, and the ``optax.adam`` loop of
:func:`jaxdp.calibrate.optimize_dpsgd`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.kernels import rdp
from jaxdp._src.core.roots import solve_jit
from jaxdp._src.solvers.boundary_eval import _bounds
from jaxdp._src.core import persist


def _eps_and_partials(q, s, t_steps, d, orders):
  """ε and its partial derivatives (∂q, ∂σ, ∂T, ∂δ) at the minimising order.

  Envelope theorem: with e_α = T·r_α(q, σ) + log(1 - 1/α) - (log δ + log α)/(α-1)
  (Balle et al. 2020, Prop. 12) and ε = min_α e_α, the partials of ε are
  those of e_α* (Danskin). The per-order derivatives of r_α come from forward
  mode on the kernels; they are computed as *values* and sanitised, so the
  tangent maps below are plainly linear and NaN-free under transposition.
  """
  orders_np = np.asarray(orders)
  one = jnp.ones_like(q)
  per = lambda q_, s_: rdp.dpsgd_rdp(q_, s_, one, orders_np)
  r, r_q = jax.jvp(lambda q_: per(q_, s), (q,), (one,))
  _, r_s = jax.jvp(lambda s_: per(q, s_), (s,), (one,))
  eps, best = rdp.to_epsilon(t_steps[..., None] * r, orders_np, d)
  idx = jnp.argmax(jnp.asarray(orders_np, eps.dtype) == best[..., None], axis=-1)[..., None]
  pick = lambda a: jnp.take_along_axis(a, idx, axis=-1)[..., 0]
  safety = 1.0 + 256.0 * float(jnp.finfo(eps.dtype).eps)
  active = eps > 0
  clean = lambda a: jnp.where(active & jnp.isfinite(a), a * safety, 0.0)
  e_q = clean(t_steps * pick(r_q))
  e_s = clean(t_steps * pick(r_s))
  e_t = clean(pick(r))
  e_d = clean(-1.0 / (d * (best - 1.0)))
  return eps, e_q, e_s, e_t, e_d


def _promote(*xs):
  xs = [jnp.asarray(x) for x in xs]
  dtype = jnp.result_type(*xs, float)
  return jnp.broadcast_arrays(*[x.astype(dtype) for x in xs])


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _diff_eps(q, s, t_steps, d, orders_key):
  orders = np.asarray(orders_key)
  return rdp.to_epsilon(rdp.dpsgd_rdp(q, s, t_steps, orders), orders, d)[0]


@_diff_eps.defjvp
def _diff_eps_jvp(orders_key, primals, tangents):
  q, s, t_steps, d = primals
  dq, ds, dts, dd = tangents
  eps, e_q, e_s, e_t, e_d = _eps_and_partials(q, s, t_steps, d, orders_key)
  return eps, e_q * dq + e_s * ds + e_t * dts + e_d * dd


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _solve_sigma(t, d, q, t_steps, orders_key, rtol):
  orders = np.asarray(orders_key)
  xmin, xmax = _bounds("sigma")
  c = jnp.sqrt(2.0 * jnp.maximum(t_steps, 1.0) * jnp.log(1.0 / d))
  x0 = jnp.log(jnp.maximum(q * c / jnp.maximum(t, 1e-12), 1e-30))
  x0 = jnp.where(jnp.isfinite(x0), x0, xmax)
  s = solve_jit(lambda x: rdp.dpsgd_epsilon(q, jnp.exp(x), t_steps, d, orders), t, x0, xmin, xmax,
             0.5 * rtol)
  return jnp.where(s.has_hi, jnp.exp(s.hi), jnp.inf)


@_solve_sigma.defjvp
def _solve_sigma_jvp(orders_key, rtol, primals, tangents):
  t, d, q, t_steps = primals
  dt, dd, dq, dts = tangents
  sig = _solve_sigma(t, d, q, t_steps, orders_key, rtol)
  finite = jnp.isfinite(sig)
  s_safe = jnp.where(finite, sig, 1.0)
  _, e_q, e_s, e_t, e_d = _eps_and_partials(q, s_safe, t_steps, d, orders_key)
  ok = finite & (e_s < 0)
  inv = jnp.where(ok, 1.0 / jnp.where(ok, e_s, -1.0), 0.0)
  return sig, (dt - e_q * dq - e_t * dts - e_d * dd) * inv


@functools.partial(persist.jit, static_argnums=(5, 6, 7, 8))
def _adam_run(lqmin, lqmax, epochs, target, delta, orders_key, rtol, iters, lr):
  import optax

  def objective(u):
    lq = lqmin + (lqmax - lqmin) * jax.nn.sigmoid(u)
    q = jnp.exp(lq)
    s = _solve_sigma(target, delta, q, epochs / q, orders_key, rtol)
    per = jnp.log(jnp.where(jnp.isfinite(s), s, 1e300)) - lq
    return jnp.sum(per), per

  opt = optax.adam(lr)
  u0 = jnp.zeros_like(lqmin)
  state = opt.init(u0)

  def step(carry, _):
    u, st, best_u, best_j = carry
    (_, per), g = jax.value_and_grad(objective, has_aux=True)(u)
    better = per < best_j
    best_u = jnp.where(better, u, best_u)
    best_j = jnp.where(better, per, best_j)
    upd, st = opt.update(g, st, u)
    return (optax.apply_updates(u, upd), st, best_u, best_j), None

  init = (u0, state, u0, jnp.full_like(u0, jnp.inf))
  (u, _, best_u, best_j), _ = jax.lax.scan(step, init, None, length=iters)
  _, per = objective(u)
  return jnp.where(per < best_j, u, best_u)
