"""Certified PLD interval of balls-in-bins sampling (random allocation), issue 38.

A run of ``steps`` steps of a :func:`jaxdp.sampling.balls_in_bins` sampler with
k = ``sampler.steps_per_epoch`` steps per epoch (never recomputed) is E = steps // k
whole epochs and a partial epoch of m = steps % k steps. Each epoch is one
random allocation; its certified laws come, by default, from the convex-order
construction :func:`jaxdp._src.mechanisms.allocation_cx.epoch_pairs` (upper:
a mean-preserving spread of S = k·e^L onto the grid e^{jη}, handed to the
composition as the pessimistic PMF; lower: cells merged to their means, a
:class:`DiscretePair` that the engine discretises optimistically; both second
order in η), or from the first-order laws of
:func:`jaxdp._src.mechanisms.allocation.epoch_laws` (losses rounded up/down,
``method="first_order"`` of :func:`_phases`), both directions. Epochs are adaptively composed (the dominating pair of one
epoch holds for adaptively chosen steps: Chua et al., AISTATS 2025; Feldman &
Shenfeld 2026), so each direction's laws are composed by the general engine's
FFT composition (:mod:`jaxdp._src.pld.general_compose`: certified round-off,
Chernoff-cut tails booked at +∞ on the upper side) and read out by
:mod:`jaxdp._src.pld.general_readout`; the answer is the max over the two
directions, on each side. The upper laws are discretised already (every loss
a multiple of the grid step η), so they are handed to the composition
unchanged as its pessimistic PMFs, the lower laws as its optimistic ones.

Grid step η (``value_discretization_interval``; automatic: ``_AUTO_ETA``·min(1, 1.1/σ)
·min(1, (234/k)^{1/4}), so that a law has ~10^4 cells whatever σ). The upper
law is composed on the grid η itself; the lower law on η/r, r the smallest
keeping its rounding (< η/r per epoch) below 0.125% of ε, at most
round(η/2.5e-5) and 80 (:func:`_lower_ratio`).
Convex-order laws: the width is second order (MNIST-like, 60 epochs of
k = 234, σ = 1.1, δ = 1e-5: [2.3367, 2.3418], 0.22% wide at the automatic
η = 4e-3 with the merged law on 8e-3, ~0.7 s on the shared 2-core CPU;
benchmarks/allocation.py); the upper end carries the dropped tails at +∞
and the round-off as a loss shift (module docstring of ``allocation_cx``).
First-order laws: about (E + 1)·(2·log₂k + 3)·η (every log-sum-exp rounding
moves a loss by at most η; 24% at η = 1e-3 on the same run). The number of atoms of a law is about
(2z/σ + log k)/η for the first-order laws (z ≈ 10.6 standard deviations for the
truncated mass 1e-25) and at most (2z/σ + 1/σ²)/η for the convex-order ones
(:func:`_cx_size`; z = −Φ⁻¹(ζ) + 1/2 for their tail cut ζ, :func:`_zeta`, which
keeps their +∞ masses below 1e-4 of the smallest δ asked for);
a law beyond :data:`_MAX_ATOMS` (:data:`_MAX_CX_ATOMS`) atoms, or a composed window beyond the
engine's cap, coarsens an automatic η (doubling) and raises ``ValueError``
naming ``value_discretization_interval`` for a given one.

Capacity below N: the coupling of :mod:`jaxdp._src.kernels.bins_coupling`,
δ_trunc(ε) <= δ_untrunc(ε) + (1 + e^ε)·p for the upper end and
δ_trunc(ε) >= δ_untrunc(ε) − (1 + e^ε)·p for the lower end (as for truncated
Poisson in :mod:`jaxdp._src.accounting.sampler_forward`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special as _sps

from jaxdp._src.core import numerics as nx
from jaxdp._src.mechanisms import allocation as _allocation
from jaxdp._src.mechanisms import allocation_cx as _allocation_cx
from jaxdp._src.mechanisms.discretise import LossPMF
from jaxdp._src.pld import general_compose as _general_compose
from jaxdp._src.pld.general_compose import TooLarge, compose
from jaxdp._src.pld.general_readout import delta_of, epsilon_of

__all__ = ["is_allocation", "interval", "pld_bounds", "tight_upper"]

_KAPPA = 1e-22
_AUTO_ETA = 4e-3           # default grid step of the loss (MNIST-like: 0.22% wide, ~0.7 s; benchmarks/allocation.py)
_ETA_LIMIT = 0.05          # coarsest automatic grid step
_MAX_ATOMS = 1 << 21       # largest one-epoch law (first-order laws)
_MAX_CX_ATOMS = 1 << 16    # largest convex-order law (its sums are dense: O(n²))
_COMPOSE_RATIO = 80       # lower side's composition grid η/r for the convex-order laws (the lower law
_COMPOSE_GRID = 2.5e-5    # rounds down to it): r <= round(η / 2.5e-5) clipped to [1, 80]
_CX_LOW_RATIO = 2.0       # the merged (lower) law on the grid 2η: second order, O(n²) merges
_LOWER_SLACK = 1.25e-3    # the lower law's rounding to the composition grid: <= 0.125% of ε


def is_allocation(sampler) -> bool:
  """True for a :func:`jaxdp.sampling.balls_in_bins` sampler."""
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  return isinstance(sampler, _sampling.BallsInBinsSampler)


def _pmfs(laws, direction, r=1):
  """(pessimistic, optimistic) LossPMF of one direction of an epoch's laws."""
  if isinstance(laws, _allocation_cx.EpochPairs):
    return _cx_pmfs(laws, direction, r)
  up = getattr(laws, direction + "_up")
  low = getattr(laws, direction + "_low")
  return (LossPMF(up.lo, up.p, float(up.tail), 0.0),
          LossPMF(low.lo, low.p, 0.0, 0.0))


def _cx_pmfs(ep, direction, r):
  """(pessimistic, optimistic) LossPMF of the convex-order laws on the
  composition grid h = η/r: the spread law exactly (its atoms are on the
  grid L = j·η; P-masses e^L·q for remove), the merged law's exact losses
  rounded down to the grid (each epoch's loss moves down by < h)."""
  u = 4 * np.finfo(np.float64).eps
  h = ep.eta / r
  ell = (ep.lo_up + np.arange(ep.q_up.size)) * ep.eta
  if direction == "remove":
    up_p, up_lo = ep.q_up * np.exp(ell) * (1 + u), ep.lo_up
    inf = ep.inf_remove
    low_p, low_loss = ep.q_low * np.exp(ep.loss_low) * (1 - u), ep.loss_low
  else:
    up_p, up_lo = ep.q_up_add[::-1] * (1 + u), -(ep.lo_up_add + ep.q_up_add.size - 1)
    inf = ep.inf_add
    low_p, low_loss = ep.q_low * (1 - u), -ep.loss_low
  fine = np.zeros((up_p.size - 1) * r + 1)
  fine[::r] = up_p
  pess = LossPMF(up_lo * r, fine, float(inf), ep.tau)
  idx = np.floor(low_loss / h).astype(np.int64)
  lo = int(idx.min())
  opt = LossPMF(lo, np.bincount(idx - lo, weights=low_p), 0.0, ep.tau)
  return pess, opt


def _zeta(kind, k, steps, value):
  """Tail cut of the convex-order laws: their +∞ masses (about 4·k·ζ per epoch,
  :func:`jaxdp._src.mechanisms.allocation_cx.epoch_pairs`; 8·k·ζ allowed here)
  stay below 1e-4 of the smallest δ asked for (``ZETA`` = 1e-18 at most; for a
  δ(ε) query, the +∞ mass, ~4·k·E·1e-18, adds to δ as it is)."""
  zeta = _allocation_cx.ZETA
  if kind == "epsilon":
    epochs = int(steps) // int(k) + 1
    zeta = min(zeta, 1e-4 * float(np.min(value)) / (8.0 * int(k) * epochs))
  return max(zeta, 1e-300)


def _cx_size(sigma, eta, zeta):
  """Atoms of the widest convex-order law: a sum of t W's has log S in
  [log t + min log W, log t + max log W], a range of 2z/σ + 1/σ² (the kept
  Gaussian range of log W, z = −Φ⁻¹(ζ) + 1/2, both sides' tails)."""
  zc = -float(_sps.ndtri(zeta)) + 0.5
  return int((2.0 * zc / sigma + 1.0 / sigma ** 2) / eta) + 16


def _phases(sigma, k, steps, eta, method="cx", zeta=None):
  """[(epoch laws, count)] of a run: E whole epochs, then the partial one."""
  whole, m = divmod(int(steps), int(k))
  zeta = _allocation_cx.ZETA if zeta is None else zeta
  if method == "cx":
    size, cap = _cx_size(sigma, eta, zeta), _MAX_CX_ATOMS
  else:
    size, cap = _allocation.law_size(sigma, k, eta), _MAX_ATOMS
  if size > cap:
    raise TooLarge(size, cap)
  cache = {}
  if method == "cx":
    make = lambda mm: _allocation_cx.epoch_pairs(sigma, k, mm, eta, _CX_LOW_RATIO * eta, cache, zeta)
  else:
    make = lambda mm: _allocation.epoch_laws(sigma, k, mm, eta, cache)
  out = []
  if whole:
    out.append((make(k), whole))
  if m:
    out.append((make(m), 1))
  return out


def _compose_read(kind, phases, value, eta):
  """(lower, upper): each side's bound, max over the two directions.

  Convex-order laws: the upper (spread) law lies on multiples of η, so its side
  is composed on the grid η itself; only the lower law, rounded down to the
  composition grid, needs the fine grid η/r (the same PMFs as one composition
  on η/r would use: the pessimistic result is the same law on a coarser grid,
  and the window and tilt of the optimistic one come from the pessimistic
  PMFs on its own grid, as in :func:`jaxdp._src.pld.general_compose.compose`).
  The two directions run on threads, the upper side first: its ε sets the
  lower side's grid (:func:`_lower_ratio`)."""
  value = np.asarray(value, np.float64)
  if kind == "epsilon":
    kappa = max(min(_KAPPA, 1e-6 * float(value.min())), 1e-300)
    focus = dict(log_delta=math.log(float(value.min())))
  else:
    kappa = _KAPPA
    fin = value[np.isfinite(value)]
    focus = dict(eps=float(fin.min()) if fin.size else math.inf)
  counts = [c for _, c in phases]
  cx = isinstance(phases[0][0], _allocation_cx.EpochPairs)
  read = epsilon_of if kind == "epsilon" else delta_of

  def one(job):   # (direction, side, r): side 0 pessimistic (upper), 1 optimistic (lower)
    direction, side, rr = job
    h = eta / rr
    pmfs = [_pmfs(laws, direction, rr) for laws, _ in phases]
    comp, shift = _one_side(pmfs, counts, h, kappa, focus, side)
    return np.asarray(read(comp, h, value, side == 0, shift), np.float64).reshape(value.shape)

  if not cx:
    res = nx.thread_map(one, [(d, s, 1) for d in ("remove", "add") for s in (0, 1)], jax_work=False)
    up, lo = np.maximum(res[0], res[2]), np.maximum(res[1], res[3])
  else:
    up = np.maximum(*nx.thread_map(one, [("remove", 0, 1), ("add", 0, 1)], jax_work=False))
    r = _lower_ratio(kind, value, up, eta, sum(counts))
    lo = np.maximum(*nx.thread_map(one, [("remove", 1, r), ("add", 1, r)], jax_work=False))
  lo = np.where(np.isnan(lo), 0.0, lo)
  return np.minimum(lo, up), up


def _lower_ratio(kind, value, up, eta, epochs):
  """r of the lower side's composition grid η/r (convex-order laws). Each epoch's
  merged losses are rounded down to the grid, which lowers the lower ε by up to
  epochs·η/r: r is the smallest with epochs·η/r <= ``_LOWER_SLACK``·ε (ε: the
  upper end, or the smallest ε asked for a δ), at most ``_COMPOSE_RATIO`` and
  round(η/``_COMPOSE_GRID``) (MNIST-like: r = 80, as with a fixed ratio)."""
  cap = max(1, min(_COMPOSE_RATIO, round(eta / _COMPOSE_GRID)))
  ref = up if kind == "epsilon" else value
  ref = ref[np.isfinite(ref)]
  if not ref.size or float(ref.min()) <= 0:
    return cap
  return int(min(cap, max(1, math.ceil(epochs * eta / (_LOWER_SLACK * float(ref.min()))))))


def _one_side(pmfs, counts, h, kappa, focus, side):
  """One side's composed PMF and loss shift (see :func:`compose`)."""
  out = compose(pmfs, counts, h, kappa, focus, sides=(side,))
  return out[side], out[2]


def interval(kind, sigma, k, steps, value, value_discretization_interval=None):
  """Certified (lower, upper) ε at δ = ``value`` (or δ at ε) of ``steps`` steps
  of random allocation with k steps per epoch and noise multiplier σ.

  Args:
    kind: "epsilon" or "delta".
    sigma: σ > 0 (a float); k: steps per epoch >= 1; steps: whole number >= 0.
    value: δ targets in (0, 1] or ε >= 0 (array).
    value_discretization_interval: the grid step η of the loss; None: automatic.

  Returns:
    ``(lower, upper)`` float64 arrays of ``value``'s shape.

  Raises:
    ValueError: naming ``value_discretization_interval`` where a given η needs a
      grid beyond the memory budget.
  """
  value = np.asarray(value, np.float64)
  if int(steps) == 0:
    z = np.zeros(value.shape)
    return z, z
  automatic = value_discretization_interval is None
  # automatic: the grid follows the spread of log W (standard deviation 1/σ),
  # so that a law has about 19/(σ·η) <= 10^4 cells at any σ, and shrinks as
  # (234/k)^{1/4} for larger k (a spread adds ~η²·2^t/(8k) of relative variance at
  # doubling level t against the epoch's ~1/(σ²k): k = 10^4, σ = 1, 3 epochs is
  # 6% wide at 4e-3, 0.6% at 1.2e-3 (18 s), 0.2% at 6e-4 (51 s))
  eta = (_AUTO_ETA * min(1.0, 1.1 / float(sigma)) * min(1.0, (234.0 / float(k)) ** 0.25)
         if automatic else float(value_discretization_interval))
  while True:
    try:
      phases = _phases(float(sigma), int(k), int(steps), eta, zeta=_zeta(kind, k, steps, value))
      return _compose_read(kind, phases, value, eta)
    except TooLarge as e:
      if not automatic:
        raise ValueError(
            f"value_discretization_interval={eta!r} needs a grid beyond the memory budget "
            f"({e} points; at most {_MAX_ATOMS} per epoch law and "
            f"{_general_compose.MAX_WINDOW} composed); use a larger interval.") from None
      if eta >= _ETA_LIMIT:
        return np.zeros(value.shape), np.full(value.shape, np.inf if kind == "epsilon" else 1.0)
      eta = min(2.0 * eta, _ETA_LIMIT)


def _untruncated_bounds(kind, sampler, sigma, steps, value, vdi):
  """(lower, upper) of the untruncated allocation, one (σ, steps) at a time."""
  lo, up = np.zeros(value.shape), np.zeros(value.shape)
  k = int(sampler.steps_per_epoch)
  keys = np.stack([sigma.ravel(), steps.ravel()], axis=1)
  flat_v = value.ravel()
  lo_f, up_f = lo.ravel(), up.ravel()
  for key in np.unique(keys, axis=0):
    sel = np.flatnonzero((keys[:, 0] == key[0]) & (keys[:, 1] == key[1]))
    l, u = interval(kind, float(key[0]), k, int(key[1]), flat_v[sel], vdi)
    lo_f[sel], up_f[sel] = l, u
  return lo_f.reshape(value.shape), up_f.reshape(value.shape)


def _overflow(sampler, steps):
  from jaxdp._src.kernels import bins_coupling as _bins_coupling  # pylint: disable=g-import-not-at-top
  if sampler.capacity >= sampler.dataset_size:
    return np.zeros(np.shape(steps))
  return np.broadcast_to(_bins_coupling._overflow(sampler, steps), np.shape(steps))  # pylint: disable=protected-access


def pld_bounds(kind, sampler, sigma, steps, value, value_discretization_interval=None):
  """Certified (lower, upper) of a balls-in-bins run (arrays of one shape).

  Untruncated: :func:`interval` per configuration. Capacity < N: the upper end
  adds the overflow term (1 + e^ε)·p to δ (for ε: the untruncated ε at
  δ − (1 + e^ε)·p, solved as in :mod:`jaxdp._src.kernels.bins_coupling`), the
  lower end subtracts it.

  Raises:
    ValueError: for a relation other than add/remove (no pair yet).
  """
  if getattr(sampler, "relation", "add_remove") != "add_remove":
    raise ValueError(f"sampler: no tight (PLD) interval for {sampler!r} under "
                     f"{sampler.relation!r} yet; use accountant='rdp'.")
  sigma, steps, value = (np.asarray(a, np.float64) for a in (sigma, steps, value))
  vdi = value_discretization_interval
  p = _overflow(sampler, steps)
  if not np.any(p > 0):
    return _untruncated_bounds(kind, sampler, sigma, steps, value, vdi)
  from jaxdp._src.kernels import bins_coupling as _bins_coupling  # pylint: disable=g-import-not-at-top

  def forward(kind_, sampler_, sigma_, steps_, value_, orders_):
    del sampler_, orders_
    return _untruncated_bounds(kind_, sampler, np.asarray(sigma_, np.float64),
                               np.asarray(steps_, np.float64), np.asarray(value_, np.float64), vdi)[1]

  fn = _bins_coupling.epsilon if kind == "epsilon" else _bins_coupling.delta
  up = np.asarray(fn(forward, sampler, sigma, steps, value, None), np.float64)
  with np.errstate(over="ignore"):
    if kind == "delta":
      lo_u, _ = _untruncated_bounds(kind, sampler, sigma, steps, value, vdi)
      lo = np.maximum(lo_u - np.nextafter((1.0 + np.exp(value)) * p, np.inf), 0.0)
      return np.minimum(lo, up), up
    extra = np.nextafter((1.0 + np.exp(np.minimum(up, 700.0))) * p, np.inf)
  ok = np.isfinite(up) & (value + extra < 1.0)
  lo_u, _ = _untruncated_bounds(kind, sampler, sigma, steps, np.where(ok, value + extra, value), vdi)
  lo = np.where(ok, np.minimum(lo_u, up), 0.0)
  return lo, up


def tight_upper(kind, sampler, sigma, steps, value):
  """Upper end of :func:`pld_bounds` (automatic grid)."""
  return pld_bounds(kind, sampler, sigma, steps, value)[1]
