"""T-fold composition of discretised PLDs by FFT, for :mod:`jaxdp.pld`
(private to it; the mathematics is in the docstring of :mod:`jaxdp.pld`).
The δ/ε queries on the composed windows run on the host
(:mod:`jaxdp._pld_readout`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# Bits of the unrolled binary exponentiation: step counts below 2**24 share
# one program per window shape; larger ones take 32, 40, ... (a few programs).
_POWER_BITS = 24

# Normwise relative error of one complex product, in units of eps_machine:
# sqrt(5)·u with u = eps/2 (Brent, Percival & Zimmermann 2007, Thm 3.1),
# rounded up to 2 (an FMA-contracted product is within 2u = eps).
_PRODUCT_ULPS = 2.0


def power_bits(steps) -> int:
  """Static bit count of :func:`_compose_group` for step counts ``steps``: the
  largest count's bit length rounded up to _POWER_BITS, 32, 40, ..."""
  top = max(int(np.max(steps, initial=1)), 1).bit_length()
  return max(_POWER_BITS, -(-top // 8) * 8)


def _power(z, n, bits):
  """z ** n elementwise for integers 0 <= n < 2**bits, by binary
  exponentiation unrolled over ``bits`` (static) bits.

  Unrolled, the squarings and the conditional products fuse into one pass
  over the spectrum; a ``fori_loop`` over a traced bit count (before) made
  one pass per bit, measured 1.3-1.8x slower on the 2-core CPU (compile
  times about equal). Bits above n's select nothing; their squarings stay
  bounded (|z| <= 1 for a PMF of mass <= 1, underflowing to 0 below 1).
  """
  acc = jnp.ones_like(z)
  base = z
  for k in range(bits):
    acc = jnp.where(((n >> k) & 1) == 1, acc * base, acc)
    if k + 1 < bits:
      base = base * base
  return acc


@functools.partial(jax.jit, static_argnames=("size", "bits"))
def _compose_group(p, steps, *, size, bits):
  """Composes a group of windows, each row on its own (cyclically).

  Row r's phase k has the one-step PMF ``p[r, k]`` on its own grid; its
  entries are folded onto the cycle of length ``size`` (a sum of reshaped
  slices, no scatter), raised to its step count in Fourier space, and the
  phases multiplied. The composed cyclic PMF is returned unrotated: window
  node j of the row sits at entry ``(shift + j) mod size`` with
  ``shift = start - Σ_k steps_k · i_lo_k`` (cyclic convolution commutes with
  shifts, so this is the same cyclic result as placing every phase at its
  true loss indices first); the host reads it there
  (:func:`jaxdp._pld_readout.answer`), which avoids a gather here.

  Args:
    p: (m, phases, width) one-step PMFs, one window per row (pessimistic or
      optimistic, of any configuration and direction).  steps: (m, phases)
      integer step counts, below 2**bits (count 0: padding).
    size: FFT length (static).  bits: :func:`power_bits` of the steps (static).
  Returns:
    ``(w, power_err, level)``: the (m, size) composed cyclic PMFs; an
    allowance for the round-off that the powers add to sums of ``w``: a
    relative error e of a spectral value becomes ~T·e in its T-th power
    (each squaring doubles the relative error, each product adds at most
    ``_PRODUCT_ULPS`` eps), and the inverse FFT spreads the spectrum's error
    over the window, so the summed absolute error of the composed PMF is at
    most Σ_f |Δspec_f| <= c·T·eps·Σ_f |spec_f| (twice the half spectrum);
    and the FFT round-off level of each row, the larger of its most negative
    entry (exact values are >= 0) and eps times its largest one.
  """
  m, n_ph, width = p.shape
  reps = -(-width // size)
  folded = jnp.pad(p, ((0, 0), (0, 0), (0, reps * size - width)))
  folded = folded.reshape(m, n_ph, reps, size).sum(axis=2)
  spec = None
  for k in range(n_ph):   # phases (static count)
    sk = _power(jnp.fft.rfft(folded[:, k], axis=-1), steps[:, k:k + 1], bits)
    spec = sk if spec is None else spec * sk
  out = jnp.fft.irfft(spec, n=size, axis=-1)
  eps = jnp.finfo(out.dtype).eps
  spec_l1 = 2.0 * jnp.sum(jnp.abs(spec), axis=-1)
  power_err = _PRODUCT_ULPS * jnp.sum(steps, axis=-1).astype(out.dtype) * eps * spec_l1
  level = jnp.maximum(jnp.maximum(-jnp.min(out, axis=-1), 0.0), eps * jnp.max(out, axis=-1))
  return out, power_err, level
