"""T-fold composition of discretised PLDs by FFT, for :mod:`jaxdp.pld`
(private to it; the mathematics is in the docstring of :mod:`jaxdp.pld`).
The δ/ε queries on the composed windows run on the host
(:mod:`jaxdp._pld_readout`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def _complex_power(z, n, nbits):
  """z ** n for integer n >= 0 (traced) by binary exponentiation.

  ``nbits`` (traced, unbatched) is the number of bits to visit: at least the
  bit length of n (the caller passes the largest one of its batch).
  """

  def body(k, carry):
    acc, base = carry
    bit = (n >> k) & 1
    acc = jnp.where(bit == 1, acc * base, acc)
    return acc, base * base

  acc0 = jnp.ones_like(z)
  acc, _ = jax.lax.fori_loop(0, nbits, body, (acc0, z))
  return acc


def _compose(p, i_lo, steps, start, nbits, *, size):
  """Composes phases on a window of ``size`` loss indices starting at ``start``.

  Each phase's PMF is folded onto the cycle of length ``size`` from its own
  grid start (a sum of reshaped slices, no scatter); the composed cyclic PMF is
  then read from ``start - Σ_k steps_k · i_lo_k`` (cyclic convolution commutes
  with shifts, so this is the same cyclic result as placing every phase at its
  true loss indices first).

  Args:
    p: (phases, n_pad) one-step PMFs; phase k's entry j is loss (i_lo[k] + j)·h.
    i_lo: (phases,) int.  steps: (phases,) int.  start: int window start.
    nbits: (phases,) bits visited by each phase's binary exponentiation
      (>= the bit length of its steps; traced, the same for every row, so a
      phase of 10 steps next to one of 5000 squares 4 times, not 13).
  Returns:
    ``(w, power_err)``: the (size,) composed PMF of the window and an
    allowance for the round-off that the powers add to sums of ``w``.
  """
  n_pad = p.shape[-1]
  reps = -(-n_pad // size)

  def spectrum(pk, t, bits):
    folded = jnp.pad(pk, (0, reps * size - n_pad)).reshape(reps, size).sum(axis=0)
    return _complex_power(jnp.fft.rfft(folded), t, bits)

  spec = spectrum(p[0], steps[0], nbits[0])
  for k in range(1, p.shape[0]):   # phases (static count)
    spec = spec * spectrum(p[k], steps[k], nbits[k])
  out = jnp.fft.irfft(spec, n=size)
  shift = start - jnp.sum(steps * i_lo)
  idx = jnp.mod(shift + jnp.arange(size), size)
  # Round-off of the powers: a relative error e of a spectral value becomes
  # T·e in its T-th power, and the inverse FFT spreads the spectrum's error
  # over the window: the summed absolute error of the composed PMF is at most
  # Σ_f |Δspec_f| ≈ T·c·eps·Σ_f |spec_f| (2·Σ over the half spectrum).
  spec_l1 = 2.0 * jnp.sum(jnp.abs(spec))
  power_err = jnp.sum(steps).astype(out.dtype) * jnp.finfo(out.dtype).eps * spec_l1
  return out[idx], power_err


def _compose_batch(p, i_lo, steps, start, nbits, *, size):
  return jax.vmap(functools.partial(_compose, size=size),
                  in_axes=(0, 0, 0, 0, None))(p, i_lo, steps, start, nbits)


@functools.partial(jax.jit, static_argnames=("size",))
def _compose_group(p, i_lo, steps, start, nbits, *, size):
  """Composes a group of windows, each row on its own.

  The δ/ε read-out of the composed windows runs on the host
  (:func:`jaxdp._pld_readout.answer`): it compiles nothing, so a new window
  length costs only this small program.

  Args:
    p: (m, phases, width) one-step PMFs, one window per row (pessimistic or
      optimistic, of any configuration and direction: each row is composed
      on its own).  i_lo, steps: (m, phases) of each row.
    start: (m,) window starts.  nbits: (phases,) bits of each phase's
      largest step count.
  Returns:
    ``(w, power_err, level)``: the (m, size) composed windows, the powers'
    round-off allowance of each row (:func:`_compose`) and its FFT round-off
    level, the larger of the most negative entry (exact values are >= 0) and
    ``eps_machine`` times the largest one.
  """
  w, power_err = _compose_batch(p, i_lo, steps, start, nbits, size=size)
  level = jnp.maximum(jnp.maximum(-jnp.min(w, axis=-1), 0.0),
                      jnp.finfo(w.dtype).eps * jnp.max(w, axis=-1))
  return w, power_err, level
