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

Validation, the epochs rule and the random subsets live in
:mod:`jaxdp._src.samplers.sampling_base`, the epoch-level samplers in
:mod:`jaxdp._src.samplers.sampling_epoch` (both re-exported here).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src import events as _events
from jaxdp._src.samplers.sampling_base import (MAX_DATASET_SIZE, check_rate, check_relation,
                                               check_sizes, check_whole, draw_binomial, draw_prefix,
                                               epochs_to_steps, poisson_steps_per_epoch,
                                               run_compiled, set_fields)
from jaxdp._src.samplers.sampling_epoch import BallsInBinsSampler, ShuffleSampler

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
    set_fields(self,
               dataset_size=check_whole("dataset_size", self.dataset_size, 1, MAX_DATASET_SIZE),
               q=check_rate("q", self.q), capacity=check_whole("capacity", self.capacity, 1),
               relation=check_relation(self.relation))

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
    return run_compiled(self, "_draw", key)

  def _draw(self, key):
    count_key, member_key = jax.random.split(key)
    n, cap = self.dataset_size, self.capacity
    kept = jnp.minimum(draw_binomial(count_key, n, self.q), cap)
    members = draw_prefix(member_key, n, kept, cap)
    mask = jnp.arange(cap) < kept
    return jnp.where(mask, members, 0), mask

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """The batch of global step ``t`` of a run whose randomness is ``key``."""
    return run_compiled(self, "_draw_at", key, t)

  def _draw_at(self, key, t):
    return self._draw(jax.random.fold_in(key, jnp.asarray(t, jnp.int32)))

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
    n, b = check_sizes(self.dataset_size, self.batch_size)
    set_fields(self, dataset_size=n, batch_size=b, relation=check_relation(self.relation))

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
    return run_compiled(self, "_draw", key)

  def _draw(self, key):
    members = draw_prefix(key, self.dataset_size, self.batch_size, self.batch_size)
    return members, jnp.ones((self.batch_size,), bool)

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """The batch of global step ``t`` of a run whose randomness is ``key``."""
    return run_compiled(self, "_draw_at", key, t)

  def _draw_at(self, key, t):
    return self._draw(jax.random.fold_in(key, jnp.asarray(t, jnp.int32)))

  def event(self, sigma) -> Any:
    """One step: ``SampledWithoutReplacementGaussian(N, B, sigma, relation)``."""
    return _events.SampledWithoutReplacementGaussian(
        self.dataset_size, self.batch_size, sigma, self.relation)


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
