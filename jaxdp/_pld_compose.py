"""T-fold composition of discretised PLDs by FFT and the δ/ε queries on the
composed window, for :mod:`jaxdp.pld` (private to it; the mathematics is in
the docstring of :mod:`jaxdp.pld`).
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


def _delta_on_window(w, start, h, inf_mass, eps):
  """δ(ε) = Σ_{ℓ>ε} w(ℓ)(1 - e^{ε-ℓ}) + inf_mass, for a vector of ε."""
  loss = (start + jnp.arange(w.shape[-1])) * h

  def one(e):
    d = jnp.where(loss > e, e - loss, 0.0)
    return jnp.sum(jnp.where(loss > e, w * (-jnp.expm1(d)), 0.0)) + inf_mass

  return jax.vmap(one)(eps)


_TAIL_BLOCK = 32   # block length of the blocked suffix sums (:func:`_suffix_sums`)


def _suffix_sums(w, c):
  """T_k = Σ_{m>=k} w_m c^{m-k} for every k (0 <= c <= 1; c = 1: the reverse
  cumulative sum), blocked: within blocks of ``_TAIL_BLOCK`` nodes by a small
  triangular matrix product, across blocks by the same function on the
  blocks' discounted sums with factor c^B (recursively; about log_B n levels).

  Every coefficient is a power of c <= 1, so nothing overflows for any window
  length or grid interval (an earlier version referred all losses to one
  middle point and overflowed ``exp`` on windows spanning more than ~700
  loss units, which under-reported ε by orders of magnitude at small σ).
  Powers that underflow drop terms below 1e-308 of their w_m (far below the
  round-off allowances). It replaced an associative scan whose compilation
  took ~1 s per window length, for the same values to round-off (a few ulps
  times the block depth).
  """
  n = w.shape[-1]
  b = min(_TAIL_BLOCK, n)
  k = jnp.arange(b)
  powers = jnp.where(k[None, :] >= k[:, None],
                     jnp.power(c, jnp.maximum(k[None, :] - k[:, None], 0).astype(w.dtype)), 0.0)
  if n <= b:
    return powers @ w
  nb = -(-n // b)
  x = jnp.pad(w, (0, nb * b - n)).reshape(nb, b)
  inner = x @ powers.T                                   # inner[j, i] = Σ_{i'>=i} x[j,i'] c^{i'-i}
  later = _suffix_sums(inner[:, 0], jnp.power(c, b))     # tails from each block's start
  carry = jnp.concatenate([later[1:], jnp.zeros((1,), w.dtype)])
  out = inner + carry[:, None] * jnp.power(c, (b - k).astype(w.dtype))[None, :]
  return out.reshape(-1)[:n]


def _next(x):
  """x shifted one node down: x_{k+1}, 0 at the top."""
  return jnp.concatenate([x[1:], jnp.zeros((1,), x.dtype)])


def _discounted_tail(w, c):
  """S_k = Σ_{m>k} w_m c^{m-k} for every k (0 < c <= 1) = c·T_{k+1}
  (:func:`_suffix_sums`)."""
  return c * _next(_suffix_sums(w, c))


def _grid_deltas(w, h):
  """(D, S) on the window nodes: D_k = Σ_{m>k} w_m (1 - e^{-(m-k)h}) (δ at
  node k without the infinity atom) and S_k = Σ_{m>k} w_m e^{-(m-k)h}.

  D_k - D_{k+1} = (1 - e^{-h})(w_{k+1} + S_{k+1}) = (e^h - 1) S_k, so D is a
  reverse cumulative sum of non-negative terms when w >= 0 (no cancellation).
  """
  s = _discounted_tail(w, jnp.exp(-h))
  # (1 - e^{-h})(w_{k+1} + S_{k+1}): finite for every h (e^h - 1 overflows
  # for h > 709, and inf·0 would be NaN).
  t = -jnp.expm1(-h) * (_next(w) + _next(s))
  d = _suffix_sums(t, jnp.ones((), t.dtype))
  return d, s


def _epsilon_on_window(w, start, h, inf_mass, target, lower=False):
  """Smallest ε with δ(ε) <= target (exact on the piecewise-exponential δ).

  δ at the nodes comes from :func:`_grid_deltas`; the largest node k with
  δ(ε_k) > target is found by a reduction, and on (ε_k, ε_k + h]
  δ(ε_k + x) = δ(ε_k) - (e^x - 1) S_k is solved in closed form,
  x = log1p((δ(ε_k) - target) / S_k).  For the upper bound the node values
  are inflated by a relative ``64 · size · eps_machine`` (summation
  round-off) and the result nudged up; for the lower bound both go down.
  """
  size = w.shape[-1]
  d, s = _grid_deltas(w, h)
  fp = jnp.finfo(w.dtype).eps
  infl = 64.0 * size * fp
  d = d * (1.0 - infl if lower else 1.0 + infl) + inf_mass
  big = d > target
  k = jnp.max(jnp.where(big, jnp.arange(size), -1))
  kk = jnp.maximum(k, 0)
  # k = -1: δ at the first node is already <= target.  The upper bound is
  # then the first node (δ is non-increasing); the lower bound knows nothing
  # better than -inf (clipped to 0 by the caller).
  dk = d[kk]
  sk = s[kk]
  ratio = (dk - target) / jnp.where(sk > 0, sk, 1.0)
  x = jnp.where(sk > 0, jnp.log1p(jnp.maximum(ratio, 0.0)), h)
  eps = (start + kk) * h + jnp.clip(x, 0.0, h)
  nudge = 4.0 * fp * jnp.maximum(jnp.abs(eps), 1.0)
  eps = eps - nudge if lower else eps + nudge
  first = start * h
  eps = jnp.where(k < 0, -jnp.inf if lower else first, eps)
  eps = jnp.where(inf_mass > target, jnp.inf, eps)
  # A non-finite composed PMF must not turn into a number (NaN compares
  # False above and would select the first node): NaN reaches the guards.
  return jnp.where(jnp.all(jnp.isfinite(w)) & ~jnp.isnan(inf_mass), eps, jnp.nan)



def _compose_batch(p, i_lo, steps, start, nbits, *, size):
  return jax.vmap(functools.partial(_compose, size=size),
                  in_axes=(0, 0, 0, 0, None))(p, i_lo, steps, start, nbits)


def _delta_batch(w, start, h, inf_mass, eps):
  return jax.vmap(_delta_on_window)(w, start, h, inf_mass, eps)


def _epsilon_batch(w, start, h, inf_mass, target, lower=False):
  fn = functools.partial(_epsilon_on_window, lower=lower)
  return jax.vmap(jax.vmap(fn, in_axes=(None, None, None, None, 0)))(
      w, start, h, inf_mass, target)


def _roundoff_allowance(w):
  """Absolute allowance for FFT round-off in δ computed from a composed PMF.

  Empirical, not certified: the size of the window times the round-off
  level of one entry, estimated as the larger of the most negative entry
  (exact values are >= 0) and ``eps_machine · max(w)``, times 4.
  """
  level = jnp.maximum(-jnp.min(w, axis=-1), 0.0)
  level = jnp.maximum(level, jnp.finfo(w.dtype).eps * jnp.max(w, axis=-1))
  return 4.0 * w.shape[-1] * level


@functools.partial(jax.jit, static_argnames=("size", "want_epsilon"))
def _finish(p, i_lo, steps, start, nbits, h, inf_mass, queries, wrap, shift, *, size,
            want_epsilon):
  """Composes a group of configurations and answers their queries (one call).

  Args:
    p: (2m, phases, width) one-step PMFs, the m pessimistic rows then the m
      optimistic ones.  i_lo, steps: (m, phases).  start: (m,) window starts.
    nbits: (phases,) bits of each phase's largest step count.  h, inf_mass: (m,).
    queries: (m, K).  wrap: (m,) the Chernoff mass that may have wrapped
      from below the window to its top (_TAIL per phase).  shift: (2, m)
      loss shifts of host-discretised phases (:mod:`jaxdp._pld_extra`): the
      pessimistic composed losses may be up to shift[0] above their nodes,
      the optimistic ones are at least shift[1] above theirs.
  Returns:
    (upper, lower) of shape (m, K).
  """
  m = start.shape[0]
  lo2 = jnp.concatenate([i_lo, i_lo])
  st2 = jnp.concatenate([steps, steps])
  w, power_err = _compose_batch(p, lo2, st2, jnp.concatenate([start, start]), nbits, size=size)
  w_p = jnp.maximum(w[:m], 0.0)
  w_o = w[m:]
  # Lower bound: subtract the mass that may have wrapped from below the
  # window to its top and the FFT round-off allowances (the entries' level
  # and the powers' amplification, see _compose).
  slack = _roundoff_allowance(w_o) + power_err[m:] + wrap
  # Upper bound: the same round-off allowance is added (booked with the
  # infinity atom): clipping the negative FFT noise to zero can otherwise
  # drop up to N·|noise| of δ, which matters at δ below ~1e-9 on windows of
  # 10^6 points.  Where the allowance alone exceeds the target δ, ε is +inf
  # and jaxdp.epsilon returns the RDP bound.
  inf_up = inf_mass + _roundoff_allowance(w[:m]) + power_err[:m]
  zero = jnp.zeros_like(inf_mass)
  if want_epsilon:
    up = _epsilon_batch(w_p, start, h, inf_up, queries) + shift[0][:, None]
    lo = _epsilon_batch(w_o, start, h, zero, queries + slack[:, None], lower=True)
    lo = lo + shift[1][:, None]
  else:
    up = _delta_batch(w_p, start, h, inf_up, queries - shift[0][:, None])
    lo = _delta_batch(w_o, start, h, zero, queries - shift[1][:, None]) - slack[:, None]
  return up, lo

