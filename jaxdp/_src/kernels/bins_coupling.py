"""Samplers with a capacity: the untruncated bound plus the overflow probability.

Balls-in-bins (below) and truncated Poisson sampling
(:func:`poisson_overflow_probability`: a step overflows when its Binomial
batch exceeds the capacity) share the argument and the two functions
:func:`delta` and :func:`epsilon`.

A :func:`jaxdp.sampling.balls_in_bins` sampler cuts a bin holding more than
``capacity`` examples to a uniformly random ``capacity``-subset. Run the
truncated and the untruncated sampler on the same allocation: their outputs
coincide unless some bin of some epoch overflows, an event F that depends on
the allocation randomness alone (not on the data, nor on earlier outputs, so
this holds for adaptively chosen steps too). For every set S of outcomes and
neighbours D, D' (A the untruncated run, A' the truncated one, p >= P[F] on
either dataset):

    P[A'(D) ∈ S] <= P[A(D) ∈ S] + p <= e^ε P[A(D') ∈ S] + δ_A(ε) + p
                 <= e^ε P[A'(D') ∈ S] + δ_A(ε) + (1 + e^ε) p,

so δ_A'(ε) <= δ_A(ε) + (1 + e^ε)·p: the coupling (total-variation) argument
of Balle, Barthe & Gaboardi (NeurIPS 2018, §3). With E epochs of k bins and
at most N + 1 examples (add/remove neighbours),

    p <= E · k · P[Binomial(N + 1, 1/k) >= capacity + 1]      (union bound),

and the binomial tail is bounded by Chernoff's P[X >= a·n] <= exp(-n·KL(a ‖ 1/k))
(a > 1/k), a closed form with no special-function round-off to trust.

Where the capacity is a few standard deviations above N/k, p is far below any
δ of interest and this is much tighter than the RDP fallback for a truncated
epoch (one unamplified Gaussian per epoch, :func:`jaxdp.accountant.event_rdp`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np



def overflow_probability(dataset_size, batch_size, capacity, epochs) -> float:
  """Upper bound on P[some bin of some of ``epochs`` epochs exceeds ``capacity``].

  Args:
    dataset_size: N (the neighbour has at most N + 1 examples).
    batch_size: B; k = N // B bins per epoch.
    capacity: the sampler's buffer length.
    epochs: number of epochs started.

  Returns:
    A float in [0, 1].
  """
  n = int(dataset_size) + 1
  k = max(int(dataset_size) // int(batch_size), 1)
  c = int(capacity) + 1                      # overflow: at least capacity + 1 in a bin
  if c > n or epochs <= 0:
    return 0.0
  p, a = 1.0 / k, c / n
  if a <= p:
    return 1.0
  kl = a * math.log(a / p) + ((1.0 - a) * math.log((1.0 - a) / (1.0 - p)) if a < 1.0 else 0.0)
  # Relative slack on the exponent for its own round-off (a few ulps).
  log_tail = -n * kl * (1.0 - 1e-12)
  return float(min(1.0, math.exp(min(math.log(epochs * k) + log_tail, 0.0))))


def poisson_overflow_probability(dataset_size, q, capacity, steps) -> float:
  """Upper bound on P[some batch of ``steps`` truncated-Poisson steps exceeds ``capacity``].

  The datasets of a neighbouring pair hold N - 1, N or N + 1 examples
  (add/remove around N = ``dataset_size``; replace-one keeps N); a larger
  dataset overflows more often (Binomial(n, q) is stochastically increasing
  in n), so n = N + 1 bounds every side. Per step
  p₁ = P[Binomial(N + 1, q) >= capacity + 1], from the rigorous bracket of
  :func:`jaxdp._src.kernels.rdp_truncated._binomial_upper_tail` (explicit pmf terms plus
  a geometric remainder, its upper end rounded up); over T independent steps
  1 - (1 - p₁)^T, computed as -expm1(T·log1p(-p₁)) with a relative margin
  of 1e-12 added (it is increasing in p₁, so the upper end of p₁ gives an
  upper bound).

  Args:
    dataset_size: N.
    q: the sampling rate.
    capacity: the sampler's buffer length C.
    steps: number of steps T (elementwise over an array).

  Returns:
    Float64 NumPy array of the shape of ``steps``, in [0, 1].
  """
  from jaxdp._src.kernels import rdp_truncated as rt  # pylint: disable=g-import-not-at-top
  steps = np.asarray(steps, np.float64)
  n, c, q = float(dataset_size) + 1.0, float(capacity) + 1.0, float(q)
  if c > n or q <= 0.0:
    return np.zeros(steps.shape)
  if q >= 1.0:
    return np.where(steps > 0, 1.0, 0.0)
  with np.errstate(all="ignore"):   # the bracket in NumPy: nothing compiled
    log_p1 = float(rt._binomial_upper_tail(  # pylint: disable=protected-access
        *(np.asarray(v, np.float64) for v in (c, n, q)), xp=np).log_t_hi)
  p1 = min(math.exp(log_p1) * (1.0 + 1e-12), 1.0)
  with np.errstate(divide="ignore"):
    out = -np.expm1(steps * math.log1p(-p1)) if p1 < 1.0 else np.where(steps > 0, 1.0, 0.0)
  return np.minimum(np.where(steps > 0, out * (1.0 + 1e-12), 0.0), 1.0)


def _untruncated(sampler):
  return dataclasses.replace(sampler, capacity=sampler.dataset_size)


def _overflow(sampler, steps):
  """Overflow probability bound of the run of ``steps`` steps (elementwise):
  :func:`poisson_overflow_probability` for a truncated Poisson sampler,
  :func:`overflow_probability` over the epochs started otherwise."""
  if hasattr(sampler, "q"):
    return poisson_overflow_probability(sampler.dataset_size, sampler.q, sampler.capacity, steps)
  epochs = np.ceil(np.asarray(steps, np.float64) / sampler.steps_per_epoch - 1e-12)
  return np.vectorize(lambda e: overflow_probability(sampler.dataset_size, sampler.batch_size,
                                                     sampler.capacity, e))(epochs)


def delta(forward, sampler, sigma, steps, epsilon, orders):
  """δ(ε) of the truncated sampler: δ_untruncated(ε) + (1 + e^ε)·p (elementwise).

  ``forward(kind, sampler, sigma, steps, value, orders)`` is the RDP answer
  for an untruncated sampler (``jaxdp._src.accounting.sampler_forward``).
  """
  p = np.broadcast_to(_overflow(sampler, steps), np.shape(epsilon))
  if not np.any(2.0 * p < 1.0):   # (1 + e^ε)·p >= 1: the bound is trivial
    return np.ones(np.shape(epsilon))
  d_u = np.asarray(forward("delta", _untruncated(sampler), sigma, steps, epsilon, orders),
                   np.float64)
  with np.errstate(over="ignore"):
    extra = (1.0 + np.exp(np.asarray(epsilon, np.float64))) * p
  return np.minimum(np.nextafter(d_u + extra, np.inf), 1.0)


def epsilon(forward, sampler, sigma, steps, target_delta, orders):
  """ε(δ) of the truncated sampler (elementwise; +inf where the split fails).

  E = ε_untruncated(δ/2); where (1 + e^E)·p <= δ/2, the answer
  ε1 = ε_untruncated(δ - (1 + e^E)·p) <= E satisfies
  δ_untruncated(ε1) + (1 + e^ε1)·p <= δ.
  """
  target_delta = np.asarray(target_delta, np.float64)
  unt = _untruncated(sampler)
  p = np.broadcast_to(_overflow(sampler, steps), np.shape(target_delta))
  if not np.any(2.0 * p <= target_delta / 2.0):   # (1 + e^E)·p >= 2p: the split fails
    return np.full(np.shape(target_delta), np.inf)
  e_half = np.asarray(forward("epsilon", unt, sigma, steps, target_delta / 2.0, orders),
                      np.float64)
  with np.errstate(over="ignore"):
    extra = np.nextafter((1.0 + np.exp(np.minimum(e_half, 700.0))) * p, np.inf)
  ok = np.isfinite(e_half) & (e_half < 700.0) & (extra <= target_delta / 2.0)
  d_use = np.where(ok, target_delta - extra, target_delta / 2.0)
  e1 = np.asarray(forward("epsilon", unt, sigma, steps, d_use, orders), np.float64)
  return np.where(ok, e1, np.inf)
