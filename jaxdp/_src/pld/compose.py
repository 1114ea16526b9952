"""T-fold composition of discretised PLDs by FFT, for :mod:`jaxdp.pld`
(private to it; the mathematics is in the docstring of :mod:`jaxdp.pld`).
The δ/ε queries on the composed windows run on the host
(:mod:`jaxdp._src.pld.readout`).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jaxdp._src.core import persist
import numpy as np

# Bits of the unrolled binary exponentiation: step counts below 2**24 share
# one program per window shape; larger ones take 32, 40, ... (a few programs).
_POWER_BITS = 24

# Round-off model of the composition (the proof is in docs/mathematics.md,
# "Round-off of the fast kernel"; u = eps/2 is the unit round-off).
# Relative error of one complex product, in units of eps: sqrt(5)·u (Brent,
# Percival & Zimmermann 2007, Thm 3.1; 2u with an FMA), rounded up to 2 eps.
_PRODUCT_ULPS = 2.0
# Error per factor of two of the FFT length, in units of u, relative to the
# L1 mass of the transformed sub-sequences. Any radix-r pass (r a power of
# two) is log2(r) levels of at most one addition and one twiddle product
# each, so a level adds at most u + sqrt(5)·u + mu of new error, and carries
# the earlier error through a twiddle of modulus <= 1 + mu: per level
# (1 + mu + eta) with eta = u + sqrt(5)u + mu. With the twiddles' absolute
# error mu <= 8u (a stated safety factor of 8 over the ~1 ulp twiddle tables
# of DUCC and cuFFT; checked against long-double references in
# tests/pld/test_pld_roundoff.py), 2·8u + 3.24u < 20u.
_LEVEL_ULPS = 20.0


def _gamma(k, unit):
  """Higham's gamma_k = k·unit / (1 - k·unit) >= (1 + unit)^k - 1 (+inf once
  k·unit >= 1/2, where no bound is claimed)."""
  ku = k * unit
  return jnp.where(ku < 0.5, ku / (1.0 - ku), jnp.inf)


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


def _modulus(z, u, up):
  """|z| rounded up or down: sqrt(re² + im²) is within (1 + u)² of it
  (IEEE products, sum and square root)."""
  mag = jnp.sqrt(z.real * z.real + z.imag * z.imag)
  return mag * (1.0 + 4.0 * u) if up else mag * (1.0 - 4.0 * u)


def _radius_power(s_hat, p_hat, e1, t, rho, u):
  """(R^T rounded up, R rounded down) for R = |ŝ| + E, without a second
  exponentiation: R^T = |ŝ|^T (1 + E/|ŝ|)^T <= |P̂| / ((1 - γ_{T-1}(ρ))(1 - T E/|ŝ|))
  where T E/|ŝ| < 1 ((1 + x)^T <= e^{Tx} <= 1/(1 - Tx); |ŝ|^T = |ŝ^T| and
  the computed power P̂ is within γ_{T-1}(ρ) of ŝ^T); and R^T <= R^j for
  any 1 <= j <= T where R <= 1 (j = the largest power of two <= min(T,
  16)). The smaller bound is taken; T = 0 gives 1."""
  r_lo = _modulus(s_hat, u, up=False) + e1
  r_up = _modulus(s_hat, u, up=True) + e1
  x = t * e1 / jnp.maximum(r_lo - e1, jnp.finfo(r_lo.dtype).tiny) * (1.0 + 4.0 * u)
  g = _gamma(jnp.maximum(t - 1.0, 0.0), rho)
  a = _modulus(p_hat, u, up=True) / ((1.0 - g) * (1.0 - x)) * (1.0 + 8.0 * u)
  a = jnp.where((x < 1.0) & (g < 1.0), a, jnp.inf)
  r2 = r_up * r_up
  r4 = r2 * r2
  r8 = r4 * r4
  r16 = r8 * r8
  b = jnp.where(t >= 16, r16, jnp.where(t >= 8, r8, jnp.where(t >= 4, r4, jnp.where(
      t >= 2, r2, r_up)))) * (1.0 + _gamma(16.0, u))
  b = jnp.where(r_up <= 1.0, b, jnp.inf)
  return jnp.where(t > 0, jnp.minimum(a, b), 1.0), r_lo


@functools.partial(persist.jit, static_argnames=("size", "bits"))
def _compose_group(p, steps, input_rel=None, *, size, bits):
  """Composes a group of windows, each row on its own (cyclically), with a
  proven bound on every composed entry's round-off.

  Row r's phase k has the one-step PMF ``p[r, k]`` on its own grid; its
  entries are folded onto the cycle of length ``size`` (a sum of reshaped
  slices, no scatter), raised to its step count in Fourier space, and the
  phases multiplied. The composed cyclic PMF is returned unrotated: window
  node j of the row sits at entry ``(shift + j) mod size`` with
  ``shift = start - Σ_k steps_k · i_lo_k`` (cyclic convolution commutes with
  shifts, so this is the same cyclic result as placing every phase at its
  true loss indices first); the host reads it there
  (:func:`jaxdp._src.pld.readout.answer`), which avoids a gather here.

  Round-off (docs/mathematics.md, "Round-off of the fast kernel"): with
  n = size = 2^L, u = eps/2, m_k the folded PMF's mass and η = _LEVEL_ULPS·u,
  every forward spectral value is within E_k = γ_{L+1}(η)·m_k (+ the
  inputs' and the fold's relative errors times m_k) of the exact DFT; with R_{k,f} >= |ŝ_{k,f}| + E_k, the
  computed product of powers differs from the exact one by at most

    D_f = Π_k R_{k,f}^{T_k} · (Σ_k T_k E_k / R_{k,f} + γ_{T-1+phases}(ρ))

  (ρ = _PRODUCT_ULPS·eps, T = Σ_k T_k), and every entry of the inverse FFT
  by at most (1/n)·(Σ_f c_f D_f + γ_{L+1}(η)·Σ_f c_f |Ŝ_f|) (c_f = 1 at DC
  and Nyquist, 2 elsewhere: the full spectrum's L1 norm).

  Args:
    p: (m, phases, width) one-step PMFs (entries >= 0), one window per row
      (pessimistic or optimistic, of any configuration and direction).
    steps: (m, phases) integer step counts, below 2**bits (count 0: padding).
    input_rel: (m,) bound on the relative error of each row's entries
      against the exact PMF the bound is about (host folding, tilting:
      :mod:`jaxdp._src.pld.tilt`); None: exact inputs.
    size: FFT length (static, a power of two).  bits: :func:`power_bits` of
      the steps (static).
  Returns:
    ``(w, node_err)``: the (m, size) composed cyclic PMFs and, per row, a
    proven bound on |ŵ_j - w_j| for every entry j, w the exact cyclic
    T-fold convolution of the row's (folded) one-step PMFs.
  """
  m, n_ph, width = p.shape
  dtype = p.dtype
  eps = jnp.finfo(dtype).eps
  u = eps / 2.0
  reps = -(-width // size)
  folded = jnp.pad(p, ((0, 0), (0, 0), (0, reps * size - width)))
  folded = folded.reshape(m, n_ph, reps, size).sum(axis=2)
  input_rel = jnp.zeros((m,), dtype) if input_rel is None else input_rel.astype(dtype)
  levels = float(size.bit_length())   # log2(size) + 1: the real transform's extra pass
  g_fft = _gamma(levels, _LEVEL_ULPS * u)   # (1 + 20u)^levels - 1
  g_dev = _gamma(float(reps - 1), u)
  g_fold = (input_rel + g_dev + input_rel * g_dev)[:, None]
  # Masses (sums of n >= 0 terms: relative error <= gamma_n), an upper bound.
  mass = jnp.sum(folded, axis=-1) * (1.0 + _gamma(float(size), u))      # (m, phases)
  e1 = (g_fft + g_fold) * mass + jnp.finfo(dtype).tiny                  # (m, phases)
  t = steps.astype(dtype)
  spec = None
  rt = None       # Π_k R_k^{T_k}, rounded up, R_k = |ŝ_k| + E_k
  ratio = 0.0     # Σ_k T_k E_k / R_k, rounded up
  rho = _PRODUCT_ULPS * eps
  for k in range(n_ph):   # phases (static count)
    sk = jnp.fft.rfft(folded[:, k], axis=-1)
    pk = _power(sk, steps[:, k:k + 1], bits)
    spec = pk if spec is None else spec * pk
    rt_k, r_lo = _radius_power(sk, pk, e1[:, k:k + 1], t[:, k:k + 1], rho, u)
    ratio = ratio + t[:, k:k + 1] * e1[:, k:k + 1] / r_lo * (1.0 + 2.0 * u)
    rt = rt_k if rt is None else rt * rt_k * (1.0 + u)
  out = jnp.fft.irfft(spec, n=size, axis=-1)
  c = jnp.full((size // 2 + 1,), 2.0, dtype).at[0].set(1.0).at[-1].set(1.0)
  t_all = jnp.sum(t, axis=-1, keepdims=True)
  d = rt * (ratio + _gamma(t_all - 1.0 + n_ph, rho)) + 4.0 * bits * jnp.finfo(dtype).tiny
  spec_l1 = jnp.sum(c * jnp.abs(spec), axis=-1) * (1.0 + 4.0 * u)
  total = jnp.sum(c * d, axis=-1) + _gamma(levels, _LEVEL_ULPS * u) * spec_l1
  # The bound's own sums (n terms >= 0) and the division by n, rounded up.
  node_err = total / size * (1.0 + _gamma(float(size) + 8.0, u))
  return out, node_err
