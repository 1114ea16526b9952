"""What every sampler of :mod:`jaxdp._src.samplers.sampling` shares.

Host-side validation of sizes, rates and relations (``check_*``,
``set_fields``); the one epochs rule (:func:`poisson_steps_per_epoch`,
:func:`epochs_to_steps`: E epochs are E × steps_per_epoch steps, rounded
up); and the random subsets the samplers draw (``draw_binomial``: chunked
binomial counts; ``draw_distinct``/``draw_prefix``: distinct indices by
draw-and-redraw or a permutation prefix; ``epoch_step_key``). The two epoch
functions are re-exported by :mod:`jaxdp._src.samplers.sampling` (and
``jaxdp.sampling``); split out of it (moves only).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.core import persist
from jaxdp._src import events as _events


# Indices are int32: datasets up to 2**31 - 1 examples.
MAX_DATASET_SIZE = 2 ** 31 - 1
# Binomial draws are split into chunks whose counts float32 represents exactly.
_BINOMIAL_CHUNK = 2 ** 24
# Draw-and-redraw subset sampling is used while size/n <= 1/_SPARSE_RATIO;
# beyond that a full permutation (O(n log n), then n <= _SPARSE_RATIO * size).
_SPARSE_RATIO = 4


# --------------------------------------------------------------------------
# host-side validation
# --------------------------------------------------------------------------


def check_whole(name: str, value: Any, low: int = 1, high: Optional[int] = None) -> int:
  """A concrete whole number in [low, high] as a Python int, else ValueError."""
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be a concrete number (samplers fix shapes on the "
                     f"host), not a traced value; found {value!r}.")
  if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
    raise ValueError(f"{name} must be a whole number; found {value!r}.")
  _numerics.check_array(name, value, low=float(low),
                        high=None if high is None else float(high), integer=True)
  return int(value)


def check_rate(name: str, value: Any) -> float:
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be a concrete number, not a traced value; found {value!r}.")
  if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
    raise ValueError(f"{name} must be a number in [0, 1]; found {value!r}.")
  _numerics.check_array(name, value, low=0.0, high=1.0)
  return float(value)


def check_relation(value: Any) -> str:
  if not isinstance(value, str) or value not in _events.RELATIONS:
    raise ValueError(f"relation must be one of {', '.join(map(repr, _events.RELATIONS))}; "
                     f"found {value!r}.")
  return value


def check_sizes(dataset_size, batch_size) -> Tuple[int, int]:
  n = check_whole("dataset_size", dataset_size, 1, MAX_DATASET_SIZE)
  b = check_whole("batch_size", batch_size, 1)
  if b > n:
    raise ValueError(f"batch_size must be <= dataset_size = {n}; found {b}.")
  return n, b


def set_fields(sampler, **values) -> None:
  """Stores validated, normalised fields on a frozen sampler."""
  for name, value in values.items():
    object.__setattr__(sampler, name, value)


def check_step(step: Any, steps_per_epoch: int) -> None:
  """Eager range check of a concrete step; traced steps pass through."""
  if isinstance(step, jax.core.Tracer):
    return
  check_whole("step", step, 0, steps_per_epoch - 1)


# --------------------------------------------------------------------------
# epochs: the one rule
# --------------------------------------------------------------------------


def poisson_steps_per_epoch(q: Any) -> Optional[int]:
  """Steps per epoch of Poisson sampling at rate q: the whole number nearest 1/q.

  One epoch is one expected pass over the data (q·N examples per step, N / (q·N)
  = 1/q steps), rounded to a whole number of steps with Python's ``round``
  (ties to even), and at least 1. This is :attr:`PoissonSampler.steps_per_epoch`
  and what the command line and sweep files use for a bare rate ``--q`` (or
  B / N without ``--sampler``).

  Args:
    q: the sampling rate, a number in [0, 1].

  Returns:
    max(1, round(1/q)) as an int, or None when q = 0 (no epoch ever ends).

  Raises:
    ValueError: naming ``q`` and its value when it is not a number in [0, 1].
  """
  q = check_rate("q", q)
  return max(1, int(round(1.0 / q))) if q > 0 else None


def epochs_to_steps(epochs: Any, steps_per_epoch: Any) -> int:
  """The number of steps of ``epochs`` epochs: E × steps_per_epoch.

  The one rule for epochs in jaxdp (module docstring). A whole E gives exactly
  E·k; a fractional product is rounded up (the steps of a started epoch are
  run and charged: toward more privacy loss), less an allowance of 1e-9
  steps, so that an E written in decimal (0.1 × 30 = 3.0000000000000004)
  does not gain a step from its float representation.

  Args:
    epochs: E > 0, finite.
    steps_per_epoch: k, a whole number >= 1, or a :mod:`jaxdp.sampling`
      sampler (its ``steps_per_epoch``).

  Returns:
    The number of steps, a Python int.

  Raises:
    ValueError: naming the argument and its value when E is not a positive
      finite number, or k not a whole number >= 1 (or the sampler has none:
      Poisson at q = 0).
  """
  k = getattr(steps_per_epoch, "steps_per_epoch", steps_per_epoch)
  if k is None:
    raise ValueError(f"steps_per_epoch must be a whole number >= 1; found None (a sampler "
                     f"at rate q = 0 has no epochs): {steps_per_epoch!r}.")
  k = check_whole("steps_per_epoch", k, 1)
  if isinstance(epochs, jax.core.Tracer) or isinstance(epochs, (bool, np.bool_)) \
      or np.ndim(epochs) != 0:
    raise ValueError(f"epochs must be a positive number; found {epochs!r}.")
  _numerics.check_array("epochs", epochs, low=0.0, low_open=True)
  e = float(epochs)
  whole = round(e)
  if e == whole:
    return int(whole) * k
  return int(math.ceil(e * k - 1e-9))


# --------------------------------------------------------------------------
# kernels (pure, jittable)
# --------------------------------------------------------------------------


@functools.partial(persist.jit, static_argnums=(0, 1))
def run_compiled(sampler, name: str, *args):
  """``getattr(sampler, name)(*args)`` as one jitted program, the sampler
  (a frozen, hashable dataclass) and the method's name static.

  Called eagerly, a draw then compiles one program, which jaxdp's disk cache
  keeps for later processes (:mod:`jaxdp._src.core.persist`), instead of
  dispatching its few dozen operations one by one (each compiled on its own:
  1.2 s for a Poisson draw in a fresh process, every process, against 0.75
  s once); inside a caller's trace it is inlined. The draws are integers
  (indices and a mask) from the same PRNG stream either way.
  """
  return getattr(sampler, name)(*args)


def draw_binomial(key, n: int, p: float):
  """An exact-count Binomial(n, p) draw as int32 (n static).

  ``jax.random.binomial`` works in floating point; splitting n into chunks of
  at most 2**24 keeps every partial count exactly representable in float32.
  A sum of independent binomials with the same p is Binomial(n, p).
  """
  sizes = [_BINOMIAL_CHUNK] * (n // _BINOMIAL_CHUNK)
  if n % _BINOMIAL_CHUNK or not sizes:
    sizes.append(n % _BINOMIAL_CHUNK)
  counts = jax.random.binomial(key, jnp.asarray(sizes, jnp.float32), p, shape=(len(sizes),))
  return jnp.sum(counts.astype(jnp.int32))


def _duplicates(x):
  """Marks every entry of ``x`` equal to an entry at an earlier position."""
  size = x.shape[0]
  pos = jnp.arange(size, dtype=jnp.int32)
  xs, ps = jax.lax.sort((x, pos), num_keys=1, is_stable=True)
  dup_sorted = jnp.concatenate([jnp.zeros((1,), bool), xs[1:] == xs[:-1]])
  return jnp.zeros((size,), bool).at[ps].set(dup_sorted)


def draw_distinct(key, n, m, size: int):
  """A uniformly random sequence of ``m`` distinct integers from [0, n).

  Returns an int32 vector of static length ``size`` whose first ``m`` entries
  (``m <= min(n, size)``, may be traced, as may ``n``) are the sequence; the
  rest hold distinct negative fillers. Draws ``m`` values uniformly with
  replacement, then redraws every value that repeats one at an earlier
  position until none does. The procedure commutes with relabelling [0, n)
  (what is redrawn depends only on which values are equal), so its result has
  the same probability as any relabelling of it; all injective sequences are
  relabellings of each other, hence the result is uniform over them: a
  uniform m-subset of [0, n) in uniformly random order.

  Cost: one sort of ``size`` entries per round. A redraw collides with
  probability < m/n, so the number of repeats shrinks geometrically when
  m/n <= 1/2 (the callers guarantee it; about log(m²/2n)/log(n/m) rounds).
  """
  pos = jnp.arange(size, dtype=jnp.int32)

  def body(carry):
    x, redo, i = carry
    fresh = jax.random.randint(jax.random.fold_in(key, i), (size,), 0, n, dtype=jnp.int32)
    x = jnp.where(redo, fresh, x)
    return x, _duplicates(x), i + 1

  # Round 0 draws every active slot; fillers are negative, so never repeats.
  start = (-1 - pos, pos < m, jnp.int32(0))
  x, _, _ = jax.lax.while_loop(lambda c: jnp.any(c[1]), body, start)
  return x


def _permutation_prefix(key, n: int, size: int):
  """The first min(n, size) entries of a uniform permutation of [0, n), padded to size."""
  perm = jax.random.permutation(key, n).astype(jnp.int32)
  if size <= n:
    return perm[:size]
  return jnp.zeros((size,), jnp.int32).at[:n].set(perm)


def draw_prefix(key, n: int, m, size: int):
  """First ``m`` entries: a uniform m-subset of [0, n) in random order (n, size static)."""
  if _SPARSE_RATIO * size <= n:
    return draw_distinct(key, n, m, size)
  return _permutation_prefix(key, n, size)


def epoch_step_key(key, t, steps_per_epoch: int):
  t = jnp.asarray(t, jnp.int32)
  return jax.random.fold_in(key, t // steps_per_epoch), t % steps_per_epoch
