"""Tests for jaxdp.sampling: sampling laws by simulation, static shapes, validation."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxdp import events as E
from jaxdp import sampling as S
from jaxdp._src.samplers import permutation

REPS = 20000
# Every statistical check below is deterministic (fixed keys); this level
# only guards against a seed that happens to sit in the tail.
P_MIN = 1e-4


def _keys(seed, n=REPS):
  return jax.random.split(jax.random.key(seed), n)


def _chi2_pvalue(observed, expected_probs):
  observed = np.asarray(observed, np.float64)
  expected = np.asarray(expected_probs, np.float64) * observed.sum()
  return stats.chisquare(observed, expected).pvalue


def _inclusion_counts(indices, mask, n):
  """How often each of n indices appears among the valid entries of a batch of draws."""
  idx = np.asarray(indices)[np.asarray(mask)]
  return np.bincount(idx, minlength=n)


def _binomial_pvalue(counts, trials, p):
  """Chi-square p-value of per-index inclusion counts, each Binomial(trials, p)."""
  counts = np.asarray(counts, np.float64)
  z2 = (counts - trials * p) ** 2 / (trials * p * (1 - p))
  return stats.chi2.sf(z2.sum(), df=counts.size)


def _draws(sample, *args):
  """``sample`` vmapped over its arguments, under jit."""
  return jax.jit(jax.vmap(sample))(*args)


def _assert_distinct_valid(indices, mask, n):
  """Valid entries are distinct indices in [0, n); padding entries are 0."""
  indices, mask = np.asarray(indices), np.asarray(mask)
  width = indices.shape[-1]
  indices, mask = indices.reshape(-1, width), mask.reshape(-1, width)
  valid = indices[mask]
  assert valid.min(initial=0) >= 0 and valid.max(initial=0) < n
  assert np.all(indices[~mask] == 0)
  tagged = np.sort(np.where(mask, indices, -1 - np.arange(width)), axis=1)
  assert not np.any(tagged[:, 1:] == tagged[:, :-1])


# --------------------------------------------------------------------------
# poisson
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n, q, cap", [
    (50, 0.2, 50),    # capacity >= N: the permutation path, plain Poisson
    (400, 0.05, 60),  # 4·capacity <= N: draw-and-redraw path
])
def test_poisson_inclusion_frequency(n, q, cap):
  sampler = S.poisson(n, q, cap)
  idx, mask = _draws(sampler.sample, _keys(1))
  assert idx.shape == (REPS, cap) and idx.dtype == jnp.int32 and mask.dtype == jnp.bool_
  _assert_distinct_valid(idx, mask, n)
  counts = _inclusion_counts(idx, mask, n)
  assert _binomial_pvalue(counts, REPS, q) > P_MIN
  # The kept entries come first.
  m = np.asarray(mask)
  assert np.all(m == (np.arange(cap) < m.sum(1, keepdims=True)))


def test_poisson_batch_size_law_and_truncation():
  n, q, cap = 1000, 0.05, 55
  sampler = S.poisson(n, q, cap)
  idx, mask = _draws(sampler.sample, _keys(2))
  kept = np.asarray(mask).sum(1)
  # min(K, cap) with K ~ Binomial(N, q): cells 0..cap-1 and the truncated cell.
  probs = np.append(stats.binom.pmf(np.arange(cap), n, q), stats.binom.sf(cap - 1, n, q))
  observed = np.bincount(kept, minlength=cap + 1)
  lo = probs * REPS >= 5  # pool sparse cells
  obs = np.append(observed[lo], observed[~lo].sum())
  exp = np.append(probs[lo], probs[~lo].sum())
  assert _chi2_pvalue(obs, exp) > P_MIN
  truncated = np.mean(kept == cap)
  p_trunc = stats.binom.sf(cap - 1, n, q)  # P[K >= cap]
  assert abs(truncated - p_trunc) < 4.5 * np.sqrt(p_trunc * (1 - p_trunc) / REPS)
  _assert_distinct_valid(idx, mask, n)
  assert 0.0 < sampler.truncation_probability < 1.0
  np.testing.assert_allclose(sampler.expected_batch_size, kept.mean(), rtol=0.01)


def test_poisson_count_beyond_float32_integers():
  n, q, cap = 2 ** 24 + 7, 1e-6, 64  # the binomial draw is split into exact chunks
  sampler = S.poisson(n, q, cap)
  kept = np.asarray(_draws(sampler.sample, _keys(3, 4000))[1]).sum(1).astype(float)
  mean, var = n * q, n * q * (1 - q)
  assert abs(kept.mean() - mean) < 4.5 * np.sqrt(var / kept.size)
  assert abs(kept.var() / var - 1) < 0.1


@pytest.mark.parametrize("n, q, cap", [
    (4, 0.5, 4),  # plain Poisson: P(S) = q^|S| (1-q)^(N-|S|)
    (4, 0.5, 2),  # truncated (permutation path)
    (8, 0.25, 2),  # truncated (draw-and-redraw path)
])
def test_poisson_subsets_are_uniform(n, q, cap):
  sampler = S.poisson(n, q, cap)
  idx, mask = _draws(sampler.sample, _keys(4))
  subsets = [frozenset(r[m].tolist()) for r, m in zip(np.asarray(idx), np.asarray(mask))]
  cells, probs = [], []
  for size in range(min(n, cap) + 1):
    if size < cap:
      p = stats.binom.pmf(size, n, q)
    else:
      p = stats.binom.sf(size - 1, n, q)
    for subset in itertools.combinations(range(n), size):
      cells.append(frozenset(subset))
      probs.append(p / stats.binom.pmf(size, n, 0.5) / 2 ** n)  # p / C(n, size)
  counts = {c: 0 for c in cells}
  for s in subsets:
    counts[s] += 1
  np.testing.assert_allclose(sum(probs), 1.0)
  assert _chi2_pvalue([counts[c] for c in cells], probs) > P_MIN


def test_poisson_edge_rates():
  key = jax.random.key(0)
  idx, mask = jax.jit(S.poisson(100, 0.0, 10).sample)(key)
  assert not mask.any() and not idx.any()
  idx, mask = jax.jit(S.poisson(100, 1.0, 30).sample)(key)
  assert mask.all()
  _assert_distinct_valid(idx, mask, 100)


# --------------------------------------------------------------------------
# fixed
# --------------------------------------------------------------------------


def test_fixed_distinct_and_inclusion():
  n, b = 400, 25
  sampler = S.fixed(n, b)
  idx, mask = _draws(sampler.sample, _keys(5))
  assert idx.shape == (REPS, b) and np.asarray(mask).all()
  _assert_distinct_valid(idx, mask, n)
  assert _binomial_pvalue(_inclusion_counts(idx, mask, n), REPS, b / n) > P_MIN


@pytest.mark.parametrize("n, b", [(8, 2), (5, 2)])
def test_fixed_ordered_pairs_are_uniform(n, b):
  # The draw-and-redraw path (8 >= 4·2) and the permutation path: the batch is
  # a uniformly random injective sequence, so ordered pairs are uniform.
  idx, _ = _draws(S.fixed(n, b).sample, _keys(6))
  pairs = np.asarray(idx) @ np.array([n, 1])
  counts = np.bincount(pairs, minlength=n * n)
  cells = [i * n + j for i in range(n) for j in range(n) if i != j]
  assert counts.sum() == counts[cells].sum()
  assert _chi2_pvalue(counts[cells], np.full(len(cells), 1 / len(cells))) > P_MIN


# --------------------------------------------------------------------------
# balls in bins
# --------------------------------------------------------------------------


def _epoch(sampler, key):
  steps = jnp.arange(sampler.steps_per_epoch)
  return jax.jit(jax.vmap(sampler.sample, in_axes=(None, 0)))(key, steps)


def test_balls_in_bins_epochs_cover_every_example_once():
  sampler = S.balls_in_bins(103, 10, 103)
  k = sampler.steps_per_epoch
  assert k == 10
  key = jax.random.key(12)
  idx, mask = _draws(lambda t: sampler.sample_at(key, t), jnp.arange(3 * k))
  assert idx.shape == (3 * k, 103)
  _assert_distinct_valid(idx, mask, 103)
  for e in range(3):
    valid = np.asarray(idx[e * k:(e + 1) * k])[np.asarray(mask[e * k:(e + 1) * k])]
    assert sorted(valid.tolist()) == list(range(103))
  assert not np.array_equal(np.asarray(idx[:k]), np.asarray(idx[k:2 * k]))


def test_balls_in_bins_inclusion_per_step():
  n, b = 60, 12
  sampler = S.balls_in_bins(n, b, 40)
  k = sampler.steps_per_epoch
  step = jnp.arange(REPS) % k
  idx, mask = _draws(sampler.sample, _keys(7), step)
  assert _binomial_pvalue(_inclusion_counts(idx, mask, n), REPS, 1 / k) > P_MIN
  sizes = np.asarray(mask).sum(1)
  probs = stats.binom.pmf(np.arange(n + 1), n, 1 / k)
  lo = probs * REPS >= 5
  hist = np.bincount(sizes, minlength=n + 1)
  obs = np.append(hist[lo], hist[~lo].sum())
  assert _chi2_pvalue(obs, np.append(probs[lo], probs[~lo].sum())) > P_MIN


def test_balls_in_bins_truncation_is_uniform():
  # Bins cut to capacity 2: a bin of 3 drops one drawn rank, bins of 4 and 5
  # keep two drawn ranks. Given the bin, the kept pair must be uniform.
  n, b, cap = 12, 3, 2
  full, cut = S.balls_in_bins(n, b, n), S.balls_in_bins(n, b, cap)
  keys, step = _keys(8), jnp.arange(REPS) % full.steps_per_epoch
  fi, fm = map(np.asarray, _draws(full.sample, keys, step))  # the same bins, uncut
  ci, cm = map(np.asarray, _draws(cut.sample, keys, step))
  member = (ci[:, :, None] == np.where(fm, fi, -1)[:, None, :]).any(-1)
  assert np.all(member[cm]) and np.all(cm.sum(1) == np.minimum(fm.sum(1), cap))
  for count in (3, 4, 5):
    rows = fm.sum(1) == count
    pair_counts = {}
    for f_row, c_row in zip(fi[rows], ci[rows]):
      members = f_row[:count].tolist()  # the whole bin, in index order
      ranks = tuple(sorted(members.index(i) for i in c_row[:cap]))
      pair_counts[ranks] = pair_counts.get(ranks, 0) + 1
    cells = list(itertools.combinations(range(count), cap))
    assert set(pair_counts) <= set(cells)
    obs = [pair_counts.get(c, 0) for c in cells]
    assert sum(obs) > 500
    assert _chi2_pvalue(obs, np.full(len(cells), 1 / len(cells))) > P_MIN


# --------------------------------------------------------------------------
# shuffle
# --------------------------------------------------------------------------


def test_shuffle_epoch_blocks():
  n, b = 53, 10
  sampler = S.shuffle(n, b)
  k = sampler.steps_per_epoch
  for seed in range(3):
    key = jax.random.key(seed)
    idx, mask = _epoch(sampler, key)
    assert idx.shape == (k, b) and np.asarray(mask).all()
    flat = np.asarray(idx).reshape(-1)
    assert len(np.unique(flat)) == k * b  # at most once per epoch
    # exactly the first kB of the epoch's permutation of all n examples
    perm = np.asarray(permutation.permute(key, np.arange(n), n, (k + 1) * b))
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    np.testing.assert_array_equal(flat, perm[:k * b])


def test_shuffle_inclusion_per_step():
  n, b = 30, 7
  sampler = S.shuffle(n, b)
  step = jnp.arange(REPS) % sampler.steps_per_epoch
  idx, mask = _draws(sampler.sample, _keys(9), step)
  assert _binomial_pvalue(_inclusion_counts(idx, mask, n), REPS, b / n) > P_MIN


# --------------------------------------------------------------------------
# every sampler: jit, vmap, scan, sample_at, events
# --------------------------------------------------------------------------

SAMPLERS = {
    "poisson": lambda: S.poisson(100, 0.1, 24),
    "fixed": lambda: S.fixed(100, 8),
    "balls_in_bins": lambda: S.balls_in_bins(100, 10, 16),
    "shuffle": lambda: S.shuffle(100, 12),
}


def _width(sampler):
  return getattr(sampler, "capacity", None) or sampler.batch_size


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_an_eager_draw_is_one_program_with_the_op_by_op_bits(name, record_compilations):
  """An eager sample / sample_at runs one jitted program (sampling_base.run_compiled,
  which jaxdp's disk cache keeps for later processes) and draws exactly what
  the same calls give operation by operation (jax.disable_jit)."""
  sampler = SAMPLERS[name]()
  step_args = () if name in ("poisson", "fixed") else (1,)
  key = jax.random.key(3) if name in ("poisson", "shuffle") else jax.random.PRNGKey(4)
  with record_compilations() as compiles:
    at = sampler.sample_at(key, 5)
    one = sampler.sample(key, *step_args)
  assert len(compiles) <= 2   # one program each (none when already built)
  with jax.disable_jit():     # op by op (each operation compiled alone: the slow part)
    at_ops = sampler.sample_at(key, 5)
  for g, w in zip(at, at_ops):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
  for g, w in zip(one, jax.jit(sampler._draw)(key, *step_args)):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_static_shapes_under_jit_vmap_scan(name):
  sampler = SAMPLERS[name]()
  width = _width(sampler)
  key = jax.random.key(11)
  steps = 3 * (sampler.steps_per_epoch or 1)

  # The sampler is hashable: a static argument.
  @functools.partial(jax.jit, static_argnums=0)
  def run(sampler, key):
    def body(total, t):
      idx, mask = sampler.sample_at(key, t)
      return total + mask.sum(), (idx, mask)
    return jax.lax.scan(body, jnp.int32(0), jnp.arange(steps))

  total, (idx, mask) = run(sampler, key)
  assert idx.shape == (steps, width) and idx.dtype == jnp.int32
  assert mask.shape == (steps, width) and mask.dtype == jnp.bool_
  assert int(total) == int(np.asarray(mask).sum()) > 0
  _assert_distinct_valid(idx, mask, sampler.dataset_size)
  # vmap over steps gives the same batches as the scan.
  vi, vm = _draws(lambda t: sampler.sample_at(key, t), jnp.arange(steps))
  np.testing.assert_array_equal(vi, idx)
  np.testing.assert_array_equal(vm, mask)


def test_events():
  p = S.poisson(1000, 0.01, 40)
  assert p.event(1.1) == E.TruncatedPoissonGaussian(1000, 0.01, 40, 1.1)
  assert S.poisson(1000, 0.01, 1000).event(1.1) == E.SampledGaussian(0.01, 1.1)
  assert S.fixed(1000, 10).event(2.0) == E.SampledWithoutReplacementGaussian(
      1000, 10, 2.0, "replace_one")
  assert S.fixed(1000, 10, relation="add_remove").event(2.0).relation == "add_remove"
  ev = S.balls_in_bins(1000, 10, 30).event(1.0)
  assert ev == E.BallsInBinsGaussian(1000, 10, 1.0, 30)
  assert S.balls_in_bins(1000, 10, 1000).event(1.0).capacity is None
  assert S.shuffle(1000, 10).event(1.0) == E.ShuffledGaussian(1000, 10, 1.0, "add_remove")
  with pytest.raises(ValueError, match="sigma"):
    p.event(0.0)
  for sampler, relation in [(p, "add_remove"), (S.fixed(10, 2), "replace_one"),
                            (S.balls_in_bins(10, 2, 3), "add_remove"),
                            (S.shuffle(10, 2, "replace_one"), "replace_one")]:
    assert sampler.relation == relation
  assert p.batch_size == pytest.approx(10.0) and p.steps_per_epoch == 100
  assert S.balls_in_bins(105, 10, 30).expected_batch_size == pytest.approx(10.5)


def test_sampler_events_are_pytrees_with_static_relation():
  ev = E.SampledWithoutReplacementGaussian(100, 10, 1.5, "add_remove")
  leaves, treedef = jax.tree_util.tree_flatten(ev)
  assert leaves == [100, 10, 1.5]
  assert jax.tree_util.tree_unflatten(treedef, leaves) == ev
  np.testing.assert_allclose(jax.jit(lambda e: e.sigma * 2)(ev), 3.0)
  doubled = jax.jit(lambda e: jax.tree_util.tree_map(lambda x: 2 * x, e))(ev)
  assert isinstance(doubled, E.SampledWithoutReplacementGaussian)
  assert doubled.relation == "add_remove" and int(doubled.batch_size) == 20
  assert jax.tree_util.tree_map(lambda x: None, ev).relation == "add_remove"
  sh = E.ShuffledGaussian(jnp.full(3, 100), jnp.arange(1, 4), jnp.ones(3), "replace_one")
  out = jax.vmap(lambda e: e.sigma * e.batch_size)(sh)
  np.testing.assert_allclose(out, [1.0, 2.0, 3.0])
  total, _ = jax.lax.scan(lambda c, e: (c + e.sigma, None), 0.0, sh)
  np.testing.assert_allclose(total, 3.0)
  bb = E.BallsInBinsGaussian(100, 10, 1.0)
  assert jax.tree_util.tree_leaves(bb) == [100, 10, 1.0]
  assert jax.jit(lambda e: e)(bb).capacity is None
  assert E.validate(ev) is ev


@pytest.mark.parametrize("make, match", [
    (lambda: E.TruncatedPoissonGaussian(0, 0.1, 5, 1.0), r"TruncatedPoissonGaussian.dataset_size"),
    (lambda: E.TruncatedPoissonGaussian(10, 1.1, 5, 1.0), r"TruncatedPoissonGaussian.q .*1\.1"),
    (lambda: E.TruncatedPoissonGaussian(10, 0.1, 2.5, 1.0), r"capacity must be a whole number"),
    (lambda: E.TruncatedPoissonGaussian(10, 0.1, 5, float("nan")), r"sigma must not be NaN"),
    (lambda: E.SampledWithoutReplacementGaussian(10, 11, 1.0), r"batch_size must be <= .* 11 > 10"),
    (lambda: E.SampledWithoutReplacementGaussian(10, 1, 1.0, "replace"), r"relation .*'replace'"),
    (lambda: E.SampledWithoutReplacementGaussian(np.array([10, 5]), np.array([2, 6]), 1.0),
     r"index \(1,\)"),
    (lambda: E.BallsInBinsGaussian(10, 2, 1.0, 0), r"BallsInBinsGaussian.capacity"),
    (lambda: E.ShuffledGaussian(10, 2, -1.0), r"ShuffledGaussian.sigma"),
    (lambda: E.ShuffledGaussian(10, 2, 1.0, None), r"ShuffledGaussian.relation"),
])
def test_bad_sampler_events_raise(make, match):
  with pytest.raises(ValueError, match=match):
    make()


@pytest.mark.parametrize("make, match", [
    (lambda: S.poisson(0, 0.1, 5), r"dataset_size .*0"),
    (lambda: S.poisson(10.5, 0.1, 5), r"dataset_size must be a whole number; found 10\.5"),
    (lambda: S.poisson(2 ** 31, 0.1, 5), r"dataset_size"),
    (lambda: S.poisson(10, 1.5, 5), r"q .*1\.5"),
    (lambda: S.poisson(10, -0.1, 5), r"q "),
    (lambda: S.poisson(10, float("nan"), 5), r"q must not be NaN"),
    (lambda: S.poisson(10, 0.1, 0), r"capacity .*0"),
    (lambda: S.poisson(10, 0.1, None), r"capacity"),
    (lambda: S.poisson(10, 0.1, True), r"capacity must be a whole number; found True"),
    (lambda: S.fixed(10, 11), r"batch_size must be <= dataset_size = 10; found 11"),
    (lambda: S.fixed(10, 0), r"batch_size .*0"),
    (lambda: S.fixed(10, 2.5), r"batch_size must be a whole number"),
    (lambda: S.fixed(10, 2, relation="add-remove"), r"relation .*'add-remove'"),
    (lambda: S.fixed(float("nan"), 2), r"dataset_size must not be NaN"),
    (lambda: S.balls_in_bins(10, 20, 5), r"batch_size"),
    (lambda: S.balls_in_bins(10, 2, 0), r"capacity"),
    (lambda: S.balls_in_bins(10, 2, 3.5), r"capacity must be a whole number"),
    (lambda: S.shuffle(10, 0), r"batch_size"),
    (lambda: S.shuffle(10, 2, relation="zero_out"), r"relation"),
    (lambda: S.FixedSampler(10, 20), r"batch_size"),  # direct construction validates too
    (lambda: S.shuffle(10, 3).sample(jax.random.key(0), 3), r"step .*3"),
    (lambda: S.balls_in_bins(10, 3, 4).sample(jax.random.key(0), -1), r"step"),
])
def test_bad_inputs_raise_value_error_naming_argument(make, match):
  with pytest.raises(ValueError, match=match):
    make()


def test_samplers_are_immutable_and_normalised():
  s = S.poisson(np.int64(100), np.float32(0.25), 10.0)
  assert type(s.dataset_size) is int and type(s.capacity) is int and type(s.q) is float
  with pytest.raises(AttributeError):
    s.q = 0.5
  assert S.fixed(10, 2) == S.fixed(10, 2) and hash(S.fixed(10, 2)) == hash(S.fixed(10, 2))
