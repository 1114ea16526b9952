"""Private numerical helpers: log-space arithmetic, float64 scoping, validation.

Everything here is either a pure jittable array function (``log_add`` & co.) or
a host-level helper (``x64``/``host_function``/``check_*``) that runs outside
``jit`` on concrete values.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, log_ndtr

__all__ = [
    "x64",
    "host_function",
    "to_host",
    "is_concrete",
    "log1p",
    "log_add",
    "log_sub",
    "log_expm1",
    "log1mexp",
    "log_binom",
    "log_erfc",
    "log_ndtr",
    "softplus",
    "safe_log",
    "check_array",
    "check_same_shape",
]


# --------------------------------------------------------------------------
# float64 scoping
# --------------------------------------------------------------------------


@contextlib.contextmanager
def x64():
  """Scopes ``jax_enable_x64=True`` and restores the caller's setting after.

  Host-level entry points wrap their computation in this so they return
  float64 answers without flipping the user's global configuration.
  """
  with jax.enable_x64(True):
    yield


def cpu_cores() -> int:
  """The CPU's cores when JAX computes on the CPU (:func:`thread_map` runs
  JAX work on them side by side), else 0 (an accelerator queues it)."""
  return (os.cpu_count() or 1) if jax.default_backend() == "cpu" else 0


def thread_map(fn: Callable, items, max_workers: int = 4, *, jax_work: bool = True) -> list:
  """``[fn(x) for x in items]``, on a few threads when there are several items.

  XLA:CPU runs one computation on one core, so independent chunks of a
  batch dispatched from several Python threads run side by side (the
  calibration's window solves: 1.7-1.9x on 2 cores); NumPy's FFTs and array
  arithmetic release the GIL too (``jax_work=False``: the general PLD
  engine's directions). Each result is what the sequential loop computes:
  the chunks and their programs are the same. JAX's configuration contexts
  are thread-local, so each worker enters the caller's float64 setting
  (:func:`x64` scopes are not inherited by threads). JAX work on an
  accelerator stays sequential (the device queues it anyway).
  """
  items = list(items)
  cores = cpu_cores() if jax_work else (os.cpu_count() or 1)
  workers = min(len(items), cores, max_workers)
  if workers < 2:
    return [fn(x) for x in items]
  enable = bool(jax.config.jax_enable_x64)

  def run(x):
    with jax.enable_x64(enable):
      return fn(x)

  with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
    return list(pool.map(run, items))


def on_distinct_rows(fn: Callable, *columns: np.ndarray) -> np.ndarray:
  """``fn(*columns)`` for row-wise NumPy work (each output row depends on its
  input row alone), computed once per distinct row of the (n,) columns:
  row by row the same values, at the cost of the distinct rows only."""
  rows, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
  if rows.shape[0] == columns[0].size:
    return fn(*columns)
  return fn(*rows.T)[inverse.reshape(-1)]


class HostBudget:
  """How many more questions of this process the host answers with nothing to
  compile; after that, the compiled programs do (one build, then cheap calls).

  Each no-compilation host path (single RDP questions, PLD guard ceilings,
  calibration rounds, eager kernel calls and accountant read-outs) keeps one.
  ``left`` may be set (tests start each from a fresh process's count)."""

  def __init__(self, size: int):
    self.left = int(size)

  def take(self) -> bool:
    """True, with one question fewer left, while any are left."""
    if self.left > 0:
      self.left -= 1
      return True
    return False


def to_host(x: Any):
  """Converts a (pytree of) array result(s) to NumPy float64 on the host.

  0-d arrays become ``numpy.float64`` scalars so that printing a single answer
  reads naturally; higher-rank arrays stay ``numpy.ndarray``.
  """

  def convert(leaf):
    arr = np.asarray(leaf)
    if arr.dtype.kind == "f":
      arr = arr.astype(np.float64)
    return arr[()] if arr.ndim == 0 else arr

  return jax.tree_util.tree_map(convert, x)


def host_function(fn: Callable) -> Callable:
  """Decorator for host-level entry points: float64 inside, NumPy out."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    with x64():
      return to_host(fn(*args, **kwargs))

  return wrapper


def is_concrete(x: Any) -> bool:
  """True when ``x`` holds concrete values (not a tracer inside jit/vmap/grad)."""
  return not isinstance(x, jax.core.Tracer)


# --------------------------------------------------------------------------
# log-space arithmetic (pure, jittable, broadcasting)
# --------------------------------------------------------------------------
#
# Functions with an ``xp`` argument run on either array namespace: ``jnp``
# (default: jittable) or ``numpy`` (the no-compilation host path of one
# question, :mod:`jaxdp._src.kernels.host_rdp`); the formulas are the same.


def log1p(x, xp=jnp):
  """log(1 + x) to about one ulp, several times faster than ``jnp.log1p`` on CPU.

  Uses the compensated identity log1p(x) = log(u) - ((u - 1) - x)/u with
  u = fl(1 + x) (Goldberg 1991, Thm 4). Exact at x = -1 (-inf) and x = inf.
  """
  x = xp.asarray(x)
  u = 1.0 + x
  ok = (u != 0.0) & xp.isfinite(u)
  if xp is np and ok.all():   # the host's common case, with fewer NumPy calls (same values)
    return xp.where(u == 1.0, x, xp.log(u) - ((u - 1.0) - x) / u)
  us = xp.where(ok, u, 2.0)
  xs = xp.where(ok, x, 1.0)
  corr = xp.where(us == 1.0, xs, xp.log(us) - ((us - 1.0) - xs) / us)
  return xp.where(ok, corr, xp.where(u == 0.0, -xp.inf, xp.log(u)))


def fori_loop(lower, upper, body, init, xp=jnp):
  """``jax.lax.fori_loop`` for ``xp = jnp``; a plain Python loop for NumPy."""
  if xp is jnp:
    return jax.lax.fori_loop(lower, upper, body, init)
  for i in range(lower, upper):
    init = body(i, init)
  return init


def log_add(a, b, xp=jnp):
  """log(exp(a) + exp(b)), exact at -inf."""
  a = xp.asarray(a)
  b = xp.asarray(b)
  hi = xp.maximum(a, b)
  lo = xp.minimum(a, b)
  hi_s = xp.where(xp.isfinite(hi), hi, 0.0)
  out = hi_s + log1p(xp.exp(lo - hi_s), xp)
  return xp.where(xp.isfinite(hi), out, hi)


def log1mexp(x, xp=jnp):
  """log(1 - exp(-x)) for x >= 0 (Mächler 2012), -inf at 0.

  Uses log(-expm1(-x)) for x <= log 2 and log1p(-exp(-x)) above; both branch
  arguments are clamped so that gradients stay finite (double-where trick).
  """
  x = xp.asarray(x)
  small = x <= xp.log(2.0)
  xs = xp.where(small, x, 1.0)
  xl = xp.where(small, 1.0, x)
  return xp.where(small, xp.log(-xp.expm1(-xs)), log1p(-xp.exp(-xl), xp))


def log_sub(a, b):
  """log(exp(a) - exp(b)) for a >= b; -inf where a == b (incl. both -inf)."""
  a = jnp.asarray(a)
  b = jnp.asarray(b)
  finite = jnp.isfinite(a) & (a > b)
  diff = jnp.where(finite, a - b, 1.0)
  return jnp.where(finite, a + log1mexp(diff), jnp.where(a == jnp.inf, a, -jnp.inf))


def log_expm1(x, xp=jnp):
  """log(exp(x) - 1) for x >= 0, stable at both ends (-inf at 0)."""
  x = xp.asarray(x)
  big = x > 1.0
  xs = xp.where(big, 1.0, x)
  xb = xp.where(big, x, 1.0)
  return xp.where(big, xb + log1p(-xp.exp(-xb), xp), xp.log(xp.expm1(xs)))


def softplus(x, xp=jnp):
  """log(1 + exp(x)), exact for large |x|."""
  x = xp.asarray(x)
  pos = x > 0
  # One log1p for both branches: log1p(e^{-|x|}) is the term of each, with
  # -|x| written as where(pos, -x, x) so the derivative at 0 is 1/2.
  tail = log1p(xp.exp(xp.where(pos, -x, x)), xp)
  return xp.where(pos, x + tail, tail)


# Float rounding allowance (units of the dtype's epsilon per unit of magnitude).
# A value summed from a few parts computed to ≲ 2 ulps each is off by
# ≲ 1.5·eps·(sum of the parts' magnitudes). Measured on the sampled
# Gaussian's log-terms (jaxdp.rdp) in float32 against float64 (~2·10⁵ random
# points biased to the cancelling regime, q down to 1e-12, α to 10⁵), op by
# op: error / (eps·magnitude) ≤ 0.59 where the parts cancel (|value| < 5% of
# them), ≤ 0.99 elsewhere (relative error ≤ 1.7 eps, also inside rdp's
# 256-ulp factor); compiled programs reached 1.7 apart from cases rdp's
# float32 quadrature now covers by its own proven bound (rdp_quadrature._f32_node_bound).
_ROUNDING_ULPS = 2.0


def rounding_allowance(scale, value, xp=jnp):
  """Upward allowance for a value computed as a sum of parts that may cancel.

  ``_ROUNDING_ULPS·eps·(scale + |value|)``, 0 where ``value`` is ±inf;
  ``scale`` is the sum of the parts' magnitudes. Where the parts nearly
  cancel (in rdp: one ulp of log q amplified α-fold), their rounding, not
  the value's own ulp, sets the error, and a final relative inflation cannot
  cover it; adding this to each value before it is summed or compared keeps
  a rounded upper bound an upper bound (float64: ~1e-11 at α ~ 10⁴; float32:
  ~1e-3 at α ~ 700, q ~ 1e-5, where the parts reach 10⁴).
  """
  eps = float(xp.finfo(value.dtype).eps)
  finite = xp.isfinite(value)
  return xp.where(finite, (_ROUNDING_ULPS * eps)
                  * (scale + xp.abs(xp.where(finite, value, 0.0))), 0.0)


def round_up(x, ulps, xp=jnp):
  """x·(1 + ulps·eps) for x >= 0: a closed form's few roundings, each at most
  half an ulp relative, rounded toward more privacy loss (``ulps`` counts
  them generously; +inf and 0 stay)."""
  x = xp.asarray(x)
  return x * (1.0 + ulps * float(xp.finfo(x.dtype).eps))


def concrete_numbers(args, broadcast=True):
  """``(arrays, shape)`` when every argument is a concrete number array that
  an eager call can read on the host (no tracer, any jax Array on the
  default device, a bool/int/float dtype) and, with ``broadcast``, they
  broadcast together: NumPy views and the broadcast shape (None without
  ``broadcast``); else None. The host paths of eager calls start here
  (``rdp_eager``, ``profiles_eager``, the RDP accountant's ``rdp_readout``)."""
  from jaxdp._src.core import persist  # pylint: disable=g-import-not-at-top
  if not persist.default_placed(jax.tree_util.tree_leaves(args)):
    return None
  try:
    arrays = [np.asarray(a) for a in args]
  except Exception:  # pylint: disable=broad-except  (the kernel raises its own error)
    return None
  if not all(a.dtype.kind in "biuf" for a in arrays):
    return None
  if not broadcast:
    return arrays, None
  try:
    return arrays, np.broadcast_shapes(*(a.shape for a in arrays))
  except ValueError:
    return None


def round_to_dtype_up(x: np.ndarray, dtype) -> np.ndarray:
  """Casts float64 NumPy ``x`` to ``dtype``, rounding toward +inf (an upper
  bound stays one after the cast)."""
  dtype = np.dtype(dtype)
  y = x.astype(dtype)
  low = y.astype(np.float64) < x
  return np.where(low, np.nextafter(y, np.asarray(np.inf, dtype)), y).astype(dtype)


def safe_log(x, xp=jnp):
  """log(x) with log(0) = -inf and a finite gradient at 0."""
  x = xp.asarray(x)
  pos = x > 0
  return xp.where(pos, xp.log(xp.where(pos, x, 1.0)), -xp.inf)


def log_binom(n, k):
  """log C(n, k) for real n >= k >= 0 via log-gamma."""
  return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def log_erfc(x):
  """log(erfc(x)) accurate in the far right tail: log 2 + log Φ(-√2 x)."""
  x = jnp.asarray(x)
  return jnp.log(2.0) + log_ndtr(-jnp.sqrt(2.0) * x)


# --------------------------------------------------------------------------
# host-side validation (concrete values only)
# --------------------------------------------------------------------------


def _first_bad(mask: np.ndarray) -> str:
  if mask.ndim == 0:
    return ""
  idx = tuple(int(i) for i in np.argwhere(mask)[0])
  return f" (first bad element at index {idx})"


def _describe(values: np.ndarray, mask: np.ndarray):
  if values.ndim == 0:
    return values[()]
  return values[mask][0]


#: Whole-number arguments (steps, counts, sizes) must lie within ±2**53: every
#: whole number up to it is exact in float64, the type the accountants compute in.
MAX_EXACT_INTEGER = 2**53


def _check_exact_integer(name: str, value: Any) -> None:
  """Refuses whole numbers beyond ±2**53 before any conversion to float64
  (which would round 2**53 + 1 to 2**53 silently)."""
  try:
    raw = np.asarray(value)
  except (TypeError, ValueError, OverflowError):
    return  # reported by check_array's own conversion
  if raw.dtype.kind in "iu":
    bad = (raw > MAX_EXACT_INTEGER) | (raw < -MAX_EXACT_INTEGER)
  elif raw.dtype.kind == "f":
    bad = np.isfinite(raw) & (np.abs(raw) > MAX_EXACT_INTEGER)
  elif raw.dtype == object:
    flat = [abs(v) > MAX_EXACT_INTEGER if isinstance(v, (int, np.integer, float, np.floating))
            and not isinstance(v, bool) and v == v and abs(v) != float("inf") else False
            for v in raw.reshape(-1)]
    bad = np.asarray(flat, bool).reshape(raw.shape)
  else:
    return
  if np.any(bad):
    found = raw[()] if raw.ndim == 0 else raw[bad][0]
    found = found.item() if isinstance(found, np.generic) else found
    raise ValueError(f"{name} must be a whole number of magnitude at most 2**53 = "
                     f"{MAX_EXACT_INTEGER} (larger ones are not exact in float64); found "
                     f"{found!r}{_first_bad(np.asarray(bad))}.")


def check_array(
    name: str,
    value: Any,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    allow_inf: bool = False,
) -> Any:
  """Validates a concrete numeric argument and returns it unchanged.

  Tracers (values inside ``jit``) are passed through untouched: kernels stay
  pure and document their NaN propagation instead.

  Raises:
    ValueError: naming ``name``, the offending value and, for arrays, the
      index of the first bad element, when the value is NaN, infinite (unless
      ``allow_inf``), outside the interval, or not an integer when required
      (whole numbers must also lie within ±2**53, :data:`MAX_EXACT_INTEGER`;
      Python and NumPy integers are compared exactly).
  """
  if not is_concrete(value):
    return value
  if integer:
    _check_exact_integer(name, value)
  try:
    arr = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be numeric; found {value!r}.") from e
  bad = np.isnan(arr)
  if bad.any():
    raise ValueError(f"{name} must not be NaN; found {_describe(arr, bad)}{_first_bad(bad)}.")
  if not allow_inf:
    bad = np.isinf(arr)
    if bad.any():
      raise ValueError(f"{name} must be finite; found {_describe(arr, bad)}{_first_bad(bad)}.")
  lo_b = "(" if low_open else "["
  hi_b = ")" if high_open else "]"
  interval = f"{lo_b}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi_b}"
  if low is not None:
    bad = arr <= low if low_open else arr < low
    if bad.any():
      raise ValueError(
          f"{name} must be in {interval}; found {_describe(arr, bad)}{_first_bad(bad)}.")
  if high is not None:
    bad = arr >= high if high_open else arr > high
    if bad.any():
      raise ValueError(
          f"{name} must be in {interval}; found {_describe(arr, bad)}{_first_bad(bad)}.")
  if integer:
    finite = np.isfinite(arr)
    bad = finite & (arr != np.round(arr))
    if bad.any():
      raise ValueError(
          f"{name} must be a whole number; found {_describe(arr, bad)}{_first_bad(bad)}.")
  return value


def check_same_shape(**arrays) -> tuple:
  """Checks that the named concrete arguments broadcast together.

  Returns:
    The broadcast shape.

  Raises:
    ValueError: naming the arguments and their shapes when they do not.
  """
  shapes = {k: np.shape(v) for k, v in arrays.items()}
  try:
    return np.broadcast_shapes(*shapes.values())
  except ValueError:
    desc = ", ".join(f"{k} {s}" for k, s in shapes.items())
    raise ValueError(f"Arguments do not broadcast together: {desc}.") from None
