"""``jaxdp sweep``: a CSV/JSON grid of DP-SGD configurations, one unknown per row.

Reads the rows (whole numbers exactly), groups them by unknown, answers each
group with :mod:`jaxdp._src.solvers.sweep` and writes every input column back
with the solved ones. Split out of :mod:`jaxdp._src.interfaces.cli` (moves
only).
"""

from __future__ import annotations

import csv
import decimal
import json
import math
import os
import sys
import warnings

import numpy as np

from jaxdp._src.interfaces.cli_parser import (HELPERS, INTEGER_COLUMNS, PROG, QUANTITIES,
                                              accountant_kwargs, exact_number, format_number)


# --------------------------------------------------------------------------
# Sweep
# --------------------------------------------------------------------------


def _read_rows(path):
  """Rows as (label, dict of str → raw value), plus the column order."""
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".csv", ".json"):
    raise ValueError(f"grid file must end in .csv or .json; found {path!r}.")
  try:
    with open(path, newline="") as f:
      if ext == ".csv":
        reader = csv.DictReader(f)
        rows = []
        for raw in reader:
          rows.append((f"line {reader.line_num}", raw))
        columns = list(reader.fieldnames or [])
      else:
        data = json.load(f, parse_float=decimal.Decimal)   # numbers exactly
        if isinstance(data, dict) and "rows" in data:
          data = data["rows"]
        if not isinstance(data, list):
          raise ValueError(f"JSON grid must be a list of objects; found {type(data).__name__}.")
        rows, columns = [], []
        for i, raw in enumerate(data, 1):
          rows.append((f"entry {i}", raw))
          if isinstance(raw, dict):
            columns += [k for k in raw if k not in columns]
  except OSError as e:
    raise ValueError(f"cannot read {path!r}: {e.strerror or e}.") from None
  except (json.JSONDecodeError, csv.Error, UnicodeDecodeError) as e:
    raise ValueError(f"cannot parse {path!r}: {e}.") from None
  return rows, columns


def _number(name, raw):
  if raw is None:
    return None
  if isinstance(raw, bool):
    raise ValueError(f"{name} must be a number; found {raw!r}.")
  if isinstance(raw, str) and raw.strip() == "":
    return None
  if isinstance(raw, (int, float, str, decimal.Decimal)):
    return exact_number(name, raw)
  raise ValueError(f"{name} must be a number; found {raw!r}.")


def _parse_row(raw):
  """One row → (unknown, values dict). Raises ValueError with a clear message."""
  from jaxdp._src.core import numerics as nx
  if not isinstance(raw, dict):
    raise ValueError(f"row must be an object of column: value; found {raw!r}.")
  if None in raw:
    raise ValueError("row has more cells than the header.")
  v = {k: _number(k, raw.get(k)) for k in QUANTITIES + HELPERS}
  ranges = dict(
      epsilon=dict(low=0.0), delta=dict(low=0.0, high=1.0, low_open=True, high_open=True),
      sigma=dict(low=0.0, low_open=True), steps=dict(low=0.0, integer=True),
      q=dict(low=0.0, high=1.0), batch_size=dict(low=1.0), dataset_size=dict(low=1.0),
      epochs=dict(low=0.0, low_open=True))
  for k, kw in ranges.items():
    if v[k] is not None:
      nx.check_array(k, v[k], **kw)
  b, n, e = v["batch_size"], v["dataset_size"], v["epochs"]
  if v["q"] is None and b is not None:
    if n is None:
      raise ValueError("batch_size needs dataset_size (q = batch_size / dataset_size).")
    if b > n:
      raise ValueError(f"batch_size must not exceed dataset_size; found {b:g} > {n:g}.")
    v["q"] = b / n
  if v["steps"] is None and e is not None and v["q"] is not None:
    # The one rule for epochs (jaxdp.sampling): E × round(1/q), Poisson sampling.
    from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
    k = sampling.poisson_steps_per_epoch(v["q"])
    v["steps"] = float(sampling.epochs_to_steps(e, k)) if k is not None else 0.0
    nx.check_array("steps (from epochs)", v["steps"], integer=True)
  missing = [k for k in QUANTITIES if v[k] is None]
  if len(missing) != 1:
    if not missing:
      raise ValueError("nothing to compute: leave one of epsilon, delta, sigma, steps, q empty.")
    raise ValueError(f"exactly one of epsilon, delta, sigma, steps, q must be unknown; "
                     f"found {len(missing)} unknown ({', '.join(missing)}).")
  unknown = missing[0]
  if unknown == "epsilon" and v["delta"] is None:
    raise ValueError("delta is required.")
  if unknown != "delta" and unknown != "epsilon" and v["epsilon"] is None:
    raise ValueError("epsilon (the target budget) is required.")
  return unknown, v


# The unknown → (jaxdp.sweep function, its positional arguments in order).
_SOLVERS = {
    "epsilon": ("epsilon", ("q", "sigma", "steps", "delta")),
    "delta": ("delta", ("q", "sigma", "steps", "epsilon")),
    "sigma": ("sigma", ("epsilon", "delta", "q", "steps")),
    "steps": ("steps", ("epsilon", "delta", "q", "sigma")),
    "q": ("sampling_rate", ("epsilon", "delta", "sigma", "steps")),
}


def _solve_group(unknown, vals, acc, progress):
  from jaxdp._src.solvers import sweep
  col = lambda k: np.array([r[k] for r in vals], np.float64)
  accountant = acc["accountant"]
  orders = acc.get("orders")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    fn, args = _SOLVERS[unknown]
    return getattr(sweep, fn)(*(col(k) for k in args), accountant=accountant, orders=orders,
                              progress=progress)


def _tuned_epsilon(vals, per_run, tuning, orders):
  """ε of the tuned release (repeat-and-select, :func:`jaxdp.tuning.epsilon`)
  for rows whose unknown was epsilon, never below the per-run ε."""
  from jaxdp._src import events
  from jaxdp._src.solvers import tuning as tuning_mod
  col = lambda k: np.array([r[k] for r in vals], np.float64)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    tuned = tuning_mod.epsilon(events.SampledGaussian(col("q"), col("sigma")), col("steps"),
                               col("delta"), *tuning, orders=orders).tuned
  # Both are upper bounds; the tuned release is never less private than one run.
  return np.maximum(np.asarray(tuned, np.float64).reshape(-1), per_run)


_EXTRA = "__extra__"   # a parsed row's other columns, copied to the output as read


def _json_value(k, x):
  if x is None:
    return None
  if k in INTEGER_COLUMNS and math.isfinite(x):
    return int(x)
  return x if math.isfinite(x) else str(x)


def _json_extra(x):
  """A JSON value as read (numbers were parsed as Decimal: back to int/float)."""
  if isinstance(x, decimal.Decimal):
    return float(x)
  if isinstance(x, list):
    return [_json_extra(y) for y in x]
  if isinstance(x, dict):
    return {k: _json_extra(y) for k, y in x.items()}
  return x


def _write_rows(path, columns, rows):
  ext = os.path.splitext(path)[1].lower()
  if ext not in (".csv", ".json"):
    raise ValueError(f"--out must end in .csv or .json; found {path!r}.")
  try:
    with open(path, "w", newline="") as f:
      if ext == ".csv":
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
          extra = r.get(_EXTRA, {})
          w.writerow({k: (("" if extra[k] is None else extra[k]) if k in extra else
                          "" if r.get(k) is None else format_number(r[k])) for k in columns})
      else:
        out = []
        for r in rows:
          extra = r.get(_EXTRA, {})
          out.append({k: (_json_extra(extra[k]) if k in extra else _json_value(k, r.get(k)))
                      for k in columns})
        json.dump(out, f, indent=1)
        f.write("\n")
  except OSError as e:
    raise ValueError(f"cannot write {path!r}: {e.strerror or e}.") from None


def _cmd_sweep(args) -> int:
  acc = accountant_kwargs(args)
  if args.tuning is not None:
    if args.accountant != "rdp":
      raise ValueError("--tuning needs --accountant rdp (the tuning theorems are RDP bounds).")
    from jaxdp._src.solvers import tuning_kernel  # pylint: disable=g-import-not-at-top
    tuning_kernel._distribution(*args.tuning)  # a bad MEAN or SHAPE: exit 2 before any work
  rows, columns = _read_rows(args.grid)
  progress = sys.stderr.isatty() if args.progress is None else args.progress
  parsed = []
  failed = 0
  for label, raw in rows:
    try:
      unknown, vals = _parse_row(raw)
    except ValueError as e:
      print(f"{PROG}: {args.grid}, {label}: {e} (row skipped)", file=sys.stderr)
      failed += 1
      continue
    # Columns jaxdp does not read (ids, notes, ...) go to the output unchanged.
    vals[_EXTRA] = {k: x for k, x in raw.items() if k not in QUANTITIES + HELPERS}
    parsed.append((label, unknown, vals))
  for unknown in QUANTITIES:
    group = [p for p in parsed if p[1] == unknown]
    if not group:
      continue
    result = _solve_group(unknown, [g[2] for g in group], acc, progress)
    if unknown == "epsilon" and args.tuning is not None:
      tuned = _tuned_epsilon([g[2] for g in group], np.asarray(result, np.float64).reshape(-1),
                             args.tuning, acc.get("orders"))
      for (_, _, vals), value in zip(group, tuned):
        vals["epsilon_tuned"] = float(value)
    for (label, _, vals), value in zip(group, np.asarray(result).reshape(-1)):
      vals[unknown] = float(value)
      if unknown == "q" and vals["dataset_size"] is not None:
        vals["batch_size"] = float(math.floor(value * vals["dataset_size"] + 1e-9))
      if (unknown == "sigma" and math.isinf(value)) or (unknown == "q" and value == 0.0):
        print(f"{PROG}: {args.grid}, {label}: the target epsilon cannot be met "
              f"({unknown} = {format_number(value)})", file=sys.stderr)
        failed += 1
  out_cols = list(columns) + [k for k in QUANTITIES if k not in columns]
  if any(p[1] == "q" and p[2]["dataset_size"] is not None for p in parsed) and \
      "batch_size" not in out_cols:
    out_cols.append("batch_size")
  if args.tuning is not None and "epsilon_tuned" not in out_cols:
    out_cols.insert(out_cols.index("epsilon") + 1, "epsilon_tuned")
  _write_rows(args.out, out_cols, [p[2] for p in parsed])
  print(f"{PROG}: wrote {len(parsed)} row(s) to {args.out}"
        + (f"; {failed} row(s) failed" if failed else ""), file=sys.stderr)
  return 1 if failed else 0
