#!/usr/bin/env python
"""Record and compare jaxdp's answers through its public API (refactor check).

Asks a fixed-seed set of random questions (about ``--n``, default 500,
counting every element of a broadcast array as one question) through every
documented public entry point of ``jaxdp``, in the same order, and writes the
answers to JSON. Running it on two commits and comparing the two files shows
whether a restructuring changed any answer::

  python benchmarks/api_diff.py record OLD.json [--n 500] [--seed 0] [--src DIR]
  python benchmarks/api_diff.py compare OLD.json NEW.json

``--src DIR`` puts DIR first on ``sys.path`` before ``jaxdp`` is imported
(e.g. a ``git worktree`` of the old commit: ``git worktree add /tmp/old
COMMIT``, then ``--src /tmp/old``); the record's header and first line say
which ``jaxdp/__init__.py`` answered (check it: an editable install may
otherwise win). ``--only LABEL,...`` asks only some surfaces (debugging; the
random draws then differ from a full run). A full run costs about 6 minutes
of CPU on a 2-core machine, mostly XLA compilation; the summary prints wall
and CPU seconds per surface (``seconds`` / ``cpu_seconds`` in each record,
ignored by ``compare``). Only public names are used (``jaxdp.<module>``
and the names in its ``__all__``; never ``jaxdp._private``), so the script
runs unchanged on both sides of a refactor that moves private modules.

Each record is ``{"id", "surface", "call", "kind", "questions", "type",
"result", "warnings"}`` with ``kind`` one of

* ``forward``: an accounting answer (ε, δ, RDP, profiles, ...) that a pure
  move must leave bit-identical;
* ``calibration``: a solved σ / steps / q / ... that is tight only to its
  ``rtol``; the record also holds ``target``, ``rtol``, ``answer`` (the
  solved numbers) and ``check``: the public forward function a user would
  call, evaluated at the answer, and whether it meets the target;
* ``other``: auxiliary values (grid sizes, plans, constants), reported but
  not failing.

``result`` holds float values as ``float.hex()`` strings (nested lists for
arrays, ``{"__type__": ...}`` objects for NamedTuples / dataclasses), ints
as JSON ints, or ``{"error": "<ExcType>: <message>"}``.

``compare`` prints totals, the bit-identical count, every differing forward
answer, every moved calibration (relative change vs. its rtol, and whether
the new answer still passes its check), changed errors and warnings, and
exits 1 if a forward answer differs, a calibration misses its target or
moves by more than its rtol, or the two files do not ask the same questions.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import sys
import tempfile
import time
import warnings

import numpy as np

_TMP_TOKEN = "<tmp>"


# ---------------------------------------------------------------------------
# Encoding of answers.
# ---------------------------------------------------------------------------


def _enc_array(a):
  """Nested lists of float.hex strings (floats), ints or bools."""
  if a.dtype.kind == "f":
    flat = [float(v).hex() for v in a.astype(np.float64).ravel()]
  elif a.dtype.kind in "iu":
    flat = [int(v) for v in a.ravel()]
  elif a.dtype.kind == "b":
    flat = [bool(v) for v in a.ravel()]
  else:
    flat = [str(v) for v in a.ravel()]
  if a.ndim == 0:
    return flat[0]
  return np.array(flat, dtype=object).reshape(a.shape).tolist()


def encode(x):
  """JSON-able, exact encoding of an answer (see the module docstring)."""
  if x is None or isinstance(x, (str, bool)):
    return x
  if isinstance(x, dict):
    return {str(k): encode(v) for k, v in x.items()}
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    return {"__type__": type(x).__name__,
            **{f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x)}}
  if isinstance(x, tuple) and hasattr(x, "_fields"):
    return {"__type__": type(x).__name__, **{k: encode(getattr(x, k)) for k in x._fields}}
  if isinstance(x, (list, tuple)):
    return [encode(v) for v in x]
  try:
    a = np.asarray(x)
  except Exception:  # pylint: disable=broad-except
    return repr(x)
  if a.dtype == object:
    return repr(x)
  return _enc_array(a)


def type_of(x):
  """A short description of the answer's type, dtype and shape."""
  if x is None or isinstance(x, (str, bool, int, float)):
    return type(x).__name__
  if isinstance(x, dict):
    return "dict(" + ", ".join(f"{k}: {type_of(v)}" for k, v in x.items()) + ")"
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    inner = ", ".join(f"{f.name}: {type_of(getattr(x, f.name))}" for f in dataclasses.fields(x))
    return f"{type(x).__name__}({inner})"
  if isinstance(x, tuple) and hasattr(x, "_fields"):
    inner = ", ".join(f"{k}: {type_of(getattr(x, k))}" for k in x._fields)
    return f"{type(x).__name__}({inner})"
  if isinstance(x, (list, tuple)):
    return type(x).__name__ + "(" + ", ".join(type_of(v) for v in x) + ")"
  if isinstance(x, np.generic):
    return f"numpy.{x.dtype}"
  if isinstance(x, np.ndarray):
    return f"numpy.{x.dtype}{list(x.shape)}"
  if hasattr(x, "dtype") and hasattr(x, "shape"):
    return f"jax.{x.dtype}{list(x.shape)}"
  return type(x).__name__


def decode_floats(v):
  """float64 ndarray from an encoded numeric result (hex strings / ints)."""
  def one(s):
    if isinstance(s, str):
      return float.fromhex(s)
    return float(s)
  def walk(t):
    if isinstance(t, list):
      return [walk(u) for u in t]
    return one(t)
  return np.asarray(walk(v), dtype=np.float64)


def fmt(x):
  """Readable, exact repr of an argument for the ``call`` string."""
  if isinstance(x, np.ndarray):
    if x.dtype.kind == "f":
      return "[" + ", ".join(repr(float(v)) for v in x.ravel()) + "]"
    return "[" + ", ".join(repr(v.item()) for v in x.ravel()) + "]"
  if isinstance(x, (float, np.floating)):
    return repr(float(x))
  if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
    inner = ", ".join(fmt(v) for v in x)
    return f"[{inner}]" if isinstance(x, list) else f"({inner})"
  if isinstance(x, tuple) and hasattr(x, "_fields"):
    inner = ", ".join(f"{k}={fmt(getattr(x, k))}" for k in x._fields)
    return f"{type(x).__name__}({inner})"
  return repr(x)


def call_string(name, args, kwargs):
  parts = [fmt(a) for a in args] + [f"{k}={fmt(v)}" for k, v in kwargs.items()]
  return f"{name}({', '.join(parts)})"


def error_string(exc):
  msg = str(exc).replace(tempfile.gettempdir(), _TMP_TOKEN)
  return f"{type(exc).__name__}: {msg}"


# ---------------------------------------------------------------------------
# Recorder.
# ---------------------------------------------------------------------------


class Recorder:
  """Asks questions, records answers in order, times each surface."""

  def __init__(self, scale, verbose=True):
    self.scale = scale
    self.records = []
    self.surface_questions = {}
    self.surface_seconds = {}
    self.surface_cpu = {}
    self.verbose = verbose
    self._t0 = time.perf_counter()

  def count(self, base):
    """A surface's number of calls at this --n (base is for --n 500)."""
    return max(1, int(round(base * self.scale)))

  def ask(self, surface, name, fn, *args, kind="forward", calib=None, nq=None, **kwargs):
    """Calls fn(*args, **kwargs), records its answer; returns the raw answer or None."""
    call = call_string(name, args, kwargs)
    rec = {"id": f"{surface}#{sum(1 for r in self.records if r['surface'] == surface)}",
           "surface": surface, "call": call, "kind": kind}
    t, c = time.perf_counter(), time.process_time()
    raw = None
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      try:
        raw = fn(*args, **kwargs)
        rec["type"] = type_of(raw)
        rec["result"] = encode(raw)
        ok = True
      except Exception as exc:  # pylint: disable=broad-except
        rec["type"] = "error"
        rec["result"] = {"error": error_string(exc)}
        ok = False
    rec["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    if nq is None:
      nq = _n_answers(raw) if ok and kind != "other" else 1
    rec["questions"] = nq
    if calib is not None:
      rec.update(self._calibration(calib, raw if ok else None))
    self.records.append(rec)
    self.surface_questions[surface] = self.surface_questions.get(surface, 0) + nq
    dt, dc = time.perf_counter() - t, time.process_time() - c
    rec["seconds"] = round(dt, 3)  # timing only (wall, CPU): compare ignores them
    rec["cpu_seconds"] = round(dc, 3)
    self.surface_seconds[surface] = self.surface_seconds.get(surface, 0.0) + dt
    self.surface_cpu[surface] = self.surface_cpu.get(surface, 0.0) + dc
    return raw if ok else None

  @staticmethod
  def _calibration(calib, raw):
    """target / rtol / answer / check fields of a calibration record."""
    out = {"target": encode(calib["target"]), "rtol": calib["rtol"]}
    if raw is None:
      return out
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      try:
        answer = calib.get("answer", lambda r: r)(raw)
        out["answer"] = encode(np.asarray(answer, dtype=np.float64))
        check_call, value, ok = calib["check"](raw)
        out["check"] = {"call": check_call, "value": encode(value),
                        "ok": encode(np.asarray(ok, dtype=bool))}
      except Exception as exc:  # pylint: disable=broad-except
        out["check"] = {"error": error_string(exc), "ok": False}
    return out

  def progress(self, surface):
    if self.verbose:
      n = sum(self.surface_questions.values())
      print(f"  [{time.perf_counter() - self._t0:6.1f} s] {surface:<28} "
            f"{self.surface_questions.get(surface, 0):4d} questions "
            f"({self.surface_seconds.get(surface, 0.0):5.1f} s); total {n}", flush=True)


def _n_answers(x):
  """Questions a numeric answer holds: its size (a tuple's: its first element's)."""
  if isinstance(x, tuple) and x and not isinstance(x[0], (str, dict)):
    return _n_answers(x[0])
  return int(np.size(x)) if _is_numeric(x) else 1


def _is_numeric(x):
  try:
    a = np.asarray(x)
  except Exception:  # pylint: disable=broad-except
    return False
  return a.dtype.kind in "fiub"


# ---------------------------------------------------------------------------
# Parameter draws (legal domain incl. extremes).
# ---------------------------------------------------------------------------


class Draw:
  """Reproducible parameter draws from one numpy Generator."""

  def __init__(self, seed):
    self.rng = np.random.default_rng(seed)

  def loguniform(self, lo, hi, size=None):
    return np.exp(self.rng.uniform(math.log(lo), math.log(hi), size))

  def q(self, size, extremes=True):
    v = self.loguniform(1e-4, 1.0, size)
    if extremes and size >= 4:
      v[self.rng.integers(size)] = 0.0
      v[self.rng.integers(size)] = 1.0
    return v

  def sigma(self, size, lo=0.3, hi=50.0):
    return self.loguniform(lo, hi, size)

  def steps(self, size, lo=1, hi=1e5):
    return np.floor(self.loguniform(lo, hi, size)).astype(np.int64)

  def delta(self, size, lo=1e-12, hi=0.1):
    return self.loguniform(lo, hi, size)

  def eps(self, size, lo=0.05, hi=20.0):
    return self.loguniform(lo, hi, size)

  def f(self, v):
    """A scalar draw as a Python float (readable call strings)."""
    return float(v)


# ---------------------------------------------------------------------------
# Surfaces. Each asks its questions through public names only.
# ---------------------------------------------------------------------------

ARR = 8  # one array shape for the jitted kernels (compiled once per kernel)


def surface_epsilon_rdp(jaxdp, R, D, ctx):
  s = "jaxdp.epsilon/rdp"
  for _ in range(R.count(5)):
    R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, D.q(ARR), D.sigma(ARR), D.steps(ARR), D.delta(ARR))
  for _ in range(R.count(6)):
    R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, D.f(D.q(1, False)[0]), D.f(D.sigma(1)[0]),
          int(D.steps(1)[0]), D.f(D.delta(1)[0]))
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, D.q(ARR), D.sigma(ARR), D.steps(ARR), D.delta(ARR),
        method="classic")
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, D.q(ARR), D.sigma(ARR), D.steps(ARR), D.delta(ARR),
        orders=[1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0])
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, 0.01, 1.0, 1000, 1e-5, accountant="rdp",
        orders=[2.0, 10.0])
  # edge cases: zero steps, q = 0, q = 1, T = 1e5
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, np.array([0.0, 1.0, 0.5, 1e-4]),
        np.array([0.3, 50.0, 1.0, 0.3]), np.array([0, 1, 0, 100000]), 1e-5)
  s = "jaxdp.delta/rdp"
  for _ in range(R.count(3)):
    R.ask(s, "jaxdp.delta", jaxdp.delta, D.q(ARR), D.sigma(ARR), D.steps(ARR), D.eps(ARR))
  for _ in range(R.count(4)):
    R.ask(s, "jaxdp.delta", jaxdp.delta, D.f(D.q(1, False)[0]), D.f(D.sigma(1)[0]),
          int(D.steps(1)[0]), D.f(D.eps(1)[0]))
  R.ask(s, "jaxdp.delta", jaxdp.delta, 0.01, 1.0, 1000, 2.0, orders=[2.0, 10.0])


def surface_epsilon_pld(jaxdp, R, D, ctx):
  s = "jaxdp.epsilon/pld"
  for _ in range(R.count(8)):
    R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, D.f(D.loguniform(1e-3, 0.3)),
          D.f(D.sigma(1, 0.6, 10.0)[0]), int(D.steps(1, 1, 2e4)[0]),
          D.f(D.delta(1, 1e-10, 1e-2)[0]), accountant="pld")
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, np.array([0.0, 1.0, 0.004, 0.02]),
        np.array([1.0, 2.0, 1.1, 0.8]), np.array([100, 3, 1000, 500]), 1e-5, accountant="pld")
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, 0.01, 0.3, 1, 1e-12, accountant="pld")
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, 1e-4, 50.0, 100000, 0.1, accountant="pld")
  s = "jaxdp.delta/pld"
  for _ in range(R.count(4)):
    R.ask(s, "jaxdp.delta", jaxdp.delta, D.f(D.loguniform(1e-3, 0.3)),
          D.f(D.sigma(1, 0.6, 10.0)[0]), int(D.steps(1, 1, 2e4)[0]),
          D.f(D.eps(1, 0.2, 10.0)[0]), accountant="pld")
  R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, 0.01, 1.0, 100, 1e-5, accountant="cdp")


def _samplers(jaxdp):
  S = jaxdp.sampling
  return [
      ("jaxdp.sampling.poisson", S.poisson, (1000, 0.05, 80), {}),
      ("jaxdp.sampling.poisson", S.poisson, (2000, 0.03, 2000), {}),
      ("jaxdp.sampling.poisson", S.poisson, (1000, 0.05, 1000), {"relation": "replace_one"}),
      ("jaxdp.sampling.fixed", S.fixed, (1000, 50), {}),
      ("jaxdp.sampling.fixed", S.fixed, (1000, 50), {"relation": "add_remove"}),
      ("jaxdp.sampling.balls_in_bins", S.balls_in_bins, (1000, 50, 80), {}),
      ("jaxdp.sampling.shuffle", S.shuffle, (1000, 50), {}),
      ("jaxdp.sampling.shuffle", S.shuffle, (1000, 50), {"relation": "replace_one"}),
  ]


def surface_samplers(jaxdp, R, D, ctx):
  s = "jaxdp.epsilon/samplers"
  made = []
  for name, ctor, args, kw in _samplers(jaxdp):
    smp = R.ask("jaxdp.sampling", name, ctor, *args, kind="other", **kw)
    if smp is not None:
      made.append(smp)
      R.ask("jaxdp.sampling", "steps_per_epoch", lambda m: m.steps_per_epoch, smp, kind="other")
      R.ask("jaxdp.sampling", "epochs_to_steps", lambda m, e: m.epochs_to_steps(e), smp, 3,
            kind="other")
  ctx["samplers"] = made
  S = jaxdp.sampling
  R.ask("jaxdp.sampling", "jaxdp.sampling.poisson_steps_per_epoch", S.poisson_steps_per_epoch,
        256 / 60000, kind="other")
  R.ask("jaxdp.sampling", "jaxdp.sampling.epochs_to_steps", S.epochs_to_steps, 2.5, 234,
        kind="other")
  for smp in made:
    sig, steps, dlt = D.f(D.sigma(1, 0.8, 3.0)[0]), int(D.steps(1, 20, 300)[0]), 1e-5
    if isinstance(smp, jaxdp.sampling.PoissonSampler) and smp.relation == "replace_one":
      continue  # ~13 s of compilation for either accountant; relations: fixed, shuffle, CLI
    R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, smp, sig, steps, dlt)
    R.ask(s, "jaxdp.epsilon", jaxdp.epsilon, smp, sig, steps, dlt, accountant="pld")
    if not isinstance(smp, jaxdp.sampling.BallsInBinsSampler):  # ~10 s more compilation
      R.ask(s, "jaxdp.delta", jaxdp.delta, smp, sig, steps, 2.0)


def surface_rdp(jaxdp, R, D, ctx):
  s = "jaxdp.rdp"
  rdp = jaxdp.rdp
  alpha = D.loguniform(1.01, 256.0, ARR)
  for _ in range(R.count(3)):
    q, sig = D.q(ARR), D.sigma(ARR)
    R.ask(s, "jaxdp.rdp.sampled_gaussian", rdp.sampled_gaussian, q, sig, alpha)
    R.ask(s, "jaxdp.rdp.sampled_gaussian_bound", rdp.sampled_gaussian_bound, q, sig, alpha)
    R.ask(s, "jaxdp.rdp.gaussian", rdp.gaussian, sig, alpha)
  orders = np.asarray(rdp.DEFAULT_ORDERS)
  R.ask(s, "jaxdp.rdp.DEFAULT_ORDERS", lambda: rdp.DEFAULT_ORDERS, kind="other")
  ords = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])
  for _ in range(R.count(2)):
    q, sig, T = D.f(D.loguniform(1e-3, 0.5)), D.f(D.sigma(1, 0.5, 5.0)[0]), int(D.steps(1)[0])
    curve = R.ask(s, "jaxdp.rdp.dpsgd_rdp", rdp.dpsgd_rdp, q, sig, T, ords)
    if curve is None:
      continue
    curve = np.asarray(curve, dtype=np.float64)
    for dlt in (1e-5, 1e-10):
      R.ask(s, "jaxdp.rdp.to_epsilon", rdp.to_epsilon, curve, ords, dlt)
      R.ask(s, "jaxdp.rdp.to_epsilon", rdp.to_epsilon, curve, ords, dlt, method="classic")
      R.ask(s, "jaxdp.rdp.to_epsilon_refined", rdp.to_epsilon_refined, curve, ords, dlt)
    R.ask(s, "jaxdp.rdp.to_delta", rdp.to_delta, curve, ords, 1.0)
    R.ask(s, "jaxdp.rdp.to_delta_refined", rdp.to_delta_refined, curve, ords, 1.0)
  for _ in range(R.count(2)):
    R.ask(s, "jaxdp.rdp.dpsgd_epsilon", rdp.dpsgd_epsilon, D.q(ARR), D.sigma(ARR), D.steps(ARR),
          D.delta(ARR))
    R.ask(s, "jaxdp.rdp.dpsgd_delta", rdp.dpsgd_delta, D.q(ARR), D.sigma(ARR), D.steps(ARR),
          D.eps(ARR))
  # dpsgd_rdp at the default orders (~7 s of compilation) is not asked; explicit orders are


def surface_profiles(jaxdp, R, D, ctx):
  s = "jaxdp.profiles"
  P = jaxdp.profiles
  for _ in range(R.count(1)):
    e, sig = D.eps(ARR, 0.0 + 1e-3, 10.0), D.sigma(ARR)
    b, k, q = D.loguniform(0.1, 10.0, ARR), np.arange(1, ARR + 1), D.q(ARR)
    dl = D.delta(ARR)
    R.ask(s, "jaxdp.profiles.gaussian", P.gaussian, e, sig)
    R.ask(s, "jaxdp.profiles.gaussian_log_delta", P.gaussian_log_delta, e, sig)
    R.ask(s, "jaxdp.profiles.gaussian_epsilon", P.gaussian_epsilon, dl, sig)
    R.ask(s, "jaxdp.profiles.gaussian_group", P.gaussian_group, e, sig, k)
    R.ask(s, "jaxdp.profiles.gaussian", P.gaussian, e, sig, sensitivity=2.0)
    R.ask(s, "jaxdp.profiles.laplace", P.laplace, e, b)
    R.ask(s, "jaxdp.profiles.laplace_log_delta", P.laplace_log_delta, e, b)
    R.ask(s, "jaxdp.profiles.laplace_group", P.laplace_group, e, b, k)
    R.ask(s, "jaxdp.profiles.sampled_gaussian", P.sampled_gaussian, e, q, sig)
    R.ask(s, "jaxdp.profiles.sampled_gaussian", P.sampled_gaussian, e, q, sig, direction="add")
    R.ask(s, "jaxdp.profiles.sampled_gaussian", P.sampled_gaussian, e, q, sig,
          direction="remove")
    R.ask(s, "jaxdp.profiles.sampled_gaussian_log_delta", P.sampled_gaussian_log_delta, e, q, sig)
    p_ = D.rng.dirichlet(np.ones(4), size=2)
    R.ask(s, "jaxdp.profiles.hockey_stick", P.hockey_stick, p_[0], p_[1], 0.5, nq=1)
    R.ask(s, "jaxdp.profiles.log_hockey_stick", P.log_hockey_stick, np.log(p_[0]),
          np.log(p_[1]), 0.5, nq=1)
    R.ask(s, "jaxdp.profiles.amplify_poisson", P.amplify_poisson, e, dl, q)
    R.ask(s, "jaxdp.profiles.amplify_without_replacement", P.amplify_without_replacement,
          e, dl, 50, 1000)
    R.ask(s, "jaxdp.profiles.amplify_with_replacement", P.amplify_with_replacement,
          1.0, np.array([1e-6, 1e-4, 1e-2, 0.1, 0.3]), 5, 1000, nq=1)
    R.ask(s, "jaxdp.profiles.randomized_response", P.randomized_response, e,
          D.rng.uniform(0.5, 1.0, ARR))
    R.ask(s, "jaxdp.profiles.randomized_membership", P.randomized_membership, e,
          D.rng.uniform(0.01, 1.0, ARR), 0.5)
    R.ask(s, "jaxdp.profiles.analytic_gaussian_sigma", P.analytic_gaussian_sigma, e, dl,
          kind="calibration", calib=_analytic_calib(jaxdp, e, dl))


def _analytic_calib(jaxdp, e, dl):
  """Check: δ(ε) of the Gaussian at the returned σ, in scoped float64.

  The jitted kernels answer in the default dtype (float32 unless x64 is on);
  the float32 profile at a float32 σ is off by up to ~3e-3 relative where
  δ(ε) cancels (small ε, large σ), so the check evaluates the profile at the
  returned σ in float64 (``jax.enable_x64`` scoped to the check).
  """
  import jax  # pylint: disable=import-outside-toplevel
  def check(sig):
    sig = np.asarray(sig, np.float64)
    with jax.enable_x64(True):
      v = np.asarray(jaxdp.profiles.gaussian(np.asarray(e, np.float64), sig), np.float64)
    return (f"jaxdp.profiles.gaussian({fmt(e)}, sigma_found) in float64 <= {fmt(dl)}", v,
            ~(v > dl) | ~np.isfinite(sig))
  return {"target": dl, "rtol": 1e-6, "check": check}


def surface_cdp(jaxdp, R, D, ctx):
  s = "jaxdp.cdp"
  C = jaxdp.cdp
  sig, e, dl = D.sigma(ARR), D.eps(ARR), D.delta(ARR)
  rho = D.loguniform(1e-3, 10.0, ARR)
  mu, tau = R.ask(s, "jaxdp.cdp.gaussian", C.gaussian, sig) or (None, None)
  R.ask(s, "jaxdp.cdp.gaussian", C.gaussian, sig, sensitivity=2.0)
  R.ask(s, "jaxdp.cdp.group_gaussian", C.group_gaussian, sig, 3)
  R.ask(s, "jaxdp.cdp.from_pure_dp", C.from_pure_dp, e)
  mus, taus = D.loguniform(1e-3, 1.0, ARR), D.loguniform(0.3, 3.0, ARR)
  R.ask(s, "jaxdp.cdp.compose", C.compose, mus, taus, nq=1)
  R.ask(s, "jaxdp.cdp.to_epsilon", C.to_epsilon, mus, taus, dl)
  R.ask(s, "jaxdp.cdp.to_delta", C.to_delta, mus, taus, e)
  R.ask(s, "jaxdp.cdp.rho_gaussian", C.rho_gaussian, sig)
  R.ask(s, "jaxdp.cdp.rho_from_pure_dp", C.rho_from_pure_dp, e)
  R.ask(s, "jaxdp.cdp.rho_to_epsilon", C.rho_to_epsilon, rho, dl)
  R.ask(s, "jaxdp.cdp.rho_to_epsilon", C.rho_to_epsilon, rho, dl, method="classic")
  R.ask(s, "jaxdp.cdp.rho_to_delta", C.rho_to_delta, rho, e)
  R.ask(s, "jaxdp.cdp.rho_for_epsilon", C.rho_for_epsilon, e, dl)
  ords = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])
  curve = R.ask(s, "jaxdp.rdp.gaussian", jaxdp.rdp.gaussian, 2.0, ords, kind="other")
  if curve is not None:
    R.ask(s, "jaxdp.cdp.rho_from_rdp", C.rho_from_rdp, np.asarray(curve, np.float64), ords, nq=1)
  R.ask(s, "jaxdp.cdp.rdp_from_rho", C.rdp_from_rho, 0.125, ords)


def surface_composition(jaxdp, R, D, ctx):
  s = "jaxdp.composition"
  C = jaxdp.composition
  e, dl = D.eps(ARR, 0.01, 2.0), D.delta(ARR, 1e-12, 1e-3)
  k = np.floor(D.loguniform(1, 1000, ARR)).astype(np.int64)
  R.ask(s, "jaxdp.composition.basic", C.basic, e, dl, k)
  R.ask(s, "jaxdp.composition.advanced", C.advanced, e, dl, k, 1e-6)
  R.ask(s, "jaxdp.composition.advanced_heterogeneous", C.advanced_heterogeneous, e, dl, 1e-6,
        nq=1)
  for i in range(R.count(3)):
    R.ask(s, "jaxdp.composition.optimal_homogeneous_delta", C.optimal_homogeneous_delta,
          D.f(e[i]), D.f(dl[i]), int(min(k[i], 50)), D.f(e[i] * 5))
    R.ask(s, "jaxdp.composition.optimal_homogeneous_epsilon", C.optimal_homogeneous_epsilon,
          D.f(e[i]), D.f(dl[i]), int(min(k[i], 50)), 1e-5)


def surface_pld(jaxdp, R, D, ctx):
  s = "jaxdp.pld"
  P = jaxdp.pld
  for i in range(R.count(3)):
    q, sig, T = D.f(D.loguniform(1e-3, 0.2)), D.f(D.sigma(1, 0.7, 5.0)[0]), int(D.steps(1, 1, 5000)[0])
    R.ask(s, "jaxdp.pld.epsilon", P.epsilon, q, sig, T, 1e-6, return_bounds=bool(i % 2 == 0))
    R.ask(s, "jaxdp.pld.delta", P.delta, q, sig, T, 1.5, return_bounds=bool(i % 2 == 1))
    R.ask(s, "jaxdp.pld.grid_interval", P.grid_interval, q, sig, T, kind="other")
  R.ask(s, "jaxdp.pld.epsilon", P.epsilon, 0.01, 1.0, 500, 1e-5, rtol=1e-2, return_bounds=True)
  R.ask(s, "jaxdp.pld.epsilon", P.epsilon, 0.01, 1.0, 500, 1e-5,
        value_discretization_interval=1e-3)
  R.ask(s, "jaxdp.pld.epsilon", P.epsilon, np.array([0.01, 0.02]), np.array([1.0, 1.5]), 200,
        1e-5, return_bounds=True)


def _events(jaxdp):
  E = jaxdp.events
  return [
      E.Gaussian(1.3),
      E.Gaussian(2.0, 2.0),
      E.SampledGaussian(0.02, 1.1),
      E.SampledGaussian(0.02, 1.1, "replace_one"),
      E.Laplace(1.5),
      E.PureDP(0.3),
      E.RandomizedResponse(0.2, 4),
      E.DiscreteLaplace(0.7, 1),
      E.DiscreteGaussian(2.0, 1),
      E.MixtureOfGaussians(1.5, (0.0, 1.0, 2.0), (0.2, 0.5, 0.3)),
      E.EpsilonDelta(0.5, 1e-7),
      E.SampledLaplace(0.05, 2.0),
      E.PMFPair((0.5, 0.3, 0.2), (0.2, 0.3, 0.5)),
      E.TruncatedPoissonGaussian(1000, 0.05, 80, 1.2),
      E.SampledWithoutReplacementGaussian(1000, 50, 1.2),
      E.BallsInBinsGaussian(1000, 50, 1.2, 80),
      E.ShuffledGaussian(1000, 50, 1.2),
  ]


def surface_accountant(jaxdp, R, D, ctx):
  s = "jaxdp.accountant"
  A = jaxdp.accountant
  evs = _events(jaxdp)
  ords = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])
  for i, ev in enumerate(evs):
    R.ask(s, "jaxdp.events.validate", jaxdp.events.validate, ev, kind="other")
    if i != 13:  # TruncatedPoissonGaussian: ~30 s of compilation, see jaxdp.rdp_samplers
      R.ask(s, "jaxdp.accountant.event_rdp", A.event_rdp, ev, ords, nq=1)
  R.ask(s, "jaxdp.accountant.event_pure_epsilon", A.event_pure_epsilon, evs[5])
  R.ask(s, "jaxdp.accountant.event_pure_epsilon", A.event_pure_epsilon, evs[6])
  for acc_name, ctor, kw, ev_idx in (
      # composing an event compiles per event kind (5-40 s for the sampled ones): the
      # cheap kinds here; every kind's RDP is asked through event_rdp above
      ("rdp", A.rdp, {}, (0, 2, 5, 8, 10, 16)),
      ("cdp", A.cdp, {}, (0, 1, 5, 8, 10)),
      ("pld", A.pld, {}, (0, 2, 4, 6, 10))):
    def run(ctor=ctor, kw=kw, ev_idx=ev_idx, acc_name=acc_name):
      acc = ctor(**kw)
      out = []
      for i in ev_idx:
        try:
          st = acc.init()
          st = acc.compose(st, evs[i], count=7)
          st = acc.compose(st, evs[0], count=3)
          row = {"event": i, "epsilon": acc.epsilon(st, 1e-6), "delta": acc.delta(st, 2.0)}
          if acc.tradeoff is not None and acc_name != "pld":
            row["tradeoff"] = acc.tradeoff(st, np.array([1e-3, 1e-1]))
        except Exception as exc:  # pylint: disable=broad-except
          row = {"event": i, "error": error_string(exc)}
        out.append(row)
      return out
    R.ask(s, f"jaxdp.accountant.{acc_name}({call_string('', (), kw)[1:-1]})"
          f"[events {list(ev_idx)}]", run, nq=2 * len(ev_idx))
  # one heterogeneous schedule, and a batch of events
  def sched():
    acc = A.rdp()
    st = acc.init()
    for i, c in ((2, 100), (5, 3), (8, 10), (2, 50)):
      st = acc.compose(st, evs[i], count=c)
    return acc.epsilon(st, np.array([1e-5, 1e-9])), acc.delta(st, np.array([1.0, 3.0]))
  R.ask(s, "jaxdp.accountant.rdp() schedule", sched, nq=4)
  def batch():
    acc = A.rdp()
    ev = jaxdp.events.SampledGaussian(np.array([0.01, 0.02, 0.05]), np.array([1.0, 1.2, 2.0]))
    st = acc.compose(acc.init(), ev, count=np.array([10, 20, 30]))
    return acc.epsilon(st, 1e-5)
  del batch  # a batch of events composed at once: ~8 s of compilation, not asked
  def bad_event():
    acc = A.rdp()
    return acc.compose(acc.init(), jaxdp.events.Gaussian(-1.0))
  R.ask(s, "jaxdp.accountant.rdp().compose(Gaussian(-1.0))", bad_event)


def surface_calibrate(jaxdp, R, D, ctx):
  samplers = ctx.get("samplers", [])
  s = "jaxdp.calibrate"
  C = jaxdp.calibrate
  R.ask(s, "jaxdp.calibrate constants", lambda: (C.SIGMA_RANGE, C.MIN_SAMPLING_RATE, C.MAX_STEPS),
        kind="other")
  # sigma, RDP, batched
  for _ in range(R.count(2)):
    t, dl, q, T = D.eps(4, 0.3, 10.0), D.delta(4, 1e-10, 1e-3), D.q(4, False), D.steps(4, 10, 1e5)
    R.ask(s, "jaxdp.calibrate.sigma", C.sigma, t, dl, q, T, kind="calibration",
          calib=_sigma_calib(jaxdp, t, dl, q, T, "rdp", 1e-6))
  for _ in range(R.count(3)):
    t, dl, q, T = (D.f(D.eps(1, 0.3, 10.0)[0]), D.f(D.delta(1, 1e-10, 1e-3)[0]),
                   D.f(D.q(1, False)[0]), int(D.steps(1, 10, 1e5)[0]))
    R.ask(s, "jaxdp.calibrate.sigma", C.sigma, t, dl, q, T, kind="calibration",
          calib=_sigma_calib(jaxdp, t, dl, q, T, "rdp", 1e-6))
  R.ask(s, "jaxdp.calibrate.sigma", C.sigma, np.array([0.0, 1.0, 3.0, 0.01]), 1e-5,
        np.array([0.01, 0.0, 1.0, 0.5]), np.array([100, 100, 1, 100000]), kind="calibration",
        calib=_sigma_calib(jaxdp, np.array([0.0, 1.0, 3.0, 0.01]), 1e-5,
                           np.array([0.01, 0.0, 1.0, 0.5]), np.array([100, 100, 1, 100000]),
                           "rdp", 1e-6))
  for _ in range(R.count(3)):
    t, dl, q, T = (D.f(D.eps(1, 0.5, 8.0)[0]), D.f(D.delta(1, 1e-9, 1e-3)[0]),
                   D.f(D.loguniform(1e-3, 0.1)), int(D.steps(1, 10, 1e4)[0]))
    R.ask(s, "jaxdp.calibrate.sigma", C.sigma, t, dl, q, T, accountant="pld", rtol=1e-3,
          kind="calibration", calib=_sigma_calib(jaxdp, t, dl, q, T, "pld", 1e-3))
  for smp in samplers[:1] + samplers[3:4]:
    R.ask(s, "jaxdp.calibrate.sigma", C.sigma, 4.0, 1e-5, smp, 100, rtol=1e-4,
          kind="calibration", calib=_sigma_calib(jaxdp, 4.0, 1e-5, smp, 100, "rdp", 1e-4))
  # steps (exact: rtol 0)
  t, dl, q, sig = D.eps(4, 0.5, 10.0), D.delta(4, 1e-10, 1e-3), D.q(4, False), D.sigma(4, 0.5, 5.0)
  R.ask(s, "jaxdp.calibrate.steps", C.steps, t, dl, q, sig, kind="calibration",
        calib=_steps_calib(jaxdp, t, dl, q, sig, "rdp"))
  for _ in range(R.count(2)):
    t, dl, q, sig = (D.f(D.eps(1, 0.5, 5.0)[0]), 1e-6, D.f(D.loguniform(1e-3, 0.05)),
                     D.f(D.sigma(1, 0.7, 3.0)[0]))
    R.ask(s, "jaxdp.calibrate.steps", C.steps, t, dl, q, sig, kind="calibration",
          calib=_steps_calib(jaxdp, t, dl, q, sig, "rdp"))
  R.ask(s, "jaxdp.calibrate.steps", C.steps, 2.0, 1e-5, 0.01, 1.0, accountant="pld",
        kind="calibration", calib=_steps_calib(jaxdp, 2.0, 1e-5, 0.01, 1.0, "pld"))
  if len(samplers) > 3:
    R.ask(s, "jaxdp.calibrate.steps", C.steps, 6.0, 1e-5, samplers[3], 1.5, kind="calibration",
          calib=_steps_calib(jaxdp, 6.0, 1e-5, samplers[3], 1.5, "rdp"))
  # sampling rate
  t, dl, sig, T = D.eps(4, 0.5, 10.0), D.delta(4, 1e-10, 1e-3), D.sigma(4, 0.5, 5.0), D.steps(4, 10, 1e4)
  R.ask(s, "jaxdp.calibrate.sampling_rate", C.sampling_rate, t, dl, sig, T, kind="calibration",
        calib=_rate_calib(jaxdp, t, dl, sig, T, "rdp", 1e-6))
  R.ask(s, "jaxdp.calibrate.sampling_rate", C.sampling_rate, 2.0, 1e-5, 1.0, 1000,
        accountant="pld", rtol=1e-3, kind="calibration",
        calib=_rate_calib(jaxdp, 2.0, 1e-5, 1.0, 1000, "pld", 1e-3))
  for smp in samplers[:1] + samplers[3:4]:
    R.ask(s, "jaxdp.calibrate.sampling_rate", C.sampling_rate, 4.0, 1e-5, 1.2, 100, rtol=1e-4,
          sampler=smp, kind="calibration",
          calib=_rate_calib(jaxdp, 4.0, 1e-5, 1.2, 100, "rdp", 1e-4, sampler=smp))
  # analytic Gaussian and the differentiable paths
  e, dl = D.eps(ARR, 0.05, 10.0), D.delta(ARR)
  R.ask(s, "jaxdp.calibrate.analytic_gaussian", C.analytic_gaussian, e, dl,
        kind="calibration", calib=_analytic_calib(jaxdp, e, dl))
  # not asked, to keep a run within 6 minutes on 2 cores: calibrate.solve_sigma (~20 s of
  # compilation), calibrate.optimize_dpsgd (~45 s), calibrate.differentiable_epsilon (~12 s)


def _sigma_calib(jaxdp, t, dl, q, T, acc, rtol):
  def check(sig):
    sig = np.asarray(sig, np.float64)
    fin = np.isfinite(sig) & (sig > 0)
    v = np.asarray(jaxdp.epsilon(q, np.where(fin, sig, 1.0), T, dl, accountant=acc),
                   np.float64)
    return (f"jaxdp.epsilon({fmt(q)}, sigma_found, {fmt(T)}, {fmt(dl)}, accountant={acc!r})"
            f" <= {fmt(t)}", v, ~fin | (v <= np.asarray(t)))
  return {"target": t, "rtol": rtol, "check": check}


def _steps_calib(jaxdp, t, dl, q, sig, acc):
  def check(T):
    T = np.asarray(T)
    v = np.asarray(jaxdp.epsilon(q, sig, T, dl, accountant=acc), np.float64)
    return (f"jaxdp.epsilon({fmt(q)}, {fmt(sig)}, steps_found, {fmt(dl)}, accountant={acc!r})"
            f" <= {fmt(t)}", v, v <= np.asarray(t))
  return {"target": t, "rtol": 0.0, "check": check}


def _rate_calib(jaxdp, t, dl, sig, T, acc, rtol, sampler=None):
  def check(q):
    qa = np.asarray(q, np.float64)
    if sampler is None:
      subject, fmt_subject = qa, "q_found"
    else:
      subject, fmt_subject = _sampler_at_rate(jaxdp, sampler, float(qa)), "sampler_at(q_found)"
      if subject is None:
        return ("no sampler at q = 0", qa, np.ones_like(qa, bool))
    v = np.asarray(jaxdp.epsilon(subject, sig, T, dl, accountant=acc), np.float64)
    return (f"jaxdp.epsilon({fmt_subject}, {fmt(sig)}, {fmt(T)}, {fmt(dl)}, accountant={acc!r})"
            f" <= {fmt(t)}", v, v <= np.asarray(t))
  return {"target": t, "rtol": rtol, "check": check}


def _sampler_at_rate(jaxdp, smp, q):
  """The same kind of sampler at rate q, built from public constructors."""
  S = jaxdp.sampling
  n = smp.dataset_size
  if isinstance(smp, S.PoissonSampler):
    return S.poisson(n, q, smp.capacity, relation=smp.relation)
  b = int(round(q * n))
  if b < 1:
    return None
  if isinstance(smp, S.FixedSampler):
    return S.fixed(n, b, relation=smp.relation)
  if isinstance(smp, S.ShuffleSampler):
    return S.shuffle(n, b, relation=smp.relation)
  return S.balls_in_bins(n, b, smp.capacity)


def surface_tradeoff(jaxdp, R, D, ctx):
  s = "jaxdp.tradeoff"
  T_ = jaxdp.tradeoff
  fpr = np.array([1e-4, 1e-3, 1e-2, 0.1, 0.3, 0.5, 0.8, 0.99])
  R.ask(s, "jaxdp.tradeoff constants", lambda: (T_.DEFAULT_NUM_EPS, T_.DEFAULT_GDP_FPR),
        kind="other")
  R.ask(s, "jaxdp.tradeoff.gdp_tpr", T_.gdp_tpr, D.loguniform(0.1, 5.0, ARR), fpr)
  R.ask(s, "jaxdp.tradeoff.epsilon_grid", T_.epsilon_grid, 0.01, 1.0, 500, num_eps=32,
        nq=32)
  R.ask(s, "jaxdp.tradeoff.tradeoff", T_.tradeoff, 0.01, 1.0, 500, fpr, num_eps=64, nq=2 * ARR)
  R.ask(s, "jaxdp.tradeoff.gdp_mu", T_.gdp_mu, 0.01, 1.0, 500, num_eps=64, nq=2)
  eg = np.linspace(0.0, 4.0, 16)
  du = jaxdp.profiles.gaussian(eg, 1.0)
  R.ask(s, "jaxdp.tradeoff.from_profile", T_.from_profile, np.asarray(du), np.asarray(du) * 0.9,
        eg, fpr, nq=2 * ARR)
  def of_state():
    acc = jaxdp.accountant.rdp()
    st = acc.compose(acc.init(), jaxdp.events.SampledGaussian(0.01, 1.0), count=500)
    return T_.tradeoff_of_state(acc, st, fpr, num_eps=32)
  R.ask(s, "jaxdp.tradeoff.tradeoff_of_state(rdp, SampledGaussian(0.01, 1.0) x500)", of_state,
        nq=2 * ARR)
  def check(sig):
    v = np.asarray(T_.tradeoff(0.01, float(sig), 500, np.array([0.01]), num_eps=64).tpr_upper)
    return ("jaxdp.tradeoff.tradeoff(0.01, sigma_found, 500, [0.01], num_eps=64).tpr_upper"
            " <= 0.05", v, v <= 0.05)
  R.ask(s, "jaxdp.tradeoff.calibrate_sigma", T_.calibrate_sigma, 0.01, 500, target_tpr=0.05,
        at_fpr=0.01, num_eps=64, kind="calibration",
        calib={"target": 0.05, "rtol": 1e-3, "check": check})


def surface_tuning(jaxdp, R, D, ctx):
  s = "jaxdp.tuning"
  T_ = jaxdp.tuning
  ords = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])
  R.ask(s, "jaxdp.tuning.DEFAULT_LAMBDA_HATS", lambda: T_.DEFAULT_LAMBDA_HATS, kind="other")
  for g, sh in ((0.1, 1.0), (0.5, 0.5), (0.05, 2.0)):
    R.ask(s, "jaxdp.tuning.tnb_mean", T_.tnb_mean, g, sh)
  curve = np.asarray(jaxdp.rdp.dpsgd_rdp(0.01, 1.1, 1000, ords), np.float64)
  for mean, sh in ((10.0, 0.0), (5.0, 0.5)):
    R.ask(s, "jaxdp.tuning.repeat_and_select_rdp", T_.repeat_and_select_rdp, curve, ords, mean, sh)
  for mean, sh in ((10.0, 0.0), (3.0, 2.0)):
    R.ask(s, "jaxdp.tuning.epsilon", T_.epsilon, jaxdp.events.SampledGaussian(0.01, 1.1), 1000,
          1e-5, mean, sh, nq=2)
  def tuned():
    acc = jaxdp.accountant.rdp(orders=list(ords))
    st = acc.compose(acc.init(), jaxdp.events.SampledGaussian(0.01, 1.1), count=1000)
    return T_.tuned(st, ords, 10.0, 1.0)
  R.ask(s, "jaxdp.tuning.tuned(rdp state)", tuned)
  def check(sig):
    v = np.asarray(T_.epsilon(jaxdp.events.SampledGaussian(0.01, float(sig)), 1000, 1e-5, 10.0,
                              1.0).tuned)
    return ("jaxdp.tuning.epsilon(SampledGaussian(0.01, sigma_found), 1000, 1e-5, 10.0, 1.0)"
            ".tuned <= 3.0", v, v <= 3.0)
  R.ask(s, "jaxdp.tuning.sigma", T_.sigma, 3.0, 1e-5, 0.01, 1000, 10.0, 1.0, kind="calibration",
        calib={"target": 3.0, "rtol": 1e-6, "check": check})


def surface_sweep(jaxdp, R, D, ctx):
  s = "jaxdp.sweep"
  W = jaxdp.sweep
  R.ask(s, "jaxdp.sweep.grid", W.grid, q=np.array([0.01, 0.1]), sigma=np.array([1.0, 2.0]),
        kind="other")
  q, sig = np.array([0.001, 0.01, 0.1, 1.0]), np.array([0.5, 1.0, 4.0])
  R.ask(s, "jaxdp.sweep.epsilon", W.epsilon, q[:, None], sig[None, :], 1000, 1e-5)
  R.ask(s, "jaxdp.sweep.delta", W.delta, q[:, None], sig[None, :], 1000, 2.0)
  t = np.array([1.0, 4.0])
  qq = np.array([0.005, 0.02])
  R.ask(s, "jaxdp.sweep.sigma", W.sigma, t[:, None], 1e-5, qq[None, :], 1000, kind="calibration",
        calib=_sigma_calib(jaxdp, t[:, None], 1e-5, qq[None, :], 1000, "rdp", 1e-6))
  R.ask(s, "jaxdp.sweep.steps", W.steps, t[:, None], 1e-5, qq[None, :], 1.0, kind="calibration",
        calib=_steps_calib(jaxdp, t[:, None], 1e-5, qq[None, :], 1.0, "rdp"))
  R.ask(s, "jaxdp.sweep.sampling_rate", W.sampling_rate, t[:, None], 1e-5,
        np.array([1.0, 2.0])[None, :], 1000, kind="calibration",
        calib=_rate_calib(jaxdp, t[:, None], 1e-5, np.array([1.0, 2.0])[None, :], 1000, "rdp",
                          1e-6))


def surface_rdp_samplers(jaxdp, R, D, ctx):
  s = "jaxdp.rdp_samplers"
  RS, RR = jaxdp.rdp_samplers, jaxdp.rdp_relations
  alpha = np.array([1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0])
  R.ask(s, "jaxdp.rdp_samplers.without_replacement_gaussian", RS.without_replacement_gaussian,
        1000, 50, 1.2, alpha)
  R.ask(s, "jaxdp.rdp_samplers.without_replacement_gaussian", RS.without_replacement_gaussian,
        1000, 50, 1.2, alpha, relation="add_remove")
  # truncated_poisson_gaussian (~11 s of compilation) is asked through jaxdp.epsilon's
  # sampling.poisson(1000, 0.05, 80) above
  R.ask(s, "jaxdp.rdp_samplers.truncated_poisson_pair", RS.truncated_poisson_pair, 1000, 0.05,
        80, nq=1)
  R.ask(s, "jaxdp.rdp_samplers.balls_in_bins_gaussian_epoch", RS.balls_in_bins_gaussian_epoch,
        1000, 50, 1.2, alpha)
  R.ask(s, "jaxdp.rdp_samplers.shuffle_gaussian_epoch", RS.shuffle_gaussian_epoch, 1.2, alpha)
  R.ask(s, "jaxdp.rdp_samplers.shuffle_gaussian_epoch", RS.shuffle_gaussian_epoch, 1.2, alpha,
        relation="replace_one")
  R.ask(s, "jaxdp.rdp_samplers.shuffle_lower_bound_epsilon", RS.shuffle_lower_bound_epsilon,
        1000, 50, 1.2, 3, 1e-5)
  s = "jaxdp.rdp_relations"
  R.ask(s, "jaxdp.rdp_relations.sampled_gaussian_replace_one", RR.sampled_gaussian_replace_one,
        D.q(ARR), D.sigma(ARR), alpha)
  # objects whose repr holds addresses or private names are asked through a no-argument
  # lambda, so that the call string is the same label in every run and on every commit
  R.ask(s, f"jaxdp.rdp_relations.replace_one(lambda a: jaxdp.rdp.gaussian(1.5, a), {fmt(alpha)})",
        lambda: RR.replace_one(lambda a: jaxdp.rdp.gaussian(1.5, a), alpha))


def surface_general(jaxdp, R, D, ctx):
  """pld_general / pairs / mechanisms / pld_accountant: a few questions each."""
  s = "jaxdp.pld_general"
  mech = jaxdp.pairs.gaussian(2.0)
  R.ask(s, "jaxdp.pld_general.epsilon([(jaxdp.pairs.gaussian(2.0), 10)], 1e-05)",
        lambda: jaxdp.pld_general.epsilon([(mech, 10)], 1e-5))
  R.ask(s, "jaxdp.pld_general.delta([(jaxdp.pairs.gaussian(2.0), 10)], 1.0, return_bounds=True)",
        lambda: jaxdp.pld_general.delta([(mech, 10)], 1.0, return_bounds=True))
  R.ask(s, "jaxdp.mechanisms.event_rdp", jaxdp.mechanisms.event_rdp,
        jaxdp.events.Laplace(1.0), np.array([2.0, 4.0]))
  R.ask(s, "jaxdp.pld_accountant.epsilon_batch", jaxdp.pld_accountant.epsilon_batch,
        [[(jaxdp.events.SampledGaussian(0.01, 1.0), 100)]], 1e-5)


def _write_sweep_inputs(tmp):
  path = os.path.join(tmp, "grid.csv")
  with open(path, "w") as f:
    f.write("q,sigma,steps,delta,epsilon\n"
            "0.004,1.1,1000,1e-5,\n"
            "0.01,,500,1e-6,3\n"
            "0.02,1.0,,1e-5,2\n"
            ",1.2,1000,1e-5,2\n"
            "0.01,1.0,100,,1.5\n"
            "0.5,,10,1e-5,\n")
  return path


def surface_cli(jaxdp, R, D, ctx):
  s = "jaxdp.cli"
  base = ["--q", "0.004", "--sigma", "1.1", "--steps", "1000"]
  batch = ["--batch-size", "50", "--dataset-size", "1000", "--epochs", "2", "--sigma", "1.2"]
  with tempfile.TemporaryDirectory() as tmp:
    grid = _write_sweep_inputs(tmp)
    out_csv = os.path.join(tmp, "out.csv")
    cmds = [
        (["epsilon", *base, "--delta", "1e-5"], "forward"),
        (["epsilon", *base, "--delta", "1e-5", "--accountant", "rdp"], "forward"),
        (["delta", *base, "--epsilon", "2"], "forward"),
        (["epsilon", *batch, "--delta", "1e-5"], "forward"),
        (["epsilon", *base, "--delta", "1e-5", "--tuning", "geometric:10"], "forward"),
        (["epsilon", *base, "--delta", "1e-5", "--tradeoff", "0.001,0.1"], "forward"),
        (["epsilon", *batch, "--delta", "1e-5", "--sampler", "fixed"], "forward"),
        (["epsilon", *batch, "--delta", "1e-5", "--sampler", "truncated-poisson",
          "--capacity", "80"], "forward"),
        (["epsilon", *batch, "--delta", "1e-5", "--sampler", "shuffle"], "forward"),
        (["epsilon", *base, "--delta", "2"], "forward"),
        (["calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--q", "0.004",
          "--steps", "1000"], "calibration"),
        (["calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--q", "0.004",
          "--steps", "1000", "--accountant", "rdp"], "calibration"),
        (["calibrate", "--solve", "steps", "--target-epsilon", "2", "--delta", "1e-5",
          "--q", "0.004", "--sigma", "1.1", "--accountant", "rdp"], "calibration"),
        (["calibrate", "--solve", "sampling-rate", "--target-epsilon", "2", "--delta", "1e-5",
          "--sigma", "1.1", "--steps", "1000", "--dataset-size", "60000", "--accountant",
          "rdp"], "other"),
        (["sweep", grid, "--out", out_csv, "--no-progress"], "forward"),
    ]
    for argv, kind in cmds:
      def run(argv=argv, out_csv=out_csv):
        if os.path.exists(out_csv):
          os.remove(out_csv)
        rc, out, err = _run_cli(jaxdp, argv)
        res = {"rc": rc, "stdout": out, "stderr": err.replace(tmp, _TMP_TOKEN)}
        if argv[0] == "sweep" and os.path.exists(out_csv):
          with open(out_csv) as f:
            res["out"] = f.read()
        return res
      shown = "jaxdp " + " ".join(a.replace(tmp, _TMP_TOKEN) for a in argv)
      calib = _cli_calib(jaxdp, argv) if kind == "calibration" else None
      R.ask(s, shown, run, kind=kind, calib=calib)


def _run_cli(jaxdp, argv):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
      rc = jaxdp.cli.main(list(argv))
    except SystemExit as e:
      rc = e.code
  return rc, out.getvalue(), err.getvalue()


def _cli_arg(argv, name):
  return argv[argv.index(name) + 1] if name in argv else None


def _cli_calib(jaxdp, argv):
  t, dl = float(_cli_arg(argv, "--target-epsilon")), float(_cli_arg(argv, "--delta"))
  acc = _cli_arg(argv, "--accountant") or "pld"
  rtol = 1e-6 if acc == "rdp" else 1e-3
  solve = _cli_arg(argv, "--solve") or "sigma"
  def answer(res):
    first = res["stdout"].splitlines()[0]
    return float(first.split("=")[1])
  def check(res):
    x = answer(res)
    q = float(_cli_arg(argv, "--q"))
    if solve == "sigma":
      T = int(_cli_arg(argv, "--steps"))
      v = jaxdp.epsilon(q, x, T, dl, accountant=acc)
      call = f"jaxdp.epsilon({q!r}, sigma_printed, {T}, {dl!r}, accountant={acc!r})"
    else:
      sig = float(_cli_arg(argv, "--sigma"))
      v = jaxdp.epsilon(q, sig, int(x), dl, accountant=acc)
      call = f"jaxdp.epsilon({q!r}, {sig!r}, steps_printed, {dl!r}, accountant={acc!r})"
    return f"{call} <= {t!r}", np.asarray(v), np.asarray(v) <= t
  return {"target": t, "rtol": 0.0 if solve == "steps" else rtol, "check": check,
          "answer": answer}


def surface_illegal(jaxdp, R, D, ctx):
  s = "illegal"
  E = jaxdp.events
  cases = [
      ("jaxdp.epsilon", jaxdp.epsilon, (1.5, 1.0, 10, 1e-5), {}),
      ("jaxdp.epsilon", jaxdp.epsilon, (0.1, -1.0, 10, 1e-5), {}),
      ("jaxdp.epsilon", jaxdp.epsilon, (0.1, 1.0, 2.5, 1e-5), {}),
      ("jaxdp.epsilon", jaxdp.epsilon, (0.1, 1.0, 10, 0.0), {}),
      ("jaxdp.epsilon", jaxdp.epsilon, (0.1, 1.0, 10, 1e-5), {"method": "bogus"}),
      ("jaxdp.epsilon", jaxdp.epsilon, (float("nan"), 1.0, 10, 1e-5), {"accountant": "pld"}),
      ("jaxdp.delta", jaxdp.delta, (0.1, 1.0, 10, -1.0), {}),
      ("jaxdp.pld.epsilon", jaxdp.pld.epsilon, (0.1, 1.0, 10, 1e-5), {"rtol": -1.0}),
      ("jaxdp.calibrate.sigma", jaxdp.calibrate.sigma, (-1.0, 1e-5, 0.1, 10), {}),
      ("jaxdp.calibrate.sigma", jaxdp.calibrate.sigma, (1.0, 1e-5, 0.1, 10), {"rtol": 0.5}),
      ("jaxdp.calibrate.steps", jaxdp.calibrate.steps, (1.0, 2.0, 0.1, 1.0), {}),
      ("jaxdp.sampling.poisson", jaxdp.sampling.poisson, (0, 0.1, 10), {}),
      ("jaxdp.sampling.fixed", jaxdp.sampling.fixed, (100, 200), {}),
      ("jaxdp.sampling.shuffle", jaxdp.sampling.shuffle, (100, 10), {"relation": "bogus"}),
      ("jaxdp.events.validate(jaxdp.events.SampledGaussian(2.0, 1.0))",
       lambda: E.validate(E.SampledGaussian(2.0, 1.0)), (), {}),
      ("jaxdp.events.validate(jaxdp.events.Gaussian(-1.0))",
       lambda: E.validate(E.Gaussian(-1.0)), (), {}),
      ("jaxdp.cdp.to_epsilon", jaxdp.cdp.to_epsilon, (0.1, 1.0, 2.0), {}),
      ("jaxdp.profiles.sampled_gaussian", jaxdp.profiles.sampled_gaussian, (1.0, 0.1, 1.0),
       {"direction": "sideways"}),
      ("jaxdp.composition.advanced", jaxdp.composition.advanced, (1.0, 1e-5, 10, 2.0), {}),
      ("jaxdp.tuning.tnb_mean", jaxdp.tuning.tnb_mean, (1.5, 1.0), {}),
      ("jaxdp.accountant.rdp", jaxdp.accountant.rdp, (), {"orders": [0.5, 2.0]}),
  ]
  for name, fn, args, kw in cases:
    R.ask(s, name, fn, *args, **kw)
  R.ask(s, "jaxdp epsilon --q 2 ...", lambda: _run_cli(jaxdp, [
      "epsilon", "--q", "2", "--sigma", "1", "--steps", "10", "--delta", "1e-5"]))


SURFACES = [
    ("epsilon/delta rdp", surface_epsilon_rdp),
    ("epsilon/delta pld", surface_epsilon_pld),
    ("samplers", surface_samplers),
    ("calibrate", surface_calibrate),
    ("rdp kernels", surface_rdp),
    ("profiles", surface_profiles),
    ("cdp", surface_cdp),
    ("composition", surface_composition),
    ("pld", surface_pld),
    ("accountant", surface_accountant),
    ("tradeoff", surface_tradeoff),
    ("tuning", surface_tuning),
    ("sweep", surface_sweep),
    ("rdp_samplers/relations", surface_rdp_samplers),
    ("pld_general etc.", surface_general),
    ("cli", surface_cli),
    ("illegal inputs", surface_illegal),
]


# ---------------------------------------------------------------------------
# record / compare.
# ---------------------------------------------------------------------------


def record(args):
  if args.src:
    sys.path.insert(0, os.path.abspath(args.src))
  os.environ.setdefault("JAXDP_CACHE_DIR", "off")  # no persistent cache: runs are independent
  t0 = time.perf_counter()
  import jaxdp  # pylint: disable=import-outside-toplevel
  for m in ("cli", "sampling", "events", "accountant", "calibrate", "rdp", "pld"):
    getattr(jaxdp, m)
  import jax  # pylint: disable=import-outside-toplevel
  header = {"jaxdp_file": jaxdp.__file__, "jaxdp_version": getattr(jaxdp, "__version__", None),
            "jax_version": jax.__version__, "numpy_version": np.__version__,
            "x64": bool(jax.config.jax_enable_x64), "n": args.n, "seed": args.seed,
            "python": sys.version.split()[0]}
  print(f"api_diff record: jaxdp from {jaxdp.__file__} (jax {jax.__version__}), "
        f"n={args.n}, seed={args.seed}", flush=True)
  R = Recorder(args.n / 500.0)
  D = Draw(args.seed)
  ctx = {}
  c0 = time.process_time()
  for label, fn in SURFACES:
    if args.only and label not in args.only.split(","):
      continue
    t, c = time.perf_counter(), time.process_time()
    try:
      fn(jaxdp, R, D, ctx)
    except Exception as exc:  # pylint: disable=broad-except
      R.ask(label, f"<surface {label} aborted>", _raise, exc)
    print(f"  [{time.perf_counter() - t0:6.1f} s wall, {time.process_time() - c0:6.1f} s CPU] "
          f"{label}: {time.perf_counter() - t:.1f} s wall, {time.process_time() - c:.1f} s CPU",
          flush=True)
  total, cpu = time.perf_counter() - t0, time.process_time() - c0
  header.update(seconds=round(total, 3), cpu_seconds=round(cpu, 3),
                questions=dict(R.surface_questions),
                surface_seconds={k: round(v, 3) for k, v in R.surface_seconds.items()},
                surface_cpu_seconds={k: round(v, 3) for k, v in R.surface_cpu.items()})
  with open(args.out, "w") as f:
    json.dump({"header": header, "records": R.records}, f, indent=1)
  print("questions per surface (wall s, CPU s):")
  for k, v in R.surface_questions.items():
    print(f"  {k:<28} {v:5d}  ({R.surface_seconds[k]:6.1f}, {R.surface_cpu[k]:6.1f})")
  nq = sum(R.surface_questions.values())
  print(f"total: {nq} questions in {len(R.records)} calls; {total:.1f} s wall, {cpu:.1f} s CPU "
        f"(this process; load average {os.getloadavg()[0]:.1f}) -> {args.out}")
  return 0


def _raise(exc):
  raise exc


def _rel_change(old, new):
  old, new = np.broadcast_arrays(old, new)
  out = np.zeros(old.shape)
  both_inf = (old == new)
  d = np.abs(new - old)
  with np.errstate(divide="ignore", invalid="ignore"):
    rel = np.where(old != 0, d / np.abs(old), np.where(new == 0, 0.0, np.inf))
  out = np.where(both_inf, 0.0, rel)
  out = np.where(np.isnan(out), np.inf, out)
  return out


def _short(v, n=160):
  s = json.dumps(v)
  return s if len(s) <= n else s[:n] + "..."


def compare(args):
  with open(args.old) as f:
    old = json.load(f)
  with open(args.new) as f:
    new = json.load(f)
  print(f"old: {old['header'].get('jaxdp_file')} ({old['header'].get('seconds', 0):.1f} s)")
  print(f"new: {new['header'].get('jaxdp_file')} ({new['header'].get('seconds', 0):.1f} s)")
  o_recs = {r["id"]: r for r in old["records"]}
  n_recs = {r["id"]: r for r in new["records"]}
  fail = False
  missing = [i for i in o_recs if i not in n_recs] + [i for i in n_recs if i not in o_recs]
  mismatched = [i for i in o_recs if i in n_recs and o_recs[i]["call"] != n_recs[i]["call"]]
  identical, fwd_diff, other_diff, cal_moved, cal_fail, err_changed, warn_changed = (
      0, [], [], [], [], [], [])
  n_questions = 0
  for i, o in o_recs.items():
    n = n_recs.get(i)
    if n is None or o["call"] != n["call"]:
      continue
    n_questions += o.get("questions", 1)
    if o.get("warnings") != n.get("warnings"):
      warn_changed.append((i, o, n))
    same = o["result"] == n["result"] and o.get("type") == n.get("type")
    if o["kind"] == "calibration":
      _compare_calibration(i, o, n, same, cal_moved, cal_fail)
    if same:
      identical += 1
      continue
    oe = isinstance(o["result"], dict) and "error" in o["result"]
    ne = isinstance(n["result"], dict) and "error" in n["result"]
    if oe and ne:
      err_changed.append((i, o, n))
      if o["result"]["error"].split(":")[0] != n["result"]["error"].split(":")[0]:
        fwd_diff.append((i, o, n))
    elif o["kind"] == "forward" or oe or ne:
      fwd_diff.append((i, o, n))
    elif o["kind"] == "other":
      other_diff.append((i, o, n))
  print(f"total: {len(o_recs)} calls ({n_questions} questions) in old, {len(n_recs)} in new")
  print(f"bit-identical: {identical}")
  if missing or mismatched:
    fail = True
    print(f"NOT THE SAME QUESTIONS: {len(missing)} ids only on one side, "
          f"{len(mismatched)} with different calls (same --n/--seed and script?)")
    for i in (missing + mismatched)[:20]:
      print(f"  {i}")
  print(f"differing forward answers (incl. error type / error<->value changes): {len(fwd_diff)}")
  for i, o, n in fwd_diff:
    fail = True
    print(f"  {i}: {o['call']}\n    old: {o.get('type')} {_short(o['result'])}\n"
          f"    new: {n.get('type')} {_short(n['result'])}")
  print(f"calibrations that moved: {len(cal_moved)}")
  for i, o, n, rel, rtol, ok in cal_moved:
    status = "OK" if rel <= rtol and ok else "FAIL"
    print(f"  [{status}] {i}: {o['call']}\n    max relative change {rel:.3e} vs rtol {rtol:g};"
          f" new answer meets its target by the public check: {ok}")
  if cal_fail:
    fail = True
  print(f"calibrations failing (moved > rtol, or new check misses the target): {len(cal_fail)}")
  for i, why in cal_fail:
    print(f"  {i}: {why}")
  print(f"errors whose message changed: {len(err_changed)}")
  for i, o, n in err_changed:
    print(f"  {i}: {o['call']}\n    old: {o['result']['error']}\n    new: {n['result']['error']}")
  print(f"'other' answers that changed (reported, not failing): {len(other_diff)}")
  for i, o, n in other_diff:
    print(f"  {i}: {o['call']}\n    old: {_short(o['result'])}\n    new: {_short(n['result'])}")
  print(f"warnings that changed (reported, not failing): {len(warn_changed)}")
  for i, o, n in warn_changed:
    print(f"  {i}: {o['call']}\n    old: {o.get('warnings')}\n    new: {n.get('warnings')}")
  print("RESULT:", "FAIL" if fail else "OK")
  return 1 if fail else 0


def _compare_calibration(i, o, n, same, cal_moved, cal_fail):
  """Relative move vs rtol and the new record's own target check."""
  chk = n.get("check")
  ok = bool(chk) and "error" not in chk and bool(np.all(np.asarray(chk["ok"])))
  if "answer" not in n and "answer" not in o:
    return  # both errored: handled as errors
  if not ok:
    cal_fail.append((i, f"the new answer misses its target: {_short(chk)}"))
  if same:
    return
  if "answer" not in o or "answer" not in n:
    cal_fail.append((i, "an answer appeared or disappeared"))
    return
  a_old, a_new = decode_floats(o["answer"]), decode_floats(n["answer"])
  if a_old.shape != a_new.shape:
    cal_fail.append((i, f"shape changed {a_old.shape} -> {a_new.shape}"))
    return
  rel = float(np.max(_rel_change(a_old, a_new))) if a_old.size else 0.0
  rtol = float(n.get("rtol", 0.0))
  cal_moved.append((i, o, n, rel, rtol, ok))
  if rel > rtol:
    cal_fail.append((i, f"moved by {rel:.3e} > rtol {rtol:g}"))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="command", required=True)
  r = sub.add_parser("record", help="ask the questions, write the answers to OUT.json")
  r.add_argument("out")
  r.add_argument("--n", type=int, default=500, help="about how many questions (default 500)")
  r.add_argument("--seed", type=int, default=0)
  r.add_argument("--only", default=None,
                 help="comma-separated surface labels (debugging: other draws than a full run)")
  r.add_argument("--src", default=None,
                 help="directory put first on sys.path before importing jaxdp")
  c = sub.add_parser("compare", help="compare two records; exit 1 on a failing difference")
  c.add_argument("old")
  c.add_argument("new")
  args = p.parse_args(argv)
  return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
  sys.exit(main())
