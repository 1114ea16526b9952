"""The host read-out of composed PLD windows (jaxdp/_src/pld/readout.py).

``epsilon_on_windows`` reads ε(δ) in two passes (δ at the first node of every
block, then every node of the crossing block).  Checked here against two
independent references on windows of every shape the kernel produces and
beyond (lengths 1 to 40 000, grid intervals 1e-6 to 40, masses over 250
orders of magnitude, atoms at +∞, per-node allowances, several targets):

* brute force: δ(ε) of the discrete PMF summed directly with ``math.fsum``,
  exact to ~1 ulp; the upper bound must satisfy δ(upper) <= target and the
  lower bound δ(lower) >= target (both are then valid, whatever the code);
* the full node pass (δ and S at every node from ``_full_node_values``, the
  read-out's previous algorithm, tested below, then the last node above
  the target): the two passes must find the same answer up to round-off.
"""

import math

import numpy as np
import pytest

from jaxdp._src.pld import readout as R


def _direct_delta(w, start, h, inf_mass, eps):
  """δ(ε) = Σ_{ℓ_k > ε} w_k (1 - e^{ε - ℓ_k}) + p_∞, summed exactly (fsum)."""
  loss = (start + np.arange(len(w))) * h
  sel = loss > eps
  return math.fsum((w[sel] * -np.expm1(eps - loss[sel])).tolist()) + inf_mass


def _full_node_values(w, h):
  """(D, S) at every node of one window w (1-D): D_k = Σ_{m>k} w_m (1 -
  e^{-(m-k)h}) and S_k = Σ_{m>k} w_m e^{-(m-k)h}, by the recursion
  D_k - D_{k+1} = (1 - e^{-h})(w_{k+1} + S_{k+1}) with S from the blocked
  suffix sums of jaxdp.pld_general (the read-out's previous algorithm, kept
  here as a reference; checked below against direct sums and the plain
  recursion)."""
  from jaxdp._src.pld.general_readout import discounted_suffix_sums
  w = np.asarray(w, np.float64)
  nxt = lambda x: np.append(x[1:], 0.0)  # noqa: E731
  s = math.exp(-h) * nxt(discounted_suffix_sums(w, math.exp(-h)))
  d = np.cumsum((-math.expm1(-h) * (nxt(w) + nxt(s)))[::-1])[::-1]
  return d, s


def _full_pass(w, start, h, inf_mass, targets, lower, per_node):
  """The read-out before the two-pass search: every node's δ, then the last
  node above each target (same allowances)."""
  size = len(w)
  d, s = _full_node_values(w, h)
  infl = 64.0 * size * np.finfo(np.float64).eps
  above = per_node * np.arange(size - 1, -1, -1, dtype=np.float64)
  d = (d * (1.0 - infl) - above if lower else d * (1.0 + infl) + above) + inf_mass
  out = []
  for t in targets:
    hit = np.flatnonzero(d > t)
    if not len(hit):
      out.append(-np.inf if lower else start * h)
      continue
    k = hit[-1]
    x = math.log1p(max(d[k] - t, 0.0) / s[k]) if s[k] > 0 else h
    e = (start + k) * h + min(max(x, 0.0), h)
    out.append(e - 4 * 2.2e-16 * max(abs(e), 1) if lower else e + 4 * 2.2e-16 * max(abs(e), 1))
  out = np.array(out)
  return np.where(inf_mass > np.asarray(targets), np.inf, out)


def _window(rng, n, kind):
  if kind == "gauss":        # a composed PLD: a bump with far tails
    x = np.linspace(-6, 6, n)
    w = np.exp(-0.5 * x ** 2) + 1e-30 * rng.random(n)
  elif kind == "spread":     # masses over 250 orders of magnitude
    w = rng.random(n) * np.exp(rng.uniform(-570, 0, n))
  else:                      # sparse atoms
    w = np.where(rng.random(n) < 0.01, rng.random(n), 0.0)
    w[-1] = 1e-3
  return w / w.sum()


CASES = [(n, h, kind) for n, h, kind in [
    (1, 0.1, "gauss"), (2, 0.3, "gauss"), (255, 1e-3, "spread"), (256, 1e-3, "gauss"),
    (257, 0.05, "sparse"), (1000, 1e-6, "gauss"), (1000, 2.0, "spread"), (3001, 40.0, "gauss"),
    (5000, 3e-4, "sparse"), (12345, 3.6e-4, "gauss"), (40000, 1e-3, "gauss"),
    (40000, 5e-5, "spread")]]


@pytest.mark.parametrize("n,h,kind", CASES)
@pytest.mark.parametrize("lower", [False, True])
def test_two_pass_read_out_is_valid_and_matches_the_full_pass(n, h, kind, lower):
  rng = np.random.default_rng(n + int(1e6 * h))
  w = _window(rng, n, kind)
  start = int(rng.integers(-n, 2))
  for inf_mass, per_node in [(0.0, 0.0), (1e-9, 1e-22)]:
    # Targets across the whole profile: the node values themselves
    # (crossings exactly at nodes), points between them, the extremes.
    d_full = np.array([_direct_delta(w, start, h, 0.0, (start + k) * h) for k in
                       np.linspace(0, n - 1, min(n, 7)).astype(int)])
    targets = np.concatenate([d_full[d_full > 0], d_full[d_full > 0] * 0.999,
                              [1e-17, 1e-12, 1e-5, 0.3, 0.999]])
    targets = targets[(targets > 0) & (targets < 1)]
    got = R.epsilon_on_window(w if lower else np.maximum(w, 0), start, h, inf_mass, targets,
                              lower=lower, per_node=per_node)
    ref = _full_pass(w, start, h, inf_mass, targets, lower, per_node)
    for g, r, t in zip(got, ref, targets):
      if lower:
        assert g == -np.inf or _direct_delta(w, start, h, inf_mass, g) >= t, (g, t)
      elif np.isfinite(g):
        assert _direct_delta(w, start, h, inf_mass, g) <= t, (g, t)
      else:
        assert inf_mass > t
      # Same answer as the full pass up to the round-off of the sums: a few
      # ulps of ε where δ is steep, up to ~1e-9 relative where it is flat
      # (near δ = 1), compared in δ there.
      if g != r and abs(g - r) > 64 * np.finfo(np.float64).eps * max(abs(r), 1.0):
        assert np.isfinite(g) and np.isfinite(r), (g, r, t)
        dg, dr = (_direct_delta(w, start, h, inf_mass, x) for x in (g, r))
        assert abs(dg - dr) <= 1e-9 * t, (g, r, dg, dr, t)


def test_noisy_optimistic_window_keeps_valid_lower_bounds():
  """Optimistic windows carry FFT noise (tiny negative masses): δ is then
  non-increasing only up to the noise, and the lower bound must still be
  below the exact crossing of the noisy PMF's own δ."""
  rng = np.random.default_rng(7)
  n, h = 20000, 2e-4
  w = _window(rng, n, "gauss") + rng.normal(0, 1e-17, n)
  targets = np.array([1e-5, 1e-8, 1e-12])
  got = R.epsilon_on_window(w, -n // 2, h, 0.0, targets, lower=True, per_node=4e-17)
  for g, t in zip(got, targets):
    assert np.isfinite(g)
    assert _direct_delta(w, -n // 2, h, 0.0, g) >= t


def test_windows_read_together_as_alone():
  """A batch of windows of different lengths, grid intervals (one of them
  coarse enough for shorter blocks), allowances and targets, zero-padded to
  one width, reads as each window alone (to a few ulps: the batch's block
  length is its shortest, which changes the order of the sums)."""
  rng = np.random.default_rng(3)
  cases = [(n, h) for n, h in [(1, 0.1), (700, 3e-4), (5000, 1e-3), (12345, 2e-4), (300, 0.2)]]
  width = max(n for n, _ in cases) + 17
  win = np.zeros((len(cases), width))
  for i, (n, h) in enumerate(cases):
    win[i, :n] = _window(rng, n, "gauss")
  length = np.array([n for n, _ in cases])
  start = rng.integers(-5000, 10, len(cases))
  h = np.array([h for _, h in cases])
  inf_mass = np.array([0.0, 1e-12, 0.0, 1e-9, 0.0])
  per_node = np.array([0.0, 1e-20, 1e-22, 0.0, 1e-25])
  targets = np.exp(rng.uniform(np.log(1e-14), np.log(0.5), (len(cases), 3)))
  for lower in (False, True):
    got = R.epsilon_on_windows(win, length, start, h, inf_mass, targets, lower, per_node)
    for i, n in enumerate(length):
      alone = R.epsilon_on_window(win[i, :n], start[i], h[i], inf_mass[i], targets[i], lower,
                                  per_node[i])
      fin = np.isfinite(alone)
      np.testing.assert_array_equal(got[i][~fin], alone[~fin])
      assert np.all(np.abs(got[i][fin] - alone[fin]) <= 16 * 2.3e-16 * np.maximum(
          np.abs(alone[fin]), 1.0))


def test_a_window_reads_the_same_whatever_is_read_with_it():
  """Bit for bit: a window's bounds do not depend on the other windows of
  the batch (their number, lengths and the padding they force). Upper
  bounds alone and full evaluations read different batches of windows and
  must agree exactly (tests/pld/test_pld_upper_only.py)."""
  rng = np.random.default_rng(11)
  lens = [20000, 700, 33000, 5, 12000, 257]
  wins = [_window(rng, n, kind) for n, kind in zip(lens, ["spread", "gauss", "gauss", "sparse",
                                                          "spread", "gauss"])]
  # (the 33 000-node window spans 33 loss units: its block sums take another
  # method than the others', which must not change theirs)
  h = np.array([3e-4, 2e-4, 1e-3, 3e-4, 5e-5, 1e-3])
  targets = np.array([[1e-5, 1e-9]] * len(lens))

  def read(sel, extra_width=0):
    width = max(lens[i] for i in sel) + extra_width
    win = np.zeros((len(sel), width))
    for r, i in enumerate(sel):
      win[r, :lens[i]] = wins[i]
    return {i: R.epsilon_on_windows(win, [lens[i] for i in sel], [-lens[i] // 3 for i in sel],
                                    h[sel], 1e-12, targets[sel], lower, 1e-21)[r]
            for r, i in enumerate(sel)}

  # The coarse pass's block values themselves (an ulp there moves ε only
  # now and then), at the batch's block length.
  b = 256

  def coarse(sel, extra_width=0):
    nb = -(-(max(lens[i] for i in sel) + extra_width) // b)
    x = np.zeros((len(sel), nb * b))
    for r, i in enumerate(sel):
      x[r, :lens[i]] = wins[i]
    d, i_blk = R._coarse(x.reshape(len(sel), nb, b), h[sel], np.array([lens[i] for i in sel]))
    return {i: (d[r, :-(-lens[i] // b)], i_blk[r, :-(-lens[i] // b)]) for r, i in enumerate(sel)}

  single = {i: coarse([i])[i] for i in range(len(lens))}
  for sel, extra in [([0, 1, 2, 3, 4, 5], 0), ([2, 0], 999), ([5, 3, 1], 40000), ([4, 0, 2], 3)]:
    for i, (d, i_blk) in coarse(sel, extra).items():
      np.testing.assert_array_equal(d, single[i][0])
      np.testing.assert_array_equal(i_blk, single[i][1])
  for lower in (False, True):
    alone = {i: read([i])[i] for i in range(len(lens))}
    for sel, extra in [([0, 1, 2, 3, 4, 5], 0), ([2, 0], 999), ([5, 3, 1], 40000), ([4, 0, 2], 3)]:
      for i, got in read(sel, extra).items():
        np.testing.assert_array_equal(got, alone[i])


def test_block_sums_do_not_depend_on_the_batch_shape():
  """The coarse pass's per-block sums, on adversarial data (magnitudes over
  30 decades), are bit for bit the same whatever the number of windows and
  blocks in the batch (a BLAS matrix product need not be: on slices of one
  batch it differed by an ulp in ~1/3 of such comparisons)."""
  rng = np.random.default_rng(5)
  b = 256
  for nb in [3, 40, 79, 200]:
    x = rng.random((8, nb, b)) * 10.0 ** rng.uniform(-30, 0, (8, nb, b))
    h = np.full(8, 1e-4) * rng.uniform(1, 3, 8)
    full = R._coarse(x, h, np.full(8, nb * b))
    for m, nb2 in [(3, nb // 2 + 1), (8, 1), (5, nb)]:
      sub = R._coarse(np.ascontiguousarray(x[:m, :nb2]), h[:m], np.full(m, nb2 * b))
      for r in range(m):   # each row of the batch as that row alone
        alone = R._coarse(np.ascontiguousarray(x[r:r + 1, :nb2]), h[r:r + 1], np.array([nb2 * b]))
        np.testing.assert_array_equal(sub[0][r], alone[0][0])
        np.testing.assert_array_equal(sub[1][r], alone[1][0])
    padded = np.concatenate([x, np.zeros((8, 9, b))], axis=1)
    got = R._coarse(padded, h, np.full(8, nb * b))
    np.testing.assert_array_equal(got[0][:, :nb], full[0])
    np.testing.assert_array_equal(got[1][:, :nb], full[1])
    one = R._coarse(x[2:3], h[2:3], np.full(1, nb * b))
    np.testing.assert_array_equal(one[0][0], full[0][2])
    np.testing.assert_array_equal(one[1][0], full[1][2])


def test_a_non_finite_window_reads_nan_and_leaves_the_others_alone():
  rng = np.random.default_rng(2)
  win = np.stack([_window(rng, 3000, "gauss") for _ in range(3)])
  alone = R.epsilon_on_windows(win[:1], [3000], [-1000], [2e-4], [0.0], [[1e-5]])
  win[1, 17], win[2, 2999] = np.nan, np.inf
  got = R.epsilon_on_windows(win, [3000] * 3, [-1000] * 3, [2e-4] * 3, [0.0] * 3, [[1e-5]] * 3)
  assert got[0, 0] == alone[0, 0] and np.isnan(got[1:]).all()


def _direct_grid_deltas(w, h):
  n = len(w)
  d = np.array([np.sum(w[k + 1:] * -np.expm1(-(np.arange(k + 1, n) - k) * h)) for k in range(n)])
  s = np.array([np.sum(w[k + 1:] * np.exp(-(np.arange(k + 1, n) - k) * h)) for k in range(n)])
  return d, s


@pytest.mark.parametrize("n,h", [(9, 0.3), (3000, 0.5), (4000, 2.0)])
def test_full_node_values_match_direct_sums_on_wide_windows(n, h):
  """Windows spanning 1500-8000 loss units (the old code overflowed past ~1400)."""
  rng = np.random.default_rng(n)
  w = rng.random(n) ** 6
  w /= w.sum()
  d, s = _full_node_values(w, h)
  d_ref, s_ref = _direct_grid_deltas(w, h)
  assert np.all(np.isfinite(d)) and np.all(np.isfinite(s))
  np.testing.assert_allclose(d, d_ref, rtol=1e-12, atol=1e-300)
  np.testing.assert_allclose(s, s_ref, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("n", [1, 5, 32, 33, 1000, 4096, 2 ** 15 + 7])
def test_window_read_out_matches_the_recursion(n):
  """The reference's (D, S) (blocked suffix sums) equal the backward
  recursions S_k = c (w_{k+1} + S_{k+1}) and D_k = D_{k+1} + (1 - c)(w_{k+1} +
  S_{k+1}), for tiny and huge grid intervals (c = e^{-h} down to underflow)
  and weights over 20 orders of magnitude."""
  rng = np.random.default_rng(n)
  w = rng.exponential(size=n) * np.exp(rng.uniform(-50, 0, n))
  for h in [1e-6, 1e-3, 0.3, 5.0, 800.0]:
    c = math.exp(-h)
    d, s = _full_node_values(w, h)
    s_ref, d_ref, acc_s, acc_d = np.zeros(n), np.zeros(n), 0.0, 0.0
    for k in range(n - 2, -1, -1):
      acc_d += -math.expm1(-h) * (w[k + 1] + acc_s)
      acc_s = c * (w[k + 1] + acc_s)
      s_ref[k], d_ref[k] = acc_s, acc_d
    assert np.all(np.isfinite(s)) and np.all(np.isfinite(d))
    assert np.max(np.abs(s - s_ref) / np.maximum(s_ref, 1e-300)) < 1e-12, h
    assert np.max(np.abs(d - d_ref) / np.maximum(d_ref, 1e-300)) < 1e-12, h
