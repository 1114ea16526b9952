"""Tests for jaxdp.pld: PLD accounting of the Poisson-subsampled Gaussian.

Oracles: an mpmath closed form of the one-step profile (the privacy loss is
monotone in the output, so δ(ε) is a difference of Gaussian tails), and
dp_accounting's / prv_accountant's accountants (test-only).
"""

import functools

import mpmath as mp
import numpy as np
import pytest

from jaxdp import events, pld

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import pld_privacy_accountant  # noqa: E402
from jaxdp._src.pld import kernel as pld_impl


# --------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------


def _ref_one_step_delta(eps, q, sigma, dps=40):
  """Exact δ(ε) of one Poisson-sampled Gaussian step, max over add/remove.

  Remove: P = (1-q)N(0,σ²) + qN(1,σ²), Q = N(0,σ²); L(x) = log(1-q+q e^{(2x-1)/2σ²})
  increasing, so {L > ε} = {x > x_ε} with x_ε = σ² log((e^ε-(1-q))/q) + 1/2.
  Add: P = N(0,σ²), Q = mixture; {-L > ε} = {x < x_{-ε}} (empty if -ε <= log(1-q)).
  """
  with mp.workdps(dps):
    eps, q, s = mp.mpf(eps), mp.mpf(q), mp.mpf(sigma)
    sf = lambda z: mp.erfc(z / mp.sqrt(2)) / 2
    cdf = lambda z: mp.erfc(-z / mp.sqrt(2)) / 2

    def x_of(l):
      return s ** 2 * mp.log((mp.e ** l - (1 - q)) / q) + mp.mpf(1) / 2

    x = x_of(eps)
    d_rem = (1 - q) * sf(x / s) + q * sf((x - 1) / s) - mp.e ** eps * sf(x / s)
    if -eps > mp.log(1 - q) if q < 1 else True:
      x2 = x_of(-eps)
      d_add = cdf(x2 / s) - mp.e ** eps * ((1 - q) * cdf(x2 / s) + q * cdf((x2 - 1) / s))
    else:
      d_add = mp.mpf(0)
    return float(max(d_rem, d_add))


@functools.lru_cache(maxsize=None)
def _dp_accounting_epsilon(q, sigma, steps, delta):
  acc = pld_privacy_accountant.PLDAccountant()
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


def _rdp_epsilon(q, sigma, steps, delta, use_jaxdp=False):
  if use_jaxdp:  # slow to compile: only in the slow test
    from jaxdp import rdp
    return float(rdp.dpsgd_epsilon(q, sigma, steps, delta))
  from dp_accounting import rdp as dp_rdp
  acc = dp_rdp.RdpAccountant()
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


# Moderate DP-SGD configurations: (q, sigma, steps, delta).
CONFIGS = [
    (0.01, 1.0, 1000, 1e-5),
    (0.1, 2.0, 200, 1e-6),
    (1.0, 5.0, 10, 1e-5),
]


@pytest.fixture(scope="module")
def batch_bounds():
  q, s, t, d = map(np.array, zip(*CONFIGS))
  return pld.epsilon(q, s, t, d, return_bounds=True)


# --------------------------------------------------------------------------
# accuracy against references
# --------------------------------------------------------------------------


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_agrees_with_dp_accounting(batch_bounds, i):
  lo, up = batch_bounds
  ref = _dp_accounting_epsilon(*CONFIGS[i])
  assert abs(up[i] / ref - 1) < 5e-3
  # The certified interval contains dp_accounting's (pessimistic) value and
  # is narrow (second-order discretisation on both ends).
  assert lo[i] <= ref <= up[i]
  assert up[i] - lo[i] < 2e-3 * up[i]


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_below_rdp(batch_bounds, i):
  _, up = batch_bounds
  assert up[i] <= _rdp_epsilon(*CONFIGS[i])


def test_interval_contains_prv_estimate():
  prv = pytest.importorskip("prv_accountant")
  q, sigma, steps, delta = 0.01, 1.0, 1000, 1e-5
  acc = prv.Accountant(noise_multiplier=sigma, sampling_probability=q, delta=delta,
                       max_compositions=steps, eps_error=0.01)
  _, estimate, _ = acc.compute_epsilon(num_compositions=steps)
  lo, up = pld.epsilon(q, sigma, steps, delta, return_bounds=True)
  assert lo <= estimate <= up


ONE_STEP = [(0.01, 1.0), (0.2, 0.7), (1.0, 2.0), (256 / 60000, 1.1), (0.5, 0.5), (0.9, 3.0)]
ONE_STEP_EPS = np.concatenate([np.linspace(0.0, 0.1, 6), np.linspace(0.2, 3.0, 8)])


@functools.lru_cache(maxsize=None)
def _exact_profile(q, sigma):
  return np.array([_ref_one_step_delta(e, q, sigma) for e in ONE_STEP_EPS])


@pytest.mark.parametrize("q,sigma", ONE_STEP)
def test_one_step_bounds_bracket_exact_profile(q, sigma):
  lo, up = pld.delta(q, sigma, 1, ONE_STEP_EPS, return_bounds=True)
  exact = _exact_profile(q, sigma)
  assert np.all(up >= exact * (1 - 1e-12))
  # Certified optimistic end: never above the exact value.
  assert np.all(lo <= exact), (lo - exact)
  assert np.all(lo <= up)
  # and both are tight (absolute slack: each end's FFT round-off allowance)
  assert np.all(up <= exact * 1.02 + 1e-11)
  assert np.all(lo >= exact * (1 - 2e-2) - 1e-11)


@pytest.mark.parametrize("q,sigma,h", [(0.01, 1.0, 0.05), (0.2, 0.7, 0.3), (1e-4, 5.0, 0.01),
                                       (0.5, 0.5, 0.02)])
def test_one_step_lower_bound_coarse_grids(q, sigma, h):
  # Coarse user grids (including the infeasible-slack fallback, where the
  # loss spread is far below h) stay certified.
  lo, up = pld.delta(q, sigma, 1, ONE_STEP_EPS, value_discretization_interval=h,
                     return_bounds=True)
  exact = _exact_profile(q, sigma) if (q, sigma) in ONE_STEP else np.array(
      [_ref_one_step_delta(e, q, sigma) for e in ONE_STEP_EPS])
  assert np.all(lo <= exact), (lo - exact)
  assert np.all(up >= exact * (1 - 1e-12))
  assert np.all(lo <= up)


def test_lower_below_upper_batch():
  rng = np.random.default_rng(0)
  q = rng.uniform(0.001, 0.3, 8)
  sigma = rng.uniform(0.6, 3.0, 8)
  steps = rng.integers(1, 300, 8)
  eps = rng.uniform(0.0, 3.0, 8)
  lo, up = pld.delta(q, sigma, steps, eps, return_bounds=True)
  assert np.all(lo <= up)
  lo, up = pld.epsilon(q, sigma, steps, 1e-6, return_bounds=True)
  assert np.all(lo <= up)


def test_epsilon_delta_consistent():
  q, sigma, steps = 0.02, 1.2, 400
  eps = pld.epsilon(q, sigma, steps, 1e-6)
  h = pld.grid_interval(q, sigma, steps)
  assert pld.delta(q, sigma, steps, eps, value_discretization_interval=h) <= 1e-6
  assert pld.delta(q, sigma, steps, eps * 0.99, value_discretization_interval=h) > 1e-6


def test_grid_refinement_converges():
  q, sigma, steps, delta = 0.01, 1.0, 500, 1e-5
  coarse = pld.epsilon(q, sigma, steps, delta, return_bounds=True, value_discretization_interval=2e-3)
  fine = pld.epsilon(q, sigma, steps, delta, return_bounds=True, value_discretization_interval=2e-4)
  assert coarse[0] <= fine[0] <= fine[1] <= coarse[1]
  assert fine[1] - fine[0] < 0.1 * (coarse[1] - coarse[0])


# --------------------------------------------------------------------------
# API behaviour
# --------------------------------------------------------------------------


def test_broadcasting_and_duplicates():
  eps = pld.epsilon(0.01, [1.0, 1.0, 2.0], 100, [[1e-5], [1e-6]])
  assert eps.shape == (2, 3)
  assert eps[0, 0] == eps[0, 1]
  assert eps[1, 0] > eps[0, 0] > eps[0, 2]
  assert isinstance(pld.epsilon(0.01, 1.0, 100, 1e-5), np.float64)


def test_trivial_cases():
  assert pld.epsilon(0.0, 1.0, 100, 1e-5) == 0.0
  assert pld.epsilon(0.1, 1.0, 0, 1e-5) == 0.0
  assert pld.delta(0.0, 1.0, 100, 0.5) == 0.0
  # truncation and FFT round-off allowances only
  assert pld.delta(0.1, 1.0, 100, np.inf) < 1e-11


def test_monotone_in_steps():
  eps = pld.epsilon(0.01, 1.0, [10, 100, 1000], 1e-5)
  assert np.all(np.diff(eps) > 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(q=1.5), "q"),
    (dict(sigma=0.0), "sigma"),
    (dict(steps=2.5), "steps"),
    (dict(delta=0.0), "delta"),
    (dict(delta=np.nan), "delta"),
])
def test_validation(kwargs, match):
  args = dict(q=0.01, sigma=1.0, steps=10, delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    pld.epsilon(**args)
  with pytest.raises(ValueError, match="epsilon"):
    pld.delta(0.01, 1.0, 10, -1.0)


def test_accountant_matches_batch_and_dp_accounting():
  from jaxdp import accountant
  acc = accountant.pld()
  st = acc.init()
  st = acc.compose(st, events.SampledGaussian(0.01, 1.0), 600)
  st = acc.compose(st, events.SampledGaussian(0.01, 1.0), 400)
  assert st.phases == ((events.SampledGaussian(0.01, 1.0), 1000),)
  assert acc.epsilon(st, 1e-5) == pytest.approx(pld.epsilon(0.01, 1.0, 1000, 1e-5), rel=2e-3)
  st = acc.compose(st, events.Gaussian(20.0), 2)
  ref = pld_privacy_accountant.PLDAccountant()
  ref.compose(dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 1000)
  ref.compose(dp_accounting.GaussianDpEvent(20.0), 2)
  assert acc.epsilon(st, 1e-5) == pytest.approx(ref.get_epsilon(1e-5), rel=5e-3)
  assert acc.delta(st, 1.0) == pytest.approx(ref.get_delta(1.0), rel=5e-3)
  assert acc.epsilon(acc.init(), 1e-5) == 0.0
  with pytest.raises(ValueError, match="event"):
    acc.compose(st, object())


# --------------------------------------------------------------------------
# long comparisons
# --------------------------------------------------------------------------


SLOW_CONFIGS = [
    (256 / 60000, 1.1, 14062, 1e-5),
    (0.001, 0.8, 10000, 1e-5),
    (0.02, 0.6, 300, 1e-7),
    (0.05, 3.0, 5000, 1e-8),
]


@pytest.mark.slow
def test_slow_dp_sgd_configs():
  q, s, t, d = map(np.array, zip(*SLOW_CONFIGS))
  lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
  prv = pytest.importorskip("prv_accountant")
  for i, cfg in enumerate(SLOW_CONFIGS):
    ref = _dp_accounting_epsilon(*cfg)
    assert abs(up[i] / ref - 1) < 5e-3, (cfg, up[i], ref)
    assert up[i] <= _rdp_epsilon(*cfg, use_jaxdp=True)
    acc = prv.Accountant(noise_multiplier=cfg[1], sampling_probability=cfg[0], delta=cfg[3],
                         max_compositions=cfg[2], eps_error=0.01)
    _, est, _ = acc.compute_epsilon(num_compositions=cfg[2])
    assert lo[i] <= est <= up[i], (cfg, lo[i], est, up[i])
  # The headline DP-SGD number.
  assert up[0] == pytest.approx(2.382, abs=2e-3)


# --------------------------------------------------------------------------
# packed one-step layout, scans, window edges (references: plain loops and a
# brute-force convolution)
# --------------------------------------------------------------------------


def _layout(lengths, nb_pad=None):
  import jax.numpy as jnp
  rob, j0, start, n_rows = pld_impl._pack(np.array(lengths), nb_pad)
  return pld_impl._Rows(*(jnp.asarray(a) for a in (rob, j0, start, n_rows))), start


# Rows shorter than a block, exactly one block, spanning several blocks.
LENGTHS = [3, pld_impl._BLK, 2 * pld_impl._BLK + 7, 1, pld_impl._BLK - 1, 5 * pld_impl._BLK + 300]
LONG_LENGTHS = [3, 20 * pld_impl._BLK + 5, 7 * pld_impl._BLK, 17 * pld_impl._BLK + 1]   # 47 blocks


# Layouts for the multi-level scans (jaxdp._src.pld.step_layout._Rows): one group of
# 16 blocks; rows crossing group boundaries (3 and 4 groups, the production
# chunks have 16); a block count that is not a multiple of 16.
LAYOUTS = [(LENGTHS, None), (LONG_LENGTHS, 48), (LONG_LENGTHS, 64), (LENGTHS, 40)]


@pytest.mark.parametrize("lengths,nb_pad", LAYOUTS)
def test_packed_segmented_sums_match_loops(lengths, nb_pad):
  import jax
  with jax.enable_x64(True):
    lay, start = _layout(lengths, nb_pad)
    rng = np.random.default_rng(1)
    # Magnitudes over 200 decades: a global cumsum minus row offsets would
    # lose the small ones; the per-row sums must keep relative precision.
    x = 10.0 ** rng.uniform(-200, 0, lay.j.shape)
    ok = rng.uniform(size=lay.j.shape) > 1e-3
    cs, rcs, good, tot = (np.asarray(v) for v in (lay.cumsum(x), lay.rcumsum(x), lay.all(ok),
                                                   lay.total(x)))
  flat = x.reshape(-1)
  okf = ok.reshape(-1)
  for r, n in enumerate(lengths):
    seg = flat[start[r]:start[r] + n]
    pad = flat[start[r] + n:start[r] + -(-n // pld_impl._BLK) * pld_impl._BLK]  # filler of the row
    ref_c = np.cumsum(seg)
    ref_r = np.cumsum(seg[::-1])[::-1] + pad.sum()
    np.testing.assert_allclose(cs.reshape(-1)[start[r]:start[r] + n], ref_c, rtol=1e-13)
    np.testing.assert_allclose(rcs.reshape(-1)[start[r]:start[r] + n], ref_r, rtol=1e-13)
    np.testing.assert_allclose(tot[r], ref_r[0], rtol=1e-13)
    blk = okf[start[r]:start[r] + -(-n // pld_impl._BLK) * pld_impl._BLK]
    assert good[r] == blk.all()


@pytest.mark.parametrize("lengths", [LENGTHS, [1], [pld_impl._BLK]])
def test_packed_neighbour_shifts_follow_the_flat_order(lengths):
  """x_{j+1} and x_{j-1} in the flat order of the packed blocks (across block
  ends too), zero past either end of the array."""
  import jax
  with jax.enable_x64(True):
    lay, _ = _layout(lengths)
    x = np.arange(1.0, lay.j.size + 1.0).reshape(lay.j.shape)
    nxt, prv = (np.asarray(v).reshape(-1) for v in (lay.nxt(x), lay.prv(x)))
  flat = x.reshape(-1)
  np.testing.assert_array_equal(nxt, np.append(flat[1:], 0.0))
  np.testing.assert_array_equal(prv, np.insert(flat[:-1], 0, 0.0))


@pytest.mark.parametrize("lengths,nb_pad", LAYOUTS)
@pytest.mark.parametrize("filler", [np.inf, 0.0])
def test_packed_minplus_scans_match_loops(filler, lengths, nb_pad):
  import jax
  with jax.enable_x64(True):
    lay, start = _layout(lengths, nb_pad)
    rng = np.random.default_rng(2)
    shape = lay.j.shape
    valid = np.asarray(lay.j < lay.row(lay.n))
    cap = np.where(valid, rng.uniform(0.0, 1.0, shape) * 10.0 ** rng.uniform(-30, 0, shape), filler)
    cap[rng.uniform(size=shape) < 0.01] = np.inf
    w = np.where(valid, rng.uniform(0.0, 1e-3, shape), 0.0)
    fwd, bwd = (np.asarray(v).reshape(-1) for v in lay.scan_pair(cap, w, cap, w))
  capf, wf = cap.reshape(-1), w.reshape(-1)
  for r, n in enumerate(lengths):
    s0 = start[r]
    end = s0 + -(-n // pld_impl._BLK) * pld_impl._BLK  # the row owns its filler
    y, ref = np.inf, []
    for k in range(s0, end):
      y = min(capf[k], y + wf[k])
      ref.append(y)
    np.testing.assert_allclose(fwd[s0:end], ref, rtol=1e-13)
    y, ref = np.inf, []
    for k in range(end - 1, s0 - 1, -1):
      y = min(capf[k], y + wf[k])
      ref.append(y)
    np.testing.assert_allclose(bwd[s0:end], ref[::-1], rtol=1e-13)


def test_chunks_pack_every_row_once():
  rng = np.random.default_rng(3)
  n = np.concatenate([rng.integers(1, 40 * pld_impl._BLK, 60), [300 * pld_impl._BLK]])
  parts = pld_impl._chunks(n)
  seen = np.concatenate([np.asarray(p) for p, _ in parts])
  assert sorted(seen) == list(range(len(n)))
  for part, size in parts:
    need = int(np.sum(-(-n[np.asarray(part)] // pld_impl._BLK)))
    assert need + 1 <= size  # room for the dummy row's filler block
    rob, j0, start, n_rows = pld_impl._pack(n[np.asarray(part)], size)
    assert len(rob) == size and np.all(np.bincount(rob)[:len(part)] * pld_impl._BLK >= n[part])


def test_fft_sizes():
  # Powers of two only (few compiled programs; a configuration's window does
  # not depend on the other configurations of the call).
  for m in list(range(1, 5000, 37)) + list(np.random.default_rng(4).integers(4096, 2 ** 21, 200)):
    s = pld_impl._fft_size(m)
    assert s >= m and s & (s - 1) == 0
    assert s < max(2 * m, 4097)


def test_answer_does_not_depend_on_the_rest_of_the_batch():
  q, s, t, d = 0.01, 1.4147675988420014, 1000, 1e-5
  alone = pld.epsilon(q, s, t, d)
  mixed = pld.epsilon(np.array([q, 0.3, 0.001]), np.array([s, 0.7, 5.0]),
                      np.array([t, 20000, 10]), d)
  assert mixed[0] == alone


def test_step_sweeps_share_one_step_pmfs_and_answer_as_alone(monkeypatch):
  """Configurations that differ in T alone (within one grid bucket) share
  their one-step PMFs (built once: 2 directions x 2 (q, σ) pairs here), and
  each answer is bit for bit the one it gets alone."""
  from jaxdp._src.pld import run as _pld_run
  q = np.array([0.01, 0.01, 0.01, 0.003, 0.003])
  s = np.array([1.1, 1.1, 1.1, 0.9, 0.9])
  t = np.array([300, 1000, 60000, 2000, 5000])
  built = []
  chunks = _pld_run._chunks
  monkeypatch.setattr(_pld_run, "_chunks", lambda n: built.append(len(n)) or chunks(n))
  lo, up = pld.epsilon(q, s, t, 1e-5, return_bounds=True)
  assert built == [4]
  for i in range(len(q)):
    lo_i, up_i = pld.epsilon(q[i], s[i], t[i], 1e-5, return_bounds=True)
    assert (lo[i], up[i]) == (lo_i, up_i)
  d_all = pld.delta(q, s, t, 2.0)
  assert all(d_all[i] == pld.delta(q[i], s[i], t[i], 2.0) for i in range(len(q)))


@pytest.mark.parametrize("q", [1e-7, 1e-4, 0.004, 0.1, 0.5, 0.999, 1.0])
@pytest.mark.parametrize("sigma", [0.05, 0.8, 3.0, 40.0])
def test_one_step_grid_leaves_at_most_the_budget_outside(q, sigma):
  """The one-step grid [i_lo·h, i_hi·h] leaves at most τ = tail / B of the
  direction's P-mass below and above it per step (B = _grid_steps(T) >= T),
  checked with mpmath Gaussian tails at the x's of the grid's end nodes."""
  mp.mp.dps = 30
  h, tail = 1e-3, 1e-9
  for steps in [1, 700, 10 ** 5]:
    tau = tail / float(pld_impl._grid_steps(np.array([steps]))[0])
    assert tau <= tail / steps
    for remove in (True, False):
      i_lo, i_hi = pld_impl._grid_range(np.array([q]), np.array([sigma]), np.array([float(steps)]),
                                   np.array([h]), remove, np.array([tail]))
      lo, hi = mp.mpf(int(i_lo[0])) * h, mp.mpf(int(i_hi[0])) * h

      def x_of(loss):   # remove-direction loss -> x (None: below log(1 - q))
        d = mp.e ** loss - (1 - q)
        return None if d <= 0 else sigma ** 2 * mp.log(d / q) + mp.mpf(1) / 2

      sf = lambda x, mu: mp.ncdf(-(x - mu) / sigma)
      if remove:   # P = (1-q) N(0) + q N(1); loss increasing in x
        mix = lambda x: (1 - q) * sf(x, 0) + q * sf(x, 1)
        x_lo, x_hi = x_of(lo), x_of(hi)
        below = 0 if x_lo is None else 1 - mix(x_lo)
        above = 0 if x_hi is None else mix(x_hi)
      else:        # P = N(0); add loss -L(x) decreasing in x
        x_top, x_bot = x_of(-hi), x_of(-lo)
        above = 0 if x_top is None else 1 - sf(x_top, 0)
        below = 0 if x_bot is None else sf(x_bot, 0)
      assert below <= tau * (1 + 1e-9) and above <= tau * (1 + 1e-9), (remove, steps, below, above)


@pytest.mark.parametrize("tail", [pld_impl._TAIL, 1e-9])
@pytest.mark.parametrize("q,sigma,steps,remove", [(0.2, 0.8, 12, True), (0.2, 0.8, 12, False),
                                                  (0.05, 1.5, 40, True), (1.0, 3.0, 5, False)])
def test_window_edges_hold_the_tails(q, sigma, steps, remove, tail):
  """The certified window edges against a brute-force T-fold convolution.

  Mass of the pessimistic composition above its edge and of the optimistic
  one below its edge must each be at most the tail budget (the default
  _TAIL, or the larger budget of ε queries at δ = 1e-5; nonnegative sums,
  so the direct convolution keeps relative precision in the tails).
  """
  import jax
  h = 0.02
  i_lo, i_hi = pld_impl._grid_range(np.array([q]), np.array([sigma]), np.array([float(steps)]),
                               np.array([h]), remove, np.array([tail]))
  n = int(i_hi[0] - i_lo[0] + 1)
  with jax.enable_x64(True):
    rob, j0, start, n_rows = pld_impl._pack(np.array([n]))
    r_pad = len(start)
    par = [np.full(r_pad, v) for v in (q, sigma, h)]
    lo_arr = np.zeros(r_pad, np.int64)
    lo_arr[0] = i_lo[0]
    pp, _, po, a_p, b_p, a_o, b_o = (np.asarray(v) for v in pld_impl._stage1(
        *par, lo_arr, np.full(r_pad, float(steps)), np.full(r_pad, -np.log(tail)), rob, j0,
        start, n_rows, remove=remove))
  pp, po = pp[:n], po[:n]
  base = steps * int(i_lo[0])
  hi_edge = int(b_p[0]) - pld_impl._EDGE_PAD - base   # certified edges, in node sums
  lo_edge = int(a_o[0]) + pld_impl._EDGE_PAD - base
  # the accuracy edges (each PMF's other end) are Chernoff edges too
  lo_p = int(a_p[0]) + pld_impl._EDGE_PAD - base
  hi_o = int(b_o[0]) - pld_impl._EDGE_PAD - base
  comp_p, comp_o = np.ones(1), np.ones(1)
  for _ in range(steps):
    comp_p = np.convolve(comp_p, pp)
    comp_o = np.convolve(comp_o, po)
  assert 0 <= lo_edge < hi_edge
  assert comp_p[hi_edge + 1:].sum() <= tail * (1 + 1e-9)
  assert comp_o[:max(lo_edge, 0)].sum() <= tail * (1 + 1e-9)
  assert comp_p[:max(lo_p, 0)].sum() <= tail * (1 + 1e-9)
  assert comp_o[hi_o + 1:].sum() <= tail * (1 + 1e-9)
  # ... and the window is not vacuous: it excludes part of the support.
  assert hi_edge < len(comp_p) - 1 or lo_edge > 0


def test_mixed_grid_sizes_in_one_call_agree_with_dp_accounting():
  # Rows of very different one-step grids share the packed kernel calls.
  cfgs = [(0.001, 1.0, 300, 1e-5), (0.05, 0.8, 100, 1e-5), (0.3, 2.0, 50, 1e-6),
          (0.01, 1.5, 1000, 1e-5), (1.0, 4.0, 20, 1e-5)]
  q, s, t, d = map(np.array, zip(*cfgs))
  lo, up = pld.epsilon(q, s, t, d, return_bounds=True)
  for i, cfg in enumerate(cfgs):
    ref = _dp_accounting_epsilon(*cfg)
    assert abs(up[i] / ref - 1) < 5e-3, (cfg, up[i], ref)
    assert lo[i] <= up[i] and up[i] - lo[i] < 2e-3 * up[i]
