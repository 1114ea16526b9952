"""The ``jaxdp`` command line: privacy accounting for DP-SGD from the shell.

Examples::

  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5
  jaxdp epsilon --batch-size 256 --dataset-size 60000 --epochs 60 --sigma 1.1 --delta 1e-5
  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5 --tuning geometric:10
  jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5 --tradeoff 0.001,0.01,0.1
  jaxdp delta --q 0.0042667 --sigma 1.1 --steps 14040 --epsilon 3
  jaxdp calibrate --target-epsilon 3 --delta 1e-5 --q 0.0042667 --steps 14040
  jaxdp calibrate --solve steps --target-epsilon 3 --delta 1e-5 --q 0.0042667 --sigma 1.1
  jaxdp calibrate --solve sampling-rate --target-epsilon 3 --delta 1e-5 --sigma 1.1 \\
      --steps 14040 --dataset-size 60000
  jaxdp sweep grid.csv --out results.csv
  jaxdp sweep grid.csv --out results.csv --tuning poisson:10

Exit status: 0 on success, 1 when some sweep rows (or a calibration) failed,
2 on invalid arguments (one ``jaxdp: error: ...`` line on stderr).

The argument parsing lives in :mod:`jaxdp._src.interfaces.cli_parser`, the
``sweep`` command in :mod:`jaxdp._src.interfaces.cli_sweep`; this module holds
the single-configuration commands and :func:`main`.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from typing import List, Optional

import numpy as np

from jaxdp._src.interfaces.cli_parser import (PROG, Parser, UsageError, accountant_kwargs,
                                              add_calibrate_command, add_delta_command,
                                              add_epsilon_command, add_sweep_command,
                                              format_number)
from jaxdp._src.interfaces.cli_sweep import _cmd_sweep

__all__ = ["main"]


def _build_parser() -> argparse.ArgumentParser:
  """The ``jaxdp`` parser: its four commands (the subparsers of
  :mod:`jaxdp._src.interfaces.cli_parser`), with this module's examples as its epilog."""
  parser = Parser(
      prog=PROG,
      description="Differential-privacy accounting for DP-SGD (Poisson-sampled Gaussian "
      "mechanism): compute the privacy budget (epsilon, delta) of a training run, or "
      "calibrate the noise, number of steps or sampling rate to meet a budget.",
      epilog="examples:" + __doc__.split("Examples::", 1)[1].split("Exit status", 1)[0].rstrip()
      + "\n\nRun 'jaxdp COMMAND --help' for the options of a command. Exit status: 0 ok, "
      "1 some rows/targets failed, 2 invalid arguments.",
      formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

  add_epsilon_command(sub)
  add_delta_command(sub)
  add_calibrate_command(sub)
  add_sweep_command(sub)
  return parser


# --------------------------------------------------------------------------
# Single-configuration commands
# --------------------------------------------------------------------------


def _steps_per_epoch(q, smp=None):
  """Steps per epoch (:mod:`jaxdp.sampling`'s one rule): the sampler's own, or
  Poisson sampling's round(1/q) at a bare rate."""
  from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
  if smp is not None:
    k = smp.steps_per_epoch
  else:
    k = sampling.poisson_steps_per_epoch(q)
  if k is None:
    raise ValueError(f"--epochs needs a sampling rate above 0 (no epoch ends at q = {q:g}).")
  return k


def _resolve_q_steps(args, need_q=True, need_steps=True, smp=None):
  """q and steps from --q/--steps or the batch form; None when not needed.

  --epochs E gives E × steps per epoch (:func:`jaxdp.sampling.epochs_to_steps`:
  the sampler's steps per epoch, or round(1/q) for Poisson sampling at rate q).
  """
  from jaxdp._src.samplers import sampling  # pylint: disable=g-import-not-at-top
  q, steps = args.q, args.steps
  b, n, e = args.batch_size, args.dataset_size, args.epochs
  if q is not None and b is not None:
    raise ValueError("give either --q or --batch-size/--dataset-size, not both.")
  if q is None and (b is not None or n is not None) and need_q:
    if b is None or n is None:
      raise ValueError("--batch-size needs --dataset-size (q = batch size / dataset size).")
    if not n >= 1 or not b >= 1 or b > n:
      raise ValueError(f"need 1 <= --batch-size <= --dataset-size; found {b:g} and {n:g}.")
    q = b / n
  if steps is not None and e is not None:
    raise ValueError("give either --steps or --epochs, not both.")
  if steps is None and e is not None and need_steps:
    if not e > 0 or not math.isfinite(e):
      raise ValueError(f"--epochs must be positive; found {e:g}.")
    if smp is None and q is None:
      raise ValueError("--epochs needs --q or --batch-size/--dataset-size.")
    steps = sampling.epochs_to_steps(e, _steps_per_epoch(q, smp))
  if need_q and q is None:
    raise ValueError("missing --q (or --batch-size with --dataset-size).")
  if need_steps and steps is None:
    raise ValueError("missing --steps (or --epochs).")
  return q, steps


def _default_accountant(args):
  """Resolves --accountant when it was not given.

  epsilon and delta of Poisson sampling at a rate answer with the tight PLD
  value (certified interval and RDP value beside it): one question is
  answered by the general PLD engine and the host RDP path, with nothing to
  compile (jaxdp._src.accounting.rate.tight_one), ~1.5 s in a fresh process. calibrate does
  the same (jaxdp._src.solvers.tight: about four PLD evaluations, ~2.5 s for
  σ). epsilon and delta of balls-in-bins answer with its certified PLD upper
  end too (random allocation, ~2 s); its calibration, dozens of such
  evaluations, stays RDP. The RDP accountant stays the default of the other
  samplers, and with --orders or --tuning (RDP notions).
  """
  if args.accountant is not None:
    return
  args.accountant = "pld" if _tight_question(args) else "rdp"


def _tight_question(args) -> bool:
  """True for the questions the tight path answers: Poisson sampling at a
  rate, epsilon, delta or calibrate, no RDP-only option."""
  plain = args.orders is None and getattr(args, "tuning", None) is None
  if args.command in ("epsilon", "delta") and args.sampler == "balls-in-bins":
    return plain   # random allocation's certified PLD (~2 s); its calibration stays RDP (minutes)
  return args.command in ("epsilon", "delta", "calibrate") and _poisson_at_rate(args) and plain


def _poisson_at_rate(args) -> bool:
  """Plain Poisson sampling at a rate with add/remove neighbours (what the
  tight one-question paths account)."""
  return args.sampler in (None, "poisson") and not _replace_one(args)


def _print_tight(args, q, sigma, steps) -> None:
  """The tight answer of one Poisson question: the value (min of the PLD and
  RDP upper bounds, both certified), the PLD interval's lower end, and the
  RDP value.

  Two engines, one documented tolerance (issue 34, row 8). The command asks
  the general PLD engine (:func:`jaxdp._src.accounting.rate.tight_one`: NumPy FFTs, nothing
  to compile, ~3 s in a fresh process); ``jaxdp.epsilon(...,
  accountant="pld")`` asks the batched kernel (:mod:`jaxdp.pld`), whose
  first call in a fresh process compiles for 12-18 s on two CPU cores, so the
  command does not print that value. Both engines discretise differently and
  both certify an interval [lower, upper] holding the exact ε, so the two
  intervals overlap: each printed value is at least the other engine's
  certified lower end, and the two values differ by at most the wider
  interval's width (tests/package/test_surfaces_cli_sweep.py,
  tests/package/test_surface_consistency.py). MNIST, q = 256/60000, σ = 1.1, 60
  epochs = 14040 steps, δ = 1e-5: command 2.379657 (lower 2.379366), Python
  2.379977 (lower 2.378692); difference 3.2e-4 <= widths 2.9e-4 / 1.3e-3.
  """
  from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
  name = args.command
  value = args.delta if name == "epsilon" else args.epsilon
  lo, up, rdp_up = rate.tight_one(name, q, sigma, steps, value)
  print(f"{name} = {format_number(min(up, rdp_up))}")
  print(f"{name}_lower = {format_number(min(lo, up, rdp_up))}")
  print(f"{name}_rdp = {format_number(rdp_up)}")


def _need(args, name, flag):
  v = getattr(args, name)
  if v is None:
    raise ValueError(f"missing {flag}.")
  return v


_MAX_N = 2**31 - 1  # a placeholder dataset size where the event does not depend on N


def _sampler(args):
  """The jaxdp.sampling sampler named by --sampler, or None for plain --q."""
  from jaxdp._src.samplers import sampling
  name = getattr(args, "sampler", None)
  relation = None if args.relation is None else args.relation.replace("-", "_")
  if name in (None, "poisson"):
    if args.capacity is not None:
      raise ValueError("--capacity needs --sampler truncated-poisson or balls-in-bins.")
    if relation in (None, "add_remove"):
      return None
    # Replace-one Poisson without truncation: the event SampledGaussian(q, σ,
    # "replace_one") does not depend on N, so any N >= 1 with capacity N
    # gives it; q = 1 is a template for --solve sampling-rate (replaced).
    q = 1.0
    if args.q is not None or args.batch_size is not None:
      q, _ = _resolve_q_steps(args, need_steps=False)
    n = _MAX_N if args.dataset_size is None else int(args.dataset_size)
    return sampling.poisson(n, q, n, relation)
  n, b = args.dataset_size, args.batch_size
  if n is None or b is None:
    raise ValueError(f"--sampler {name} needs --dataset-size and --batch-size.")
  n, b = int(n), int(b)
  if name in ("truncated-poisson", "balls-in-bins"):
    if args.capacity is None:
      raise ValueError(f"--sampler {name} needs --capacity.")
    cap = int(args.capacity)
    if name == "truncated-poisson":
      return sampling.poisson(n, b / n, cap, relation or "add_remove")
    if relation not in (None, "add_remove"):
      raise ValueError(f"--relation {args.relation} is not available for --sampler {name}.")
    return sampling.balls_in_bins(n, b, cap)
  if args.capacity is not None:
    raise ValueError(f"--capacity does not apply to --sampler {name}.")
  kw = {} if relation is None else dict(relation=relation)
  if name == "fixed":
    return sampling.fixed(n, b, **kw)
  return sampling.shuffle(n, b, **kw)


def _replace_one(args) -> bool:
  return getattr(args, "relation", None) == "replace-one"


def _cmd_forward(args) -> int:
  from jaxdp._src.interfaces import api  # pylint: disable=g-import-not-at-top
  _default_accountant(args)
  tuning = getattr(args, "tuning", None)
  if tuning is not None:
    if args.accountant != "rdp":
      raise ValueError("--tuning needs --accountant rdp (the tuning theorems are RDP bounds).")
    if args.sampler not in (None, "poisson") or _replace_one(args):
      raise ValueError("--tuning is available for add/remove Poisson sampling at rate --q "
                       "only, not with --sampler or --relation replace-one.")
  fprs = getattr(args, "tradeoff", None)
  if fprs is not None and tuning is not None:
    raise ValueError("--tradeoff cannot be combined with --tuning (the curve is of one run).")
  if fprs is not None and (args.sampler not in (None, "poisson") or _replace_one(args)):
    raise ValueError("--tradeoff is available for add/remove Poisson sampling at rate --q "
                     "only, not with --sampler or --relation replace-one.")
  smp = _sampler(args)
  q, steps = _resolve_q_steps(args, smp=smp)
  if smp is not None:
    q = smp
  sigma = _need(args, "sigma", "--sigma")
  if args.accountant == "pld" and smp is None and tuning is None:
    accountant_kwargs(args)   # rejects --orders with pld
    _print_tight(args, q, sigma, steps)
    if args.command == "epsilon":
      _print_tradeoff(q, sigma, steps, fprs)
    return 0
  if args.command == "epsilon":
    value = api.epsilon(q, sigma, steps, args.delta, **accountant_kwargs(args))
    if tuning is not None:
      from jaxdp._src import events
      from jaxdp._src.solvers import tuning as tuning_mod
      tuned = tuning_mod.epsilon(events.SampledGaussian(q, sigma), steps, args.delta, *tuning,
                                 orders=accountant_kwargs(args).get("orders")).tuned
      # Both are upper bounds; the tuned release is never less private than one run.
      print(f"epsilon = {format_number(value)}")
      print(f"epsilon_tuned = {format_number(max(float(tuned), float(value)))}")
      return 0
  else:
    value = api.delta(q, sigma, steps, args.epsilon, **accountant_kwargs(args))
  print(f"{args.command} = {format_number(value)}")
  if args.command == "epsilon":
    _print_tradeoff(q, sigma, steps, fprs)
  return 0


def _print_tradeoff(q, sigma, steps, fprs):
  """One line per FPR: certified TPR bounds (jaxdp.tradeoff.tradeoff)."""
  if fprs is None:
    return
  from jaxdp._src.accounting import tradeoff as tradeoff_mod
  b = tradeoff_mod.tradeoff(q, sigma, steps, np.asarray(fprs, np.float64))
  for f, up, lo in zip(fprs, np.ravel(b.tpr_upper), np.ravel(b.tpr_lower)):
    print(f"fpr={format_number(f)} tpr_upper={format_number(up)} tpr_lower={format_number(lo)}")


def _solve_one(args, tight, name, plain, tight_fn, bound_name, *values, **kw):
  """One calibration: the RDP/PLD answer (one line), or the tight one (the
  value, its certified end ``bound_name`` and the RDP answer). Returns the value."""
  if not tight:
    value = plain(args.target_epsilon, args.delta, *values, **kw, **accountant_kwargs(args))
    print(f"{name} = {format_number(value)}")
    return float(value)
  kw.pop("sampler", None)
  ans = tight_fn(args.target_epsilon, args.delta, *values, **kw)
  value, bound, rdp_value = ans.value, ans.bound, ans.rdp
  if name == "steps":   # every count fits: jaxdp's largest, as calibrate.steps says
    from jaxdp._src.solvers import calibrate  # pylint: disable=g-import-not-at-top
    value, bound, rdp_value = (min(float(v), calibrate.MAX_STEPS)
                               for v in (value, bound, rdp_value))
  print(f"{name} = {format_number(value)}")
  print(f"{name}_{bound_name} = {format_number(bound)}")
  print(f"{name}_rdp = {format_number(rdp_value)}")
  return value


def _cmd_calibrate(args) -> int:
  """calibrate: tight by default for Poisson sampling at a rate
  (:mod:`jaxdp._src.solvers.tight`, default rtol 1e-3), else the accountant's
  batched solver (rtol 1e-6)."""
  from jaxdp._src.solvers import tight as tc  # pylint: disable=g-import-not-at-top
  from jaxdp._src.solvers import calibrate
  _default_accountant(args)
  tight = args.accountant == "pld" and _poisson_at_rate(args)
  if tight and args.orders is not None:
    raise ValueError("--orders applies to --accountant rdp only.")
  if args.rtol is None:
    args.rtol = 1e-3 if tight else 1e-6
  if args.solve == "sampling-rate" and args.sampler not in (None, "poisson"):
    if args.q is not None or args.batch_size is not None:
      raise ValueError("--solve sampling-rate: do not give --q or --batch-size.")
    # A template at batch size 1; the solver replaces the rate (capacity kept).
    smp = _sampler(argparse.Namespace(**{**vars(args), "batch_size": 1}))
  else:
    smp = _sampler(args)
  with warnings.catch_warnings():
    if not tight:   # the batched solvers warn for unreachable targets; the exit status says it
      warnings.simplefilter("ignore", RuntimeWarning)
    if args.solve == "sigma":
      q, steps = _resolve_q_steps(args, smp=smp)
      value = _solve_one(args, tight, "sigma", calibrate.sigma, tc.tight_sigma, "lower",
                         q if smp is None else smp, steps, rtol=args.rtol)
      if math.isinf(value):
        print(f"{PROG}: the target cannot be met by any sigma <= "
              f"{calibrate.SIGMA_RANGE[1]:g} at this delta.", file=sys.stderr)
        return 1
      return 0
    sigma = _need(args, "sigma", "--sigma")
    if args.solve == "steps":
      if args.steps is not None or args.epochs is not None:
        raise ValueError("--solve steps: do not give --steps or --epochs.")
      q, _ = _resolve_q_steps(args, need_steps=False)
      kw = dict(rtol=args.rtol) if tight else {}
      value = _solve_one(args, tight, "steps", calibrate.steps, tc.tight_steps, "upper",
                         q if smp is None else smp, sigma, **kw)
      if value >= calibrate.MAX_STEPS:
        print(f"{PROG}: every number of steps up to {calibrate.MAX_STEPS} (jaxdp's largest) "
              "meets the target.", file=sys.stderr)
      elif args.dataset_size is not None and args.batch_size is not None:
        # epochs by the one rule: steps / steps per epoch (jaxdp.sampling)
        print(f"epochs = {format_number(value / _steps_per_epoch(q, smp))}")
      return 0
    if args.q is not None or args.batch_size is not None:
      raise ValueError("--solve sampling-rate: do not give --q or --batch-size.")
    steps = args.steps
    if steps is None:
      raise ValueError("missing --steps (epochs depend on the unknown batch size).")
    value = _solve_one(args, tight, "q", calibrate.sampling_rate, tc.tight_sampling_rate,
                       "upper", sigma, steps, rtol=args.rtol, sampler=smp)
    if smp is not None and args.sampler not in (None, "poisson", "truncated-poisson"):
      print(f"batch_size = {round(value * smp.dataset_size)}")
    elif args.dataset_size is not None:
      print(f"batch_size = {format_number(math.floor(value * args.dataset_size + 1e-9))}")
    if value == 0.0:
      print(f"{PROG}: no sampling rate >= {calibrate.MIN_SAMPLING_RATE:g} meets the target.",
            file=sys.stderr)
      return 1
    return 0


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


def _enable_cache():
  """Persistent compilation cache for the command (``JAXDP_CACHE_DIR``, or
  ``off``); a process that already configured a JAX cache keeps its own."""
  import os  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from jaxdp._src.core import cache as _cache  # pylint: disable=g-import-not-at-top
  if os.environ.get(_cache.ENV) is None and jax.config.jax_compilation_cache_dir:
    return
  try:
    _cache.enable_compilation_cache()
  except OSError:  # an unwritable cache directory only costs speed
    pass


def main(argv: Optional[List[str]] = None) -> int:
  """Runs the ``jaxdp`` command line; returns the exit status."""
  _enable_cache()
  parser = _build_parser()
  try:
    args = parser.parse_args(argv)
    if args.command is None:
      parser.print_help()
      return 2
    if args.command in ("epsilon", "delta"):
      return _cmd_forward(args)
    if args.command == "calibrate":
      return _cmd_calibrate(args)
    return _cmd_sweep(args)
  except (UsageError, ValueError) as e:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"{PROG}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
