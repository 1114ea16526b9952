"""The epoch-level samplers: balls-in-bins and shuffling.

Both take the epoch's key (the same for all steps of an epoch) and the step
within the epoch, and imply one privacy event per epoch
(``BallsInBinsGaussian``, ``ShuffledGaussian``). Built by
:func:`jaxdp._src.samplers.sampling.balls_in_bins` and
:func:`jaxdp._src.samplers.sampling.shuffle`; re-exported by
:mod:`jaxdp._src.samplers.sampling` (and ``jaxdp.sampling``). Split out of it
(moves only).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.numpy as jnp

from jaxdp._src import events as _events
from jaxdp._src.samplers import permutation as _permutation
from jaxdp._src.samplers.sampling_base import (check_relation, check_sizes, check_step,
                                               check_whole, draw_distinct, epoch_step_key,
                                               epochs_to_steps, run_compiled, set_fields)


@dataclasses.dataclass(frozen=True)
class BallsInBinsSampler:
  """Balls-in-bins batches; build with :func:`jaxdp.sampling.balls_in_bins`.

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
    n, b = check_sizes(self.dataset_size, self.batch_size)
    set_fields(self, dataset_size=n, batch_size=b,
               capacity=check_whole("capacity", self.capacity, 1))

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
    check_step(step, self.steps_per_epoch)
    return run_compiled(self, "_draw", key, step)

  def _draw(self, key, step):
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
      drawn = draw_distinct(jax.random.fold_in(cut_key, step), count, n_drawn, cap)
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
    return run_compiled(self, "_draw_at", key, t)

  def _draw_at(self, key, t):
    epoch_key, step = epoch_step_key(key, t, self.steps_per_epoch)
    return self._draw(epoch_key, step)

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
  """Shuffle-and-cut batches; build with :func:`jaxdp.sampling.shuffle`.

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
    n, b = check_sizes(self.dataset_size, self.batch_size)
    set_fields(self, dataset_size=n, batch_size=b, relation=check_relation(self.relation))

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

    The epoch key fixes a pseudorandom permutation of the N examples
    (:mod:`jaxdp._src.samplers.permutation`: a Feistel network on a span of
    (k + 1)·B values with cycle-walking to N); step i takes its entries
    [iB, (i+1)B). The last N − kB entries are not used that epoch. Cost:
    O(B) per step (each entry computed on its own; no permutation of N).

    Args:
      key: the epoch's PRNG key, the same for all k steps of the epoch.
      step: int in [0, k), may be traced. A concrete step outside raises
        ``ValueError``; a traced one is clamped into range.

    Returns:
      ``(indices, mask)``: int32 ``(batch_size,)`` indices and an all-True
      mask.
    """
    check_step(step, self.steps_per_epoch)
    return run_compiled(self, "_draw", key, step)

  def _draw(self, key, step):
    b = self.batch_size
    start = jnp.clip(jnp.asarray(step, jnp.int32), 0, self.steps_per_epoch - 1) * b
    span = (self.steps_per_epoch + 1) * b
    idx = _permutation.permute(key, start + jnp.arange(b, dtype=jnp.int32), self.dataset_size,
                               span)
    return idx, jnp.ones((b,), bool)

  def sample_at(self, key, t) -> Tuple[jax.Array, jax.Array]:
    """Global step ``t``: epoch t // k (key ``fold_in(key, epoch)``), step t % k."""
    return run_compiled(self, "_draw_at", key, t)

  def _draw_at(self, key, t):
    epoch_key, step = epoch_step_key(key, t, self.steps_per_epoch)
    return self._draw(epoch_key, step)

  def event(self, sigma) -> Any:
    """One epoch (k steps): ``ShuffledGaussian(N, B, sigma, relation)``."""
    return _events.ShuffledGaussian(self.dataset_size, self.batch_size, sigma, self.relation)
