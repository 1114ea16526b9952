"""DP-SGD hyperparameters: the batch size and σ minimising the gradient noise.

:func:`optimize_dpsgd` (public as :func:`jaxdp.calibrate.optimize_dpsgd`):
Adam on the implicit-function gradients of the calibrated σ*(q)
(:mod:`jaxdp._src.solvers.calibrate_grad`), then snapped to whole batch
sizes and certified by :func:`jaxdp.calibrate.sigma`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src.solvers.boundary_eval import _check_epsilon_rdp, _orders_key
from jaxdp._src.solvers.calibrate import _flat, _resolve_orders, _validate_common, sigma
from jaxdp._src.solvers.calibrate_grad import _adam_run

__all__ = ["optimize_dpsgd", "DPSGDPlan"]


class DPSGDPlan(NamedTuple):
  """A feasible DP-SGD configuration (arrays, one entry per problem)."""
  batch_size: np.ndarray   # expected batch size B = q·N (whole number)
  q: np.ndarray            # sampling rate B / N
  sigma: np.ndarray        # noise multiplier, certified by :func:`sigma`
  steps: np.ndarray        # T = E × round(N / B) (jaxdp.sampling.epochs_to_steps)
  noise_std: np.ndarray    # σ / B: noise std on the averaged gradient
  epsilon: np.ndarray      # ε actually spent (≤ target)


def _epoch_steps(epochs, q):
  """E epochs of Poisson sampling at rate q as steps, elementwise: the one rule
  of :mod:`jaxdp.sampling` (E × round(1/q), :func:`jaxdp.sampling.epochs_to_steps`)."""
  from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
  return np.asarray([float(sampling.epochs_to_steps(e, sampling.poisson_steps_per_epoch(qq)))
                     for e, qq in zip(np.ravel(epochs), np.ravel(q))],
                    np.float64).reshape(np.shape(q))


def optimize_dpsgd(dataset_size, epochs, target_epsilon, delta, *, min_batch_size=1,
                   max_batch_size=None, orders=None, num_iterations: int = 40,
                   learning_rate: float = 0.3, rtol: float = 1e-6) -> DPSGDPlan:
  """Chooses the batch size and σ minimising the noise on the averaged gradient.

  Objective, for each problem (N, E, ε, δ) (all broadcast):

      minimise  σ / (q N)    over q ∈ [B_min/N, B_max/N], σ > 0,
      subject to ε_RDP(q, σ, T = E/q, δ) ≤ ε_target,

  i.e. the standard deviation of the Gaussian noise on the averaged clipped
  gradient (sum of q·N expected clipped gradients plus N(0, σ²) noise, divided
  by q·N) after E epochs of Poisson-sampled DP-SGD. For each q the best σ is
  the calibrated σ*(q) (:func:`solve_sigma`), so the problem reduces to
  minimising J(q) = log σ*(q) - log q over one variable per problem. We
  parametrise log q = log q_min + (log q_max - log q_min)·sigmoid(u) and run
  ``optax.adam`` on u with gradients of σ*(q) from the implicit function
  theorem (custom JVP), all problems at once in one jitted ``lax.scan``.

  The answer is then snapped to a feasible point: the best iterate and the two
  ends of the batch-size range are rounded to whole batch sizes B, steps set by
  the one rule for epochs, T = E × round(1/q) with q = B/N
  (:func:`jaxdp.sampling.epochs_to_steps`; the optimizer's relaxation uses the
  continuous T = E/q), and σ calibrated exactly by :func:`sigma` (certified); the one
  with the smallest σ/B is returned. Under RDP J usually decreases with q in
  the Gaussian regime (larger batches win at fixed epochs), so
  ``max_batch_size`` (memory, or a minimum number of steps E·N/B_max) is the
  constraint that matters most; the optimizer finds interior optima when the
  subsampled regime makes J non-monotone.

  Args:
    dataset_size: N (whole number ≥ 1).
    epochs: E > 0 (passes over the data).
    target_epsilon, delta: the budget.
    min_batch_size, max_batch_size: bounds on B (default 1 and N).
    orders: RDP orders (default None: every real order α > 1, as :func:`jaxdp.epsilon`).
    num_iterations: Adam steps.
    learning_rate: Adam learning rate (on u).
    rtol: calibration tolerance.

  Returns:
    A :class:`DPSGDPlan` of float64 arrays with the broadcast shape.
  """
  nx.check_array("dataset_size", dataset_size, low=1.0, integer=True)
  nx.check_array("epochs", epochs, low=0.0, low_open=True)
  _validate_common(target_epsilon, delta, rtol, "rdp")
  nx.check_array("min_batch_size", min_batch_size, low=1.0, integer=True)
  if max_batch_size is not None:
    nx.check_array("max_batch_size", max_batch_size, low=1.0, integer=True)
  shape = nx.check_same_shape(dataset_size=dataset_size, epochs=epochs,
                              target_epsilon=target_epsilon, delta=delta)
  n_, e_, t_, d_ = _flat(shape, dataset_size, epochs, target_epsilon, delta)
  bmin = np.broadcast_to(np.asarray(min_batch_size, np.float64), shape).reshape(-1)
  bmax = n_ if max_batch_size is None else np.broadcast_to(
      np.asarray(max_batch_size, np.float64), shape).reshape(-1)
  bmax = np.minimum(bmax, n_)
  if np.any(bmin > bmax):
    i = int(np.argmax(bmin > bmax))
    raise ValueError(f"min_batch_size must not exceed max_batch_size or dataset_size; found "
                     f"{bmin[i]:g} > {bmax[i]:g} (first bad element at index {i}).")
  orders_checked, orders_full = _resolve_orders(orders)
  key = _orders_key(orders_full)
  with nx.x64():
    u_best = np.asarray(_adam_run(jnp.asarray(np.log(bmin / n_)), jnp.asarray(np.log(bmax / n_)),
                                  jnp.asarray(e_), jnp.asarray(t_), jnp.asarray(d_), key,
                                  float(rtol), int(num_iterations), float(learning_rate)))
  lqmin, lqmax = np.log(bmin / n_), np.log(bmax / n_)
  q_opt = np.exp(lqmin + (lqmax - lqmin) / (1.0 + np.exp(-u_best)))
  cands = np.stack([np.clip(np.round(q_opt * n_), bmin, bmax), bmin, bmax])
  best = None
  for b in cands:
    q = b / n_
    tt = _epoch_steps(e_, q)
    s = np.asarray(sigma(t_, d_, q, tt, rtol=rtol, orders=orders_checked), np.float64).reshape(-1)
    noise = s / b
    if best is None:
      best = [b, q, s, tt, noise]
    else:
      take = noise < best[4]
      best = [np.where(take, new, old) for new, old in zip([b, q, s, tt, noise], best)]
  b, q, s, tt, noise = best
  eps = np.asarray(_check_epsilon_rdp(q, np.where(np.isfinite(s), s, 1.0), tt, d_,
                                      orders_checked))
  eps = np.where(np.isfinite(s), eps, np.inf)
  r = lambda x: nx.to_host(np.asarray(x, np.float64).reshape(shape))
  return DPSGDPlan(r(b), r(q), r(s), r(tt), r(noise), r(eps))
