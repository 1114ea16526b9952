"""Batch samplers with static shapes that jitted training loops can run.

Each sampler is built on the host from the dataset size and its parameters
(validated eagerly, also when a sampler class is called directly), is a small
frozen dataclass (hashable: usable as a static argument of ``jit``; not a
pytree, since its sizes fix array shapes), and knows the privacy event its
batches imply:

============================  ========================  ======================================
sampler (N examples)          batch                     event (:mod:`jaxdp.events`)
============================  ========================  ======================================
``poisson(N, q, cap)``        Poisson, at most cap      ``TruncatedPoissonGaussian``, per step
``fixed(N, B)``               B without replacement     ``SampledWithoutReplacementGaussian``,
                                                        per step
``balls_in_bins(N, B, cap)``  one of k = N // B random  ``BallsInBinsGaussian``, per epoch
                              bins, at most cap
``shuffle(N, B)``             a block of a permutation  ``ShuffledGaussian``, per epoch
============================  ========================  ======================================

(cap: the ``capacity`` argument.)

``sample(...)`` returns ``(indices, mask)``: int32 ``indices`` of a static
shape (``(capacity,)`` or ``(batch_size,)``) and a bool ``mask`` marking the
real entries; padding entries have mask False and index 0. Gather with the
indices and zero the masked-out per-example gradients (or weight by the mask).
The functions are pure JAX: they run under ``jit``, ``vmap`` over keys and
inside ``lax.scan``. ``poisson`` and ``fixed`` take a fresh key per step;
``balls_in_bins`` and ``shuffle`` take the epoch's key (the same for all steps
of an epoch) and the step within the epoch. ``sample_at(key, t)`` derives both
from one run key and a global step ``t``, so one training loop serves every
sampler::

  sampler = jaxdp.sampling.poisson(60_000, q=256 / 60_000, capacity=400)

  def masked(grads, mask):  # zero the padding rows of every leaf of a pytree
    return jax.tree.map(lambda g: g * mask.reshape((-1,) + (1,) * (g.ndim - 1)), grads)

  def train_step(params, t):
    indices, mask = sampler.sample_at(run_key, t)
    grads = masked(per_example_grads(params, data[indices]), mask)
    ...

  steps = sampler.epochs_to_steps(epochs)   # the one rule for epochs (below)
  # One event per step (poisson, fixed: count=steps); the epoch samplers'
  # event is one epoch (balls_in_bins, shuffle: count=epochs).
  acc.compose(state, sampler.event(sigma), count=steps)

Epochs. One rule, stated here and used by every surface (samplers, the
``jaxdp`` command line's ``--epochs``, sweep files' ``epochs`` column,
:func:`jaxdp.calibrate.optimize_dpsgd` and the docs): **E epochs are
E × steps_per_epoch steps** (:func:`epochs_to_steps`; a fractional product
is rounded up, toward more privacy loss), where each sampler defines its
steps per epoch once:

* ``fixed``, ``balls_in_bins``, ``shuffle``: k = N // B;
* ``poisson`` (and plain Poisson sampling at a bare rate q, without a
  dataset size): the whole number nearest to 1/q, one expected pass over
  the data (:func:`poisson_steps_per_epoch`; Python's ``round``, so a tie
  goes to the even number).

MNIST (N = 60000, B = 256): Poisson q = 256/60000 gives round(234.375) = 234
steps per epoch, so 60 epochs are 14040 steps; ``fixed`` gives 60000 // 256 =
234 as well.

σ in ``event(sigma)`` is dp_accounting's noise multiplier: the noise added to
the sum of per-example vectors clipped to L2 norm C has standard deviation σ·C.
Randomness: bits come from ``jax.random`` (threefry by default); the laws
stated are those of ideal uniform bits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as _numerics
from jaxdp._src import events as _events

__all__ = [
    "poisson_steps_per_epoch",
    "epochs_to_steps",
    "poisson",
    "fixed",
    "balls_in_bins",
    "shuffle",
    "PoissonSampler",
    "FixedSampler",
    "BallsInBinsSampler",
    "ShuffleSampler",
]

# Indices are int32: datasets up to 2**31 - 1 examples.
_MAX_DATASET_SIZE = 2 ** 31 - 1
# Binomial draws are split into chunks whose counts float32 represents exactly.
_BINOMIAL_CHUNK = 2 ** 24
# Draw-and-redraw subset sampling is used while size/n <= 1/_SPARSE_RATIO;
# beyond that a full permutation (O(n log n), then n <= _SPARSE_RATIO * size).
_SPARSE_RATIO = 4


# --------------------------------------------------------------------------
# host-side validation
# --------------------------------------------------------------------------


def _whole(name: str, value: Any, low: int = 1, high: Optional[int] = None) -> int:
  """A concrete whole number in [low, high] as a Python int, else ValueError."""
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be a concrete number (samplers fix shapes on the "
                     f"host), not a traced value; found {value!r}.")
  if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
    raise ValueError(f"{name} must be a whole number; found {value!r}.")
  _numerics.check_array(name, value, low=float(low),
                        high=None if high is None else float(high), integer=True)
  return int(value)


def _rate(name: str, value: Any) -> float:
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be a concrete number, not a traced value; found {value!r}.")
  if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
    raise ValueError(f"{name} must be a number in [0, 1]; found {value!r}.")
  _numerics.check_array(name, value, low=0.0, high=1.0)
  return float(value)


def _relation(value: Any) -> str:
  if not isinstance(value, str) or value not in _events.RELATIONS:
    raise ValueError(f"relation must be one of {', '.join(map(repr, _events.RELATIONS))}; "
                     f"found {value!r}.")
  return value


def _sizes(dataset_size, batch_size) -> Tuple[int, int]:
  n = _whole("dataset_size", dataset_size, 1, _MAX_DATASET_SIZE)
  b = _whole("batch_size", batch_size, 1)
  if b > n:
    raise ValueError(f"batch_size must be <= dataset_size = {n}; found {b}.")
  return n, b


def _set(sampler, **values) -> None:
  """Stores validated, normalised fields on a frozen sampler."""
  for name, value in values.items():
    object.__setattr__(sampler, name, value)


def _check_step(step: Any, steps_per_epoch: int) -> None:
  """Eager range check of a concrete step; traced steps pass through."""
  if isinstance(step, jax.core.Tracer):
    return
  _whole("step", step, 0, steps_per_epoch - 1)


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
  q = _rate("q", q)
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
  k = _whole("steps_per_epoch", k, 1)
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


def _binomial(key, n: int, p: float):
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


def _distinct(key, n, m, size: int):
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


def _prefix(key, n: int, m, size: int):
  """First ``m`` entries: a uniform m-subset of [0, n) in random order (n, size static)."""
  if _SPARSE_RATIO * size <= n:
    return _distinct(key, n, m, size)
  return _permutation_prefix(key, n, size)


def _epoch_step_key(key, t, steps_per_epoch: int):
  t = jnp.asarray(t, jnp.int32)
  return jax.random.fold_in(key, t // steps_per_epoch), t % steps_per_epoch


# --------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PoissonSampler:
  """Poisson sampling truncated to ``capacity``; build with :func:`poisson`.

  Attributes:
    dataset_size: N, the number of examples.
    q: inclusion probability of each example.
    capacity: static batch buffer length; at most this many examples per step.
    relation: ``"add_remove"`` (default) or ``"replace_one"``.
  """
  dataset_size: int
  q: float
  capacity: int
  relation: str = "add_remove"

  def __post_init__(self):
    _set(self, dataset_size=_whole("dataset_size", self.dataset_size, 1, _MAX_DATASET_SIZE),
         q=_rate("q", self.q), capacity=_whole("capacity", self.capacity, 1),
         relation=_relation(self.relation))

  @property
  def batch_size(self) -> float:
    """Expected number of sampled examples before truncation, q·N."""
    return self.q * self.dataset_size

  @property
  def expected_batch_size(self) -> float:
    """Expected batch size after truncation, E[min(K, capacity)], K ~ Binomial(N, q)."""
    from scipy import stats  # pylint: disable=g-import-not-at-top
    k = np.arange(self.capacity)
    return float(self.capacity - np.sum(stats.binom.cdf(k, self.dataset_size, self.q)))

  @property
  def steps_per_epoch(self) -> Optional[int]:
    """round(1/q), the conventional epoch (one expected pass); None when q = 0.

    :func:`poisson_steps_per_epoch` of ``q`` (module docstring, "Epochs").
    """
    return poisson_steps_per_epoch(self.q)

  def epochs_to_steps(self, epochs) -> int:
    """E epochs as steps: E × :attr:`steps_per_epoch` (:func:`epochs_to_steps`)."""
    return epochs_to_steps(epochs, self)

  @property
  def truncation_probability(self) -> float:
    """P[a given example is sampled into a truncated batch | it is sampled].

    P[Binomial(N−1, q) >= capacity], dp_accounting's truncation probability
    (0 when capacity >= N).
    """
    from scipy import stats  # pylint: disable=g-import-not-at-top
    if self.capacity >= self.dataset_size:
      return 0.0
    return float(stats.binom.sf(self.capacity - 1, self.dataset_size - 1, self.q))

  def sample(self, key) -> Tuple[jax.Array, jax.Array]:
    """One step's batch.

    Draws K ~ Binomial(N, q), then a uniformly random subset of
    min(K, capacity) distinct examples (in random order). Given K this subset
    is uniform, so without truncation the batch has exactly the law of
    independent inclusion with probability q; when K > capacity it is a
    uniform capacity-subset of a Poisson sample (dp_accounting's truncated
    Poisson sampling). Cost O(capacity·log capacity) per round of redraws
    (a few rounds) when 4·capacity <= N, else one permutation of N.

    Args:
      key: a fresh PRNG key for this step.

    Returns:
      ``(indices, mask)``: int32 ``(capacity,)`` and bool ``(capacity,)``; the
      first min(K, capacity) entries are real.
    """
    count_key, member_key = jax.random.split(key)
    n, cap = self.dataset_size, self.capacity
    kept = jnp.minimum(_binomial(count_key, n, self.q), cap)
    members = _prefix(member_key, n, kept, cap)
    mask = jnp.arange(cap) < kept
    return jnp.where(mask, members, 0), mask

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """The batch of global step ``t`` of a run whose randomness is ``key``."""
    return self.sample(jax.random.fold_in(key, jnp.asarray(t, jnp.int32)))

  def event(self, sigma) -> Any:
    """One step: ``TruncatedPoissonGaussian(N, q, capacity, sigma, relation)``.

    ``SampledGaussian(q, sigma, relation)`` when capacity >= N (nothing is
    truncated).
    """
    if self.capacity >= self.dataset_size:
      return _events.SampledGaussian(self.q, sigma, self.relation)
    return _events.TruncatedPoissonGaussian(self.dataset_size, self.q, self.capacity, sigma,
                                            self.relation)


@dataclasses.dataclass(frozen=True)
class FixedSampler:
  """Fixed-size batches without replacement; build with :func:`fixed`.

  Attributes:
    dataset_size: N, the number of examples.
    batch_size: B, the exact batch size.
    relation: ``"replace_one"`` or ``"add_remove"`` (accounted literally, sensitivity 2C).
  """
  dataset_size: int
  batch_size: int
  relation: str = "replace_one"

  def __post_init__(self):
    n, b = _sizes(self.dataset_size, self.batch_size)
    _set(self, dataset_size=n, batch_size=b, relation=_relation(self.relation))

  @property
  def expected_batch_size(self) -> int:
    return self.batch_size

  @property
  def steps_per_epoch(self) -> int:
    """N // B, the conventional epoch (steps are independent)."""
    return self.dataset_size // self.batch_size

  def epochs_to_steps(self, epochs) -> int:
    """E epochs as steps: E × :attr:`steps_per_epoch` (:func:`epochs_to_steps`)."""
    return epochs_to_steps(epochs, self)

  def sample(self, key) -> Tuple[jax.Array, jax.Array]:
    """One step's batch: B distinct examples, a uniform B-subset in random order.

    Independent across steps (fresh key). Cost O(B log B) per round of
    redraws (a few) when 4B <= N, else one permutation of N.

    Args:
      key: a fresh PRNG key for this step.

    Returns:
      ``(indices, mask)``: int32 ``(batch_size,)`` distinct indices and an
      all-True mask.
    """
    members = _prefix(key, self.dataset_size, self.batch_size, self.batch_size)
    return members, jnp.ones((self.batch_size,), bool)

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """The batch of global step ``t`` of a run whose randomness is ``key``."""
    return self.sample(jax.random.fold_in(key, jnp.asarray(t, jnp.int32)))

  def event(self, sigma) -> Any:
    """One step: ``SampledWithoutReplacementGaussian(N, B, sigma, relation)``."""
    return _events.SampledWithoutReplacementGaussian(
        self.dataset_size, self.batch_size, sigma, self.relation)


@dataclasses.dataclass(frozen=True)
class BallsInBinsSampler:
  """Balls-in-bins batches; build with :func:`balls_in_bins`.

  Attributes:
    dataset_size: N, the number of examples.
    batch_size: B, the nominal batch size; the expected one is N / k.
    capacity: static batch buffer length; at most this many examples per step.
    steps_per_epoch: k = N // B.
    relation: ``"add_remove"``.
  """
  dataset_size: int
  batch_size: int
  capacity: int
  relation: str = dataclasses.field(default="add_remove", init=False)

  def __post_init__(self):
    n, b = _sizes(self.dataset_size, self.batch_size)
    _set(self, dataset_size=n, batch_size=b, capacity=_whole("capacity", self.capacity, 1))

  @property
  def steps_per_epoch(self) -> int:
    """k = N // B (an epoch's steps)."""
    return self.dataset_size // self.batch_size

  def epochs_to_steps(self, epochs) -> int:
    """E epochs as steps: E × :attr:`steps_per_epoch` (:func:`epochs_to_steps`)."""
    return epochs_to_steps(epochs, self)

  @property
  def expected_batch_size(self) -> float:
    """N / k before truncation (between B and 2B)."""
    return self.dataset_size / self.steps_per_epoch

  @property
  def truncation_probability(self) -> float:
    """P[a given example's bin holds more than capacity examples].

    P[Binomial(N−1, 1/k) >= capacity] (0 when capacity >= N).
    """
    from scipy import stats  # pylint: disable=g-import-not-at-top
    if self.capacity >= self.dataset_size:
      return 0.0
    return float(stats.binom.sf(self.capacity - 1, self.dataset_size - 1,
                                1.0 / self.steps_per_epoch))

  def sample(self, key, step) -> Tuple[jax.Array, jax.Array]:
    """Step ``step`` of the epoch whose key is ``key``.

    The epoch key puts every example in one of the k bins uniformly and
    independently (the same assignment for every step of the epoch); the
    batch is bin ``step``, its members in index order. A bin with more than
    ``capacity`` members is cut to a uniformly random ``capacity``-subset
    (randomness from the epoch key and the step). Cost O(N) per step (the
    assignment is recomputed), plus O(capacity·log capacity) per round of
    redraws when a bin overflows.

    Args:
      key: the epoch's PRNG key, the same for all k steps of the epoch.
      step: int in [0, k), may be traced. A concrete step outside raises
        ``ValueError``; a traced one outside gives an empty batch.

    Returns:
      ``(indices, mask)``: int32 ``(capacity,)`` and bool ``(capacity,)``; the
      first min(bin size, capacity) entries are real.
    """
    _check_step(step, self.steps_per_epoch)
    n, cap = self.dataset_size, self.capacity
    bin_key, cut_key = jax.random.split(key)
    step = jnp.asarray(step, jnp.int32)
    in_bin = jax.random.randint(bin_key, (n,), 0, self.steps_per_epoch, dtype=jnp.int32) == step
    rank = jnp.cumsum(in_bin, dtype=jnp.int32)  # rank[i] = members among 0..i
    count = rank[-1]
    slots = jnp.arange(cap, dtype=jnp.int32)

    def whole_bin():
      return jnp.searchsorted(rank, slots + 1, side="left")

    def cut_bin():
      # Choose which ranks to keep (when cap <= count/2) or to drop (when
      # count/2 < cap < count), so that at most half of [0, count) is drawn.
      keep_drawn = 2 * cap <= count
      n_drawn = jnp.where(keep_drawn, cap, count - cap)
      drawn = _distinct(jax.random.fold_in(cut_key, step), count, n_drawn, cap)
      hit = jnp.searchsorted(rank, drawn + 1, side="left")  # example holding each rank
      hit = jnp.where(slots < n_drawn, hit, n)
      marked = jnp.zeros((n,), bool).at[hit].set(True, mode="drop")
      kept = jnp.where(keep_drawn, marked, in_bin & ~marked)
      return jnp.searchsorted(jnp.cumsum(kept, dtype=jnp.int32), slots + 1, side="left")

    members = jax.lax.cond(count > cap, cut_bin, whole_bin)
    mask = slots < jnp.minimum(count, cap)
    return jnp.where(mask, members, 0).astype(jnp.int32), mask

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """Global step ``t``: epoch t // k (key ``fold_in(key, epoch)``), step t % k."""
    epoch_key, step = _epoch_step_key(key, t, self.steps_per_epoch)
    return self.sample(epoch_key, step)

  def event(self, sigma) -> Any:
    """One epoch (k steps): ``BallsInBinsGaussian(N, B, sigma, capacity)``.

    ``capacity`` is None when capacity >= N (no bin can overflow). Otherwise
    an overfull bin is cut, which is not post-processing of the allocation:
    adding an example to a full bin may push out another (see
    :class:`jaxdp.events.BallsInBinsGaussian` and
    :attr:`truncation_probability`).
    """
    cap = None if self.capacity >= self.dataset_size else self.capacity
    return _events.BallsInBinsGaussian(self.dataset_size, self.batch_size, sigma, cap)


@dataclasses.dataclass(frozen=True)
class ShuffleSampler:
  """Shuffle-and-cut batches; build with :func:`shuffle`.

  Attributes:
    dataset_size: N, the number of examples.
    batch_size: B, the exact batch size.
    steps_per_epoch: k = N // B.
    relation: ``"add_remove"`` (accounted literally, sensitivity 2C) or ``"replace_one"``.
  """
  dataset_size: int
  batch_size: int
  relation: str = "add_remove"

  def __post_init__(self):
    n, b = _sizes(self.dataset_size, self.batch_size)
    _set(self, dataset_size=n, batch_size=b, relation=_relation(self.relation))

  @property
  def steps_per_epoch(self) -> int:
    """k = N // B (an epoch's steps)."""
    return self.dataset_size // self.batch_size

  def epochs_to_steps(self, epochs) -> int:
    """E epochs as steps: E × :attr:`steps_per_epoch` (:func:`epochs_to_steps`)."""
    return epochs_to_steps(epochs, self)

  @property
  def expected_batch_size(self) -> int:
    return self.batch_size

  def sample(self, key, step) -> Tuple[jax.Array, jax.Array]:
    """Block ``step`` of the epoch's permutation.

    The epoch key fixes a uniformly random permutation of the N examples;
    step i takes its entries [iB, (i+1)B). The last N − kB entries are not
    used that epoch. Cost: one permutation of N per step (recomputed).

    Args:
      key: the epoch's PRNG key, the same for all k steps of the epoch.
      step: int in [0, k), may be traced. A concrete step outside raises
        ``ValueError``; a traced one is clamped into range.

    Returns:
      ``(indices, mask)``: int32 ``(batch_size,)`` indices and an all-True
      mask.
    """
    _check_step(step, self.steps_per_epoch)
    b = self.batch_size
    perm = jax.random.permutation(key, self.dataset_size).astype(jnp.int32)
    start = jnp.clip(jnp.asarray(step, jnp.int32), 0, self.steps_per_epoch - 1) * b
    return jax.lax.dynamic_slice(perm, (start,), (b,)), jnp.ones((b,), bool)

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """Global step ``t``: epoch t // k (key ``fold_in(key, epoch)``), step t % k."""
    epoch_key, step = _epoch_step_key(key, t, self.steps_per_epoch)
    return self.sample(epoch_key, step)

  def event(self, sigma) -> Any:
    """One epoch (k steps): ``ShuffledGaussian(N, B, sigma, relation)``."""
    return _events.ShuffledGaussian(self.dataset_size, self.batch_size, sigma, self.relation)


# --------------------------------------------------------------------------
# constructors (host-level, validating)
# --------------------------------------------------------------------------


def poisson(dataset_size: int, q: float, capacity: int,
            relation: str = "add_remove") -> PoissonSampler:
  """Poisson sampling with a static capacity.

  Each example is in a step's batch independently with probability ``q``;
  if more than ``capacity`` are drawn, a uniformly random ``capacity``-subset
  of them is kept. Steps are independent (a fresh key each).

  Args:
    dataset_size: N >= 1 (a whole number < 2**31).
    q: sampling probability in [0, 1].
    capacity: buffer length >= 1. Choose it a few standard deviations above
      q·N (``truncation_probability`` reports the cost); ``capacity >= N``
      never truncates.
    relation: ``"add_remove"`` (default; dp_accounting's default relation) or
      ``"replace_one"`` (one example swapped for another: a shift of up to 2C
      when it is sampled). Replace-one has a tight (PLD) answer without
      truncation (capacity >= N) and an RDP bound (weak triangle inequality,
      :mod:`jaxdp.rdp_relations`) with or without it.

  Returns:
    A :class:`PoissonSampler`; its ``event(sigma)`` is
    ``TruncatedPoissonGaussian`` (``SampledGaussian`` when capacity >= N).

  Raises:
    ValueError: naming the argument and its value when it is missing, NaN,
      out of range or not a whole number, or ``relation`` is unknown.
  """
  return PoissonSampler(dataset_size, q, capacity, relation)


def fixed(dataset_size: int, batch_size: int, relation: str = "replace_one") -> FixedSampler:
  """Fixed-size batches drawn uniformly without replacement, independently per step.

  Args:
    dataset_size: N >= 1 (a whole number < 2**31).
    batch_size: B in [1, N].
    relation: ``"replace_one"`` (default; the relation dp_accounting analyses
      for this sampler) or ``"add_remove"`` (accounted literally, sensitivity 2C; see
      :class:`jaxdp.events.SampledWithoutReplacementGaussian`).

  Returns:
    A :class:`FixedSampler`; its ``event(sigma)`` is
    ``SampledWithoutReplacementGaussian``.

  Raises:
    ValueError: naming the argument and its value when it is out of range or
      not a whole number, or ``relation`` is unknown.
  """
  return FixedSampler(dataset_size, batch_size, relation)


def balls_in_bins(dataset_size: int, batch_size: int, capacity: int) -> BallsInBinsSampler:
  """Balls-in-bins batches: each epoch every example joins one random step.

  An epoch has k = N // B steps; at its start each example is assigned to one
  of them uniformly at random, independently of the others; step i's batch is
  everyone assigned to i (size Binomial(N, 1/k), mean N/k), cut to a uniformly
  random ``capacity``-subset if larger.

  Args:
    dataset_size: N >= 1 (a whole number < 2**31).
    batch_size: B in [1, N]; sets k = N // B.
    capacity: buffer length >= 1 (``truncation_probability`` reports how
      often a bin overflows; ``capacity >= N`` never truncates).

  Returns:
    A :class:`BallsInBinsSampler`; its ``event(sigma)`` is one epoch,
    ``BallsInBinsGaussian``.

  Raises:
    ValueError: naming the argument and its value when it is out of range or
      not a whole number.
  """
  return BallsInBinsSampler(dataset_size, batch_size, capacity)


def shuffle(dataset_size: int, batch_size: int, relation: str = "add_remove") -> ShuffleSampler:
  """Shuffled batches: each epoch a random permutation cut into blocks of B.

  Args:
    dataset_size: N >= 1 (a whole number < 2**31).
    batch_size: B in [1, N]; an epoch has k = N // B steps and leaves out
      the last N − kB examples of its permutation.
    relation: ``"add_remove"`` (default; accounted literally, sensitivity 2C) or ``"replace_one"``.

  Returns:
    A :class:`ShuffleSampler`; its ``event(sigma)`` is one epoch,
    ``ShuffledGaussian`` (one unamplified Gaussian: shuffling has no general
    amplification result).

  Raises:
    ValueError: naming the argument and its value when it is out of range or
      not a whole number, or ``relation`` is unknown.
  """
  return ShuffleSampler(dataset_size, batch_size, relation)
