"""Soundness harness for the balls-in-bins (random allocation) PLD path (issue 38).

Checks ``jaxdp.pld.epsilon/delta(sampler, σ, steps, ·, return_bounds=True)``
and ``jaxdp.epsilon/delta(sampler, σ, steps, ·, accountant="pld")`` for
``sampler = sampling.balls_in_bins(N, B, capacity=N)`` (k = N // B steps per
epoch; N is not a multiple of B, so a k recomputed from N would show) against
references that share no code with the new path (tests/harness_reference.py,
SciPy/mpmath closed forms, a NumPy Monte-Carlo estimate):

* interval sanity: PLD lower <= PLD upper; nothing NaN; nothing raises.
* independent lower bounds of the TRUE ε (δ): post-processing never raises
  the hockey-stick divergence, so the run's δ(ε) is at least that of
  (a) one output coordinate of the first step: P = (1/k)·N(1, σ²) +
  (1 − 1/k)·N(0, σ²) vs Q = N(0, σ²), the Poisson-subsampled Gaussian at
  q = 1/k, one step (exact, :func:`harness_reference.one_step_epsilon`);
  (b) the sum of all outputs of the E = steps // k whole epochs: N(E, Ekσ²)
  vs N(0, Ekσ²), a Gaussian with μ = √(E/k)/σ (closed form, q = 1 in the
  same reference). The certified upper end must be >= both (relative 1e-9).
  For k = 1, (b) is the exact T-fold Gaussian composition: the interval must
  contain it (ε by bisection in SciPy log space; δ in mpmath).
* monotone: more steps never lower the upper end and more noise never raises
  it (relative 1e-9); and, what soundness alone demands, the upper end at
  more steps (less noise) is >= the lower end at fewer steps (more noise).
* ``jaxdp.epsilon(accountant="pld")`` (the smaller of the PLD upper end and
  the RDP bound) <= ``jaxdp.epsilon(accountant="rdp")``, >= the PLD lower
  end and <= the PLD upper end; PLD lower <= RDP (both certified). Same for δ.
  (The RDP answer costs ~4 s per configuration on the shared 2-core CPU, so
  the CI sample checks the reported ε on one configuration; the slow variant
  checks both accountants' answers on every configuration.)
* Monte Carlo (k 2–8, up to 3 epochs, whole and partial, σ 0.5–4, δ 1e-3–0.1
  so that the estimate means something): δ of each direction at the
  certified upper ε, estimated with 2·10⁵ (slow: 10⁶, 100 configurations) fixed-seed
  samples of the composed loss, minus 5 standard errors, is <= δ; at the
  certified lower ε the larger direction's estimate plus 5 standard errors
  is >= δ.
* extremes: the domain's corners run without raising, with a finite lower
  end, no NaN, and (slow) a finite reported ``jaxdp.epsilon(accountant="pld")``;
  the PLD upper end is finite at δ = 1e-12 (σ = 0.3, k = 1; σ = 0.5, k = 8;
  σ = 100, k = 10⁵, 1000 epochs: it was +inf before issue 38's fix); a grid
  beyond the memory budget raises ValueError naming
  ``value_discretization_interval``.

Configurations are drawn LOG-UNIFORMLY over the legal domain σ ∈ [0.3, 100],
k ∈ [1, 10⁵], epochs ∈ [1, 1000], δ ∈ [1e-12, 0.1]; every other one ends
with a partial epoch (steps not a multiple of k). The cost grows with k, 1/σ
and the epochs (0.4–20 s per PLD call over the domain, more at σ ≈ 0.3 with
k >= 10⁴; the RDP answer ~4 s), so the CI sample (fixed seed) is k = 1 and two
draws with k <= 64, <= 30 epochs, σ >= 0.5 (~36 s CPU for the whole file,
measured with ``pytest -n 0 --durations=10``; ~85 s wall on the shared 2-core
machine at load ~4). The ``slow`` variant draws 10³ configurations over the
whole domain and runs every check on each (both accountants' answers for ε,
the reported one for δ): the first 13 took 981 s on the shared machine (one,
σ = 0.52, k = 31923, 546 epochs, took 608 s), so the full run is ~10–20 h
there; split it with ``JAXDP_HARNESS_RANGE``. Every failure message prints the
configuration; all failures of a batch are listed before the test fails; an
infinite (sound but useless) PLD upper end is printed as a note.
``JAXDP_HARNESS_SCALE`` scales the slow sample (e.g. 0.03 for a quick run);
``JAXDP_HARNESS_RANGE=FIRST:LAST`` runs a slice of it.
"""

import os

os.environ["JAXDP_STRICT_GUARDS"] = "1"

import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import jaxdp  # noqa: E402
from jaxdp import sampling  # noqa: E402

import harness_reference as hr  # noqa: E402

REL = 1e-9
SIGMA_RANGE = (0.3, 100.0)
K_RANGE = (1, 10 ** 5)
EPOCH_RANGE = (1, 1000)
DELTA_RANGE = (1e-12, 0.1)

CI_SEED = 3838
SLOW_SEED = 8383
N_CI = 2
SLOW_SCALE = float(os.environ.get("JAXDP_HARNESS_SCALE", "1"))
N_SLOW = max(1, int(round(1000 * SLOW_SCALE)))

SIGMA_UP = 1.25      # the monotone-in-σ check compares σ with σ·SIGMA_UP


# --------------------------------------------------------------------------
# configurations
# --------------------------------------------------------------------------


def _log_uniform(rng, lo, hi, n):
  return np.exp(rng.uniform(math.log(lo), math.log(hi), n))


class Config:
  """One configuration: sampler (N, B), σ, steps, and δ (or ε)."""

  def __init__(self, n, b, sigma, steps, value):
    self.n, self.b = int(n), int(b)
    self.k = self.n // self.b
    self.sigma, self.steps, self.value = float(sigma), int(steps), float(value)

  @property
  def sampler(self):
    return sampling.balls_in_bins(self.n, self.b, capacity=self.n)

  @property
  def epochs(self):
    return self.steps // self.k

  def __str__(self):
    return (f"(N={self.n}, B={self.b}, k={self.k}, sigma={self.sigma!r}, steps={self.steps} "
            f"[{self.epochs} whole epochs + {self.steps % self.k}], value={self.value!r})")


def sample_configs(n, seed, sigma=SIGMA_RANGE, k=K_RANGE, epochs=EPOCH_RANGE, delta=DELTA_RANGE):
  """n configurations, σ, k, epochs and δ each log-uniform over its range;
  every other one ends with a partial epoch of m ∈ [1, k) steps (where k > 1)."""
  rng = np.random.default_rng(seed)
  ss = _log_uniform(rng, *sigma, n)
  kk = np.clip(np.floor(_log_uniform(rng, k[0], k[1] + 1, n)), k[0], k[1]).astype(int)
  ee = np.clip(np.floor(_log_uniform(rng, epochs[0], epochs[1] + 1, n)), *epochs).astype(int)
  dd = _log_uniform(rng, *delta, n)
  bb = rng.integers(1, 8, n)
  out = []
  for i in range(n):
    kk_i, b = int(kk[i]), int(bb[i])
    n_i = kk_i * b + int(rng.integers(0, b))     # N // B == k, N not always a multiple of B
    steps = int(ee[i]) * kk_i
    if i % 2 == 1 and kk_i > 1:                  # last epoch partial: m in [1, k)
      steps = (int(ee[i]) - 1) * kk_i + int(rng.integers(1, kk_i))
    out.append(Config(n_i, b, ss[i], steps, dd[i]))
  return out


class Failures:
  """Collects failures; one assert at the end lists them all (with configs)."""

  def __init__(self, what):
    self.what, self.items, self.checked = what, [], 0
    self.notes = []     # not failures: infinite (sound, useless) upper ends, printed

  def note_infinite(self, cfg, where, up):
    if not np.all(np.isfinite(up)):
      self.notes.append(f"{where} upper end inf (fallback) for {cfg}")

  def check(self, ok, cfg, label, got, ref):
    self.checked += 1
    if not ok:
      self.items.append(f"{label}: {cfg}: got {got!r}, bound {ref!r}")

  def raised(self, cfg, where, e):
    self.items.append(f"{where} raised for {cfg}: {type(e).__name__}: {e}")

  def report(self):
    for n in self.notes:
      print(f"[harness-allocation] note: {n}", flush=True)
    if self.items:
      head = f"{self.what}: {len(self.items)} violation(s) in {self.checked} checks:\n"
      pytest.fail(head + "\n".join(self.items[:200]), pytrace=False)


def _at_least(fails, cfg, label, got, ref, rel=REL, abs_=0.0):
  fails.check(bool(got >= ref * (1 - rel) - abs_), cfg, label, float(got), float(ref))


def _at_most(fails, cfg, label, got, ref, rel=REL, abs_=0.0):
  fails.check(bool(got <= ref * (1 + rel) + abs_), cfg, label, float(got), float(ref))


# --------------------------------------------------------------------------
# independent references
# --------------------------------------------------------------------------


def reference_epsilon_lower(cfg, delta):
  """A lower bound of the true ε(δ) of the run: max of (a) one coordinate of
  one step (Poisson-subsampled Gaussian, q = 1/k) and (b) the sum of all
  outputs of the whole epochs (Gaussian, μ = √(E/k)/σ); see module docstring."""
  e = float(hr.one_step_epsilon(1.0 / cfg.k, cfg.sigma, delta))
  if cfg.epochs >= 1:
    e = max(e, float(hr.one_step_epsilon(1.0, cfg.sigma * math.sqrt(cfg.k / cfg.epochs), delta)))
  return e


def reference_delta_lower(cfg, eps):
  """A lower bound of the true δ(ε) (the same two post-processings)."""
  d = float(hr.one_step_delta(eps, 1.0 / cfg.k, cfg.sigma))
  if cfg.epochs >= 1:
    d = max(d, float(hr.one_step_delta(eps, 1.0, cfg.sigma * math.sqrt(cfg.k / cfg.epochs))))
  return d


def mp_gaussian_delta(eps, mu, dps=40):
  import mpmath as mp  # pylint: disable=g-import-not-at-top
  with mp.workdps(dps):
    m, e = mp.mpf(mu), mp.mpf(eps)
    return float(mp.ncdf(m / 2 - e / m) - mp.exp(e) * mp.ncdf(-m / 2 - e / m))


# --------------------------------------------------------------------------
# ε and δ checks
# --------------------------------------------------------------------------


def _steps_more(cfg):
  """A larger step count: the next partial or whole epoch boundary."""
  return cfg.steps + max(1, cfg.k // 2)


def check_epsilon(cfg, fails, rdp=False, mono=True):
  """All ε checks of one configuration (value = δ).

  rdp: False; "reported": also jaxdp.epsilon(accountant="pld") against the PLD
  interval and the reference; "both": and against jaxdp.epsilon(accountant="rdp").
  mono: also at more steps and at σ·SIGMA_UP.
  """
  s, d = cfg.sampler, cfg.value
  sig = [cfg.sigma] + ([cfg.sigma, cfg.sigma * SIGMA_UP] if mono else [])
  stp = [cfg.steps] + ([_steps_more(cfg), cfg.steps] if mono else [])
  try:
    lo, up = jaxdp.pld.epsilon(s, np.array(sig), np.array(stp), np.full(len(sig), d),
                               return_bounds=True)
    lo, up = np.asarray(lo, np.float64), np.asarray(up, np.float64)
  except Exception as e:  # pylint: disable=broad-except
    fails.raised(cfg, "pld.epsilon(return_bounds=True)", e)
    return None
  fails.check(not (np.isnan(lo).any() or np.isnan(up).any()), cfg, "NaN in pld.epsilon", (lo, up), None)
  fails.check(bool(np.all(np.isfinite(lo)) and np.all(lo >= 0)), cfg, "lower end not finite >= 0", lo, None)
  _at_most(fails, cfg, "pld.epsilon lower > upper", lo[0], up[0], rel=1e-12)
  fails.note_infinite(cfg, "pld.epsilon", up)
  ref = reference_epsilon_lower(cfg, d)
  _at_least(fails, cfg, "pld.epsilon upper < independent lower bound (one step q=1/k; sum)", up[0], ref)
  if cfg.k == 1:
    exact = float(hr.one_step_epsilon(1.0, cfg.sigma / math.sqrt(cfg.steps), d))
    _at_most(fails, cfg, "k=1: pld.epsilon lower > exact T-fold Gaussian ε", lo[0], exact, abs_=1e-12)
    if lo[0] > 0 and np.isfinite(up[0]):    # the same in mpmath, in δ space
      mu = math.sqrt(cfg.steps) / cfg.sigma
      _at_least(fails, cfg, "k=1: mpmath δ_G(lower) < δ", mp_gaussian_delta(lo[0], mu), d, rel=1e-6)
      _at_most(fails, cfg, "k=1: mpmath δ_G(upper) > δ", mp_gaussian_delta(up[0], mu), d, rel=1e-6)
  if mono:
    _check_monotone(fails, cfg, stp, lo, up, "")
  if rdp:
    try:
      rep = float(jaxdp.epsilon(s, cfg.sigma, cfg.steps, d, accountant="pld"))
      e_rdp = (float(jaxdp.epsilon(s, cfg.sigma, cfg.steps, d, accountant="rdp"))
               if rdp == "both" else math.inf)
    except Exception as e:  # pylint: disable=broad-except
      fails.raised(cfg, "jaxdp.epsilon(pld / rdp)", e)
      return lo[0], up[0]
    _check_reported(fails, cfg, "epsilon", rep, e_rdp, lo, up, ref)
  return lo[0], up[0]


def _check_monotone(fails, cfg, stp, lo, up, prefix):
  """Monotone in steps and σ (entries 1 and 2 of ``lo``/``up``: more steps,
  σ·SIGMA_UP), and no upper end below another point's lower end; ``prefix``
  names the quantity in the messages ("" for ε, "δ " for δ)."""
  _at_least(fails, cfg, f"{prefix}upper at steps={stp[1]} < upper at steps={cfg.steps}", up[1], up[0])
  _at_least(fails, cfg, f"{prefix}upper at steps={stp[1]} < LOWER at steps={cfg.steps} (unsound)",
            up[1], lo[0])
  _at_most(fails, cfg, f"{prefix}upper at sigma*{SIGMA_UP} > upper at sigma", up[2], up[0])
  _at_most(fails, cfg, f"{prefix}LOWER at sigma*{SIGMA_UP} > upper at sigma (unsound)", lo[2], up[0])


def _check_reported(fails, cfg, name, rep, rdp_value, lo, up, ref):
  """The public ``jaxdp.<name>(accountant="pld")`` answer ``rep``: at most the
  RDP answer and the PLD upper end, at least the certified lower end and the
  independent lower bound ``ref``; the lower end at most the RDP answer."""
  _at_most(fails, cfg, f"jaxdp.{name}(pld) > jaxdp.{name}(rdp)", rep, rdp_value, rel=1e-12)
  _at_most(fails, cfg, f"jaxdp.{name}(pld) > pld.{name} upper", rep, up[0], rel=1e-12)
  _at_least(fails, cfg, f"jaxdp.{name}(pld) < pld.{name} lower", rep, lo[0])
  _at_least(fails, cfg, f"jaxdp.{name}(pld) < independent lower bound", rep, ref)
  _at_most(fails, cfg, f"pld.{name} lower > jaxdp.{name}(rdp) (certified)", lo[0], rdp_value)


def _epsilon_for_delta_check(cfg, rng):
  """An ε where δ is interesting: the reference ε(δ)·U(0.5, 2) (0.05–1 if that is 0)."""
  e = reference_epsilon_lower(cfg, cfg.value)
  return e * math.exp(rng.uniform(math.log(0.5), math.log(2.0))) if e > 0 else rng.uniform(0.05, 1.0)


def check_delta(cfg, fails, rng, rdp=False, mono=True):
  """All δ checks of one configuration at one ε (from the reference); rdp and
  mono as in :func:`check_epsilon`."""
  s = cfg.sampler
  eps = _epsilon_for_delta_check(cfg, rng)
  c = Config(cfg.n, cfg.b, cfg.sigma, cfg.steps, eps)
  sig = [c.sigma] + ([c.sigma, c.sigma * SIGMA_UP] if mono else [])
  stp = [c.steps] + ([_steps_more(c), c.steps] if mono else [])
  try:
    lo, up = jaxdp.pld.delta(s, np.array(sig), np.array(stp), np.full(len(sig), eps),
                             return_bounds=True)
    lo, up = np.asarray(lo, np.float64), np.asarray(up, np.float64)
  except Exception as e:  # pylint: disable=broad-except
    fails.raised(c, "pld.delta(return_bounds=True)", e)
    return
  fails.check(not (np.isnan(lo).any() or np.isnan(up).any()), c, "NaN in pld.delta", (lo, up), None)
  fails.check(bool(np.all(lo >= 0) and np.all(up <= 1)), c, "pld.delta outside [0, 1]", (lo, up), None)
  _at_most(fails, c, "pld.delta lower > upper", lo[0], up[0], rel=1e-12)
  ref = reference_delta_lower(c, eps)
  _at_least(fails, c, "pld.delta upper < independent lower bound (one step q=1/k; sum)", up[0], ref)
  if c.k == 1:
    exact = mp_gaussian_delta(eps, math.sqrt(c.steps) / c.sigma)
    _at_most(fails, c, "k=1: pld.delta lower > exact T-fold Gaussian δ (mpmath)", lo[0], exact,
             rel=1e-6, abs_=1e-15)
    _at_least(fails, c, "k=1: pld.delta upper < exact T-fold Gaussian δ (mpmath)", up[0], exact, rel=1e-6)
  if mono:
    _check_monotone(fails, c, stp, lo, up, "δ ")
  if rdp:
    try:
      rep = float(jaxdp.delta(s, c.sigma, c.steps, eps, accountant="pld"))
      d_rdp = (float(jaxdp.delta(s, c.sigma, c.steps, eps, accountant="rdp"))
               if rdp == "both" else math.inf)
    except Exception as e:  # pylint: disable=broad-except
      fails.raised(c, "jaxdp.delta(pld / rdp)", e)
      return
    _check_reported(fails, c, "delta", rep, d_rdp, lo, up, ref)


def _timed(label, fn):
  t0, c0 = time.time(), time.process_time()
  fn()
  print(f"[harness-allocation] {label}: {time.time() - t0:.1f}s wall, "
        f"{time.process_time() - c0:.1f}s CPU", flush=True)


# CI: small k and few epochs (the cost of the path grows with k, 1/σ and the epochs).
CI_K, CI_EPOCHS, CI_SIGMA = (1, 64), (1, 30), (0.5, 100.0)


def ci_configs():
  """k = 1 (the T-fold Gaussian, exact) and the first N_CI of the fixed-seed sample."""
  return [Config(5, 5, 1.7, 7, 1e-6)] + sample_configs(N_CI, CI_SEED, sigma=CI_SIGMA, k=CI_K,
                                                       epochs=CI_EPOCHS)


def test_allocation_epsilon_ci():
  fails = Failures("balls-in-bins ε checks (CI sample)")
  cfgs = ci_configs()

  def run():
    for i, cfg in enumerate(cfgs):
      # the reported answer (one RDP evaluation, ~4 s) on one configuration
      check_epsilon(cfg, fails, rdp=("reported" if i == 2 else False), mono=(i < 2))
  _timed(f"ε checks, {len(cfgs)} configurations", run)
  fails.report()


def test_allocation_delta_ci():
  fails = Failures("balls-in-bins δ checks (CI sample)")
  cfgs = ci_configs()
  rng = np.random.default_rng(CI_SEED + 1)

  def run():
    for i, cfg in enumerate(cfgs):
      check_delta(cfg, fails, rng, mono=(i == 1))
  _timed(f"δ checks, {len(cfgs)} configurations", run)
  fails.report()


def slow_configs():
  """The slow sample; JAXDP_HARNESS_RANGE=FIRST:LAST runs a part of it (to split
  the run over sessions or machines; the union of the parts is the run)."""
  cfgs = sample_configs(N_SLOW, SLOW_SEED)
  spec = os.environ.get("JAXDP_HARNESS_RANGE")
  if spec:
    first, last = (int(v) for v in spec.split(":"))
    return list(enumerate(cfgs))[first:last]
  return list(enumerate(cfgs))


@pytest.mark.slow
def test_allocation_epsilon_and_delta_slow():
  cfgs = slow_configs()
  fails = Failures(f"balls-in-bins ε/δ checks ({len(cfgs)} configurations)")
  t0 = time.time()
  for i, cfg in cfgs:
    before = len(fails.items)
    check_epsilon(cfg, fails, rdp="both")
    check_delta(cfg, fails, np.random.default_rng([SLOW_SEED, i]), rdp="reported")
    print(f"[harness-allocation] {i}: {cfg}: {len(fails.items)} violations, "
          f"{time.time() - t0:.0f}s", flush=True)
    for item in fails.items[before:]:
      print(f"[harness-allocation]   {item}", flush=True)
  fails.report()


# --------------------------------------------------------------------------
# Monte Carlo: small k, few epochs
# --------------------------------------------------------------------------


def mc_losses(cfg, n, seed):
  """Composed privacy-loss samples of the run, both directions.

  remove: under P (the example is in the run): each epoch puts it in one of its
  k steps uniformly at random; a partial epoch of m steps sees it with
  probability m/k. add: −(the same loss) under Q (no shift). The loss of an
  epoch of m <= k released steps is L = log(k − m + Σ_{i≤m} W_i) − log k,
  W_i = exp((2x_i − 1)/(2σ²)).
  """
  rng = np.random.default_rng(seed)
  k, sig = cfg.k, cfg.sigma
  sizes = [k] * cfg.epochs + ([cfg.steps % k] if cfg.steps % k else [])
  out = {}
  for direction in ("remove", "add"):
    total = np.zeros(n)
    for m in sizes:
      x = rng.normal(0.0, sig, size=(n, m))
      if direction == "remove":
        where = rng.integers(0, k, size=n)
        hit = np.flatnonzero(where < m)
        x[hit, where[hit]] += 1.0
      lw = (2.0 * x - 1.0) / (2.0 * sig * sig)
      lse = np.logaddexp.reduce(lw, axis=1)
      if m < k:
        lse = np.logaddexp(lse, math.log(k - m))
      loss = lse - math.log(k)
      total += loss if direction == "remove" else -loss
    out[direction] = total
  return out


def mc_delta(losses, eps):
  """(mean, standard error) of E[(1 − e^{ε − loss})_+]."""
  h = np.maximum(-np.expm1(eps - losses), 0.0)
  return float(h.mean()), float(h.std(ddof=1) / math.sqrt(h.size))


MC_N = 200_000


def mc_configs(n, seed):
  return sample_configs(n, seed, sigma=(0.5, 4.0), k=(2, 8), epochs=(1, 3), delta=(1e-3, 0.1))


def check_monte_carlo(cfg, fails, n=MC_N, seed=0):
  try:
    lo, up = (float(v) for v in jaxdp.pld.epsilon(cfg.sampler, cfg.sigma, cfg.steps, cfg.value,
                                                 return_bounds=True))
  except Exception as e:  # pylint: disable=broad-except
    fails.raised(cfg, "pld.epsilon(return_bounds=True)", e)
    return
  losses = mc_losses(cfg, n, seed)
  for direction, ls in losses.items():
    est, se = mc_delta(ls, up)
    fails.check(est - 5 * se <= cfg.value, cfg,
                f"MC {direction} δ(ε_upper={up!r}) − 5 s.e. > δ", (est, se), cfg.value)
  if lo > 0:
    ests = [mc_delta(ls, lo) for ls in losses.values()]
    top = max(e + 5 * s for e, s in ests)
    fails.check(top >= cfg.value, cfg, f"MC max-direction δ(ε_lower={lo!r}) + 5 s.e. < δ", ests,
                cfg.value)


def test_allocation_monte_carlo_ci():
  fails = Failures("balls-in-bins Monte-Carlo checks (CI sample)")
  cfgs = mc_configs(3, CI_SEED + 2)
  _timed(f"MC checks, {len(cfgs)} configurations",
         lambda: [check_monte_carlo(c, fails, seed=i) for i, c in enumerate(cfgs)])
  fails.report()


@pytest.mark.slow
def test_allocation_monte_carlo_slow():
  fails = Failures("balls-in-bins Monte-Carlo checks (slow)")
  cfgs = mc_configs(max(1, int(round(100 * SLOW_SCALE))), SLOW_SEED + 2)   # ~4 min
  for i, c in enumerate(cfgs):
    check_monte_carlo(c, fails, n=1_000_000, seed=i)
  fails.report()


# --------------------------------------------------------------------------
# extremes
# --------------------------------------------------------------------------

# (k, sigma, epochs, extra steps, delta): corners of the domain. The CI ones run
# in <= ~2 s each (measured on the shared 2-core CPU under load ~6); the slow ones
# take 20–60 s each (σ = 0.3 with 1000 epochs or k >= 10³).
# (the corners (100_000, 100.0, 1000, 0, 1e-12): largest k and epochs, largest
# σ, smallest δ; and (1, 0.3, 1, 0, 1e-12): smallest σ and δ, one step, run in
# test_allocation_upper_end_finite below)
CORNERS_CI = [
    (1, 100.0, 1, 0, 0.1),              # largest σ, one step, largest δ
]
CORNERS_SLOW = [
    (1, 0.3, 1000, 0, 1e-12),           # smallest σ and δ, most epochs
    (1, 0.3, 1000, 0, 1e-5),
    (10, 0.3, 1000, 3, 1e-12),
    (1000, 1.0, 999, 17, 1e-12),
    (1000, 0.3, 1, 0, 1e-5),
    (10_000, 0.3, 1, 0, 1e-5),
    (100_000, 0.3, 1, 0, 1e-5),
]


def _corner_config(k, sigma, epochs, extra, delta):
  return Config(3 * k + 1, 3, sigma, epochs * k + extra, delta)


def check_corner(cfg, fails):
  try:
    lo, up = (float(v) for v in jaxdp.pld.epsilon(cfg.sampler, cfg.sigma, cfg.steps, cfg.value,
                                                 return_bounds=True))
  except Exception as e:  # pylint: disable=broad-except
    fails.raised(cfg, "pld.epsilon(return_bounds=True)", e)
    return None
  fails.check(not (math.isnan(lo) or math.isnan(up)), cfg, "NaN", (lo, up), None)
  fails.check(0 <= lo <= up, cfg, "not 0 <= lower <= upper", (lo, up), None)
  _at_least(fails, cfg, "upper < independent lower bound", up, reference_epsilon_lower(cfg, cfg.value))
  return lo, up


@pytest.mark.parametrize("corner", CORNERS_CI)
def test_allocation_corners_ci(corner):
  fails = Failures(f"corner {corner}")
  check_corner(_corner_config(*corner), fails)
  fails.report()


@pytest.mark.slow
@pytest.mark.parametrize("corner", CORNERS_SLOW)
def test_allocation_corners_slow(corner):
  fails = Failures(f"corner {corner}")
  cfg = _corner_config(*corner)
  check_corner(cfg, fails)
  try:   # the reported answer (min with RDP) is finite even where the PLD upper end is not
    rep = float(jaxdp.epsilon(cfg.sampler, cfg.sigma, cfg.steps, cfg.value, accountant="pld"))
    fails.check(math.isfinite(rep), cfg, "jaxdp.epsilon(pld) not finite", rep, None)
    _at_least(fails, cfg, "jaxdp.epsilon(pld) < independent lower bound", rep,
              reference_epsilon_lower(cfg, cfg.value))
  except Exception as e:  # pylint: disable=broad-except
    fails.raised(cfg, "jaxdp.epsilon(accountant='pld')", e)
  fails.report()


# Regression (issue 38): the certified upper end used to be +inf at small δ. At
# σ = 0.3 the convex-order upper law of one epoch booked ~1.6e-9 (k = 1) to
# ~2.9e-8 (k = 50) of remove-direction mass at +∞ (the P-side tail of log W
# cut at the Q-side's z, and the splits' round-off as mass), so every δ below
# that read ε = inf, even for ONE Gaussian step (k = 1); at σ = 100, k = 10⁵ the
# law's size estimate counted log k and the path gave up with (0, inf). Now: the
# tails are cut on both sides' laws, the round-off is a loss shift, and the
# estimate is the width of log S. Each case also runs the corner checks.
UPPER_FINITE = [
    (1, 0.3, 1, 0, 1e-12),              # was (28.47, inf)
    (100_000, 100.0, 1000, 0, 1e-12),   # was (0, inf)
    (8, 0.5, 10, 0, 1e-12),             # was (43.76, inf)
]


@pytest.mark.parametrize("corner", UPPER_FINITE)
def test_allocation_upper_end_finite(corner):
  cfg = _corner_config(*corner)
  fails = Failures(f"corner {corner}")
  bounds = check_corner(cfg, fails)
  fails.report()
  lo, up = bounds
  assert math.isfinite(up), f"{cfg}: pld.epsilon = [{lo!r}, {up!r}]"
  if cfg.k == 1:    # the exact Gaussian ε (mpmath, in δ space) lies inside
    mu = math.sqrt(cfg.steps) / cfg.sigma
    assert mp_gaussian_delta(lo, mu) >= cfg.value * (1 - 1e-6), (lo, up)
    assert mp_gaussian_delta(up, mu) <= cfg.value * (1 + 1e-6), (lo, up)
    assert up - lo <= 2e-3 * up, (lo, up)   # the lower grid: <= 0.125% (allocation_forward)


def test_allocation_impossible_grid_raises():
  """A given grid step beyond the memory budget raises ValueError naming it
  (never a number), for ε and δ, small and large k."""
  for n, b in ((600, 100), (300_001, 3)):
    s = sampling.balls_in_bins(n, b, capacity=n)
    with pytest.raises(ValueError, match="value_discretization_interval"):
      jaxdp.pld.epsilon(s, 0.3, 2 * (n // b), 1e-5, value_discretization_interval=1e-7)
    with pytest.raises(ValueError, match="value_discretization_interval"):
      jaxdp.pld.delta(s, 0.3, 2 * (n // b), 1.0, value_discretization_interval=1e-7)
