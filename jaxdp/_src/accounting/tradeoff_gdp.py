"""μ-GDP summaries of the certified trade-off curve (estimates, not guarantees).

The TPR of the best test against μ-GDP (:func:`gdp_tpr`), and the μ-GDP
estimates of DP-SGD (:func:`gdp_mu`): a fit to the certified curve of
:func:`jaxdp._src.accounting.tradeoff.tradeoff` on an FPR grid, and the
central-limit μ. Public as :mod:`jaxdp.tradeoff`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special as _sps

from jaxdp._src.accounting.tradeoff import DEFAULT_NUM_EPS, _check_fpr, tradeoff
from jaxdp._src.core import numerics as num

__all__ = ["GdpEstimate", "gdp_tpr", "gdp_mu", "DEFAULT_GDP_FPR"]

#: FPRs at which :func:`gdp_mu` fits μ (both tails of the symmetric curve).
DEFAULT_GDP_FPR = np.geomspace(1e-6, 0.5, 60)
DEFAULT_GDP_FPR.setflags(write=False)


class GdpEstimate(NamedTuple):
  """μ-GDP ESTIMATES (neither is a certified privacy guarantee).

  Attributes:
    mu: the smallest μ whose GDP curve Φ(Φ⁻¹(α) + μ) lies on or above the
      certified upper TPR curve at every FPR of the fitting grid (certified on
      that grid only; between and outside its points the mechanism may be
      less private than μ-GDP).
    mu_clt: the central-limit value q √(T (e^{1/σ²} - 1)) of Bu, Dong, Long &
      Su (2020), an asymptotic approximation (T -> ∞, q √T fixed).
  """
  mu: np.ndarray
  mu_clt: np.ndarray


@num.host_function
def gdp_tpr(mu, fpr):
  """TPR of the best test against μ-GDP: 1 - G_μ(α) = Φ(Φ⁻¹(α) + μ).

  (Dong, Roth & Su 2022, §2: G_μ(α) = Φ(Φ⁻¹(1 - α) - μ).)

  Args:
    mu: μ >= 0 (inf allowed).
    fpr: α in [0, 1].

  Returns:
    Broadcast array of TPRs.
  """
  num.check_array("mu", mu, low=0.0, allow_inf=True)
  fpr = _check_fpr("fpr", fpr)
  mu = np.asarray(mu, np.float64)
  with np.errstate(invalid="ignore"):
    z = _sps.ndtri(fpr) + mu
  z = np.where(np.isnan(z), np.where(fpr > 0, np.inf, -np.inf), z)  # -inf + inf
  return _sps.ndtr(z)


def _mu_clt(q, sigma, steps):
  with np.errstate(over="ignore"):
    return q * np.sqrt(steps * np.expm1(1.0 / sigma ** 2))


@num.host_function
def gdp_mu(q, sigma, steps, *, fpr=None, num_eps=DEFAULT_NUM_EPS, rtol=1e-3) -> GdpEstimate:
  """μ-GDP ESTIMATES of DP-SGD: a fit to the certified curve, and the CLT μ.

  ``mu`` (the one to report): the smallest μ with Φ(Φ⁻¹(α) + μ) >= the
  certified ``tpr_upper`` at every α of ``fpr``; since the GDP curve increases in μ,
  μ = max_α [Φ⁻¹(tpr_upper(α)) - Φ⁻¹(α)].  It is certified *on that grid*
  (no attack at those FPRs beats μ-GDP) but not a certified μ-GDP guarantee:
  the subsampled Gaussian is not exactly GDP, and its curve crosses every
  GDP curve that fits it in the bulk (at small FPRs it is less private), so
  μ grows as the grid reaches smaller FPRs.  The default grid is
  ``DEFAULT_GDP_FPR`` (1e-6 to 0.5; both curves are symmetric, so the
  large-FPR half mirrors the small-FPR one).

  ``mu_clt``: q √(T (e^{1/σ²} - 1)), the central limit of Bu, Dong, Long &
  Su (2020; DRS 2022, §5), an approximation for T -> ∞
  with q√T fixed that is neither an upper nor a lower bound at finite T (it
  ignores the low-FPR tail, where it is optimistic).  Reported beside the
  fit because it is the number the literature quotes; it costs nothing.

  Args:
    q, sigma, steps: DP-SGD configuration (broadcast, shape S).
    fpr: 1-D FPRs in (0, 1) to fit on (default ``DEFAULT_GDP_FPR``).
    num_eps, rtol: as in :func:`tradeoff`.

  Returns:
    :class:`GdpEstimate` of arrays of shape S.
  """
  fpr = DEFAULT_GDP_FPR if fpr is None else fpr
  num.check_array("fpr", fpr, low=0.0, high=1.0, low_open=True, high_open=True)
  fpr = np.asarray(fpr, np.float64).reshape(-1)
  b = tradeoff(q, sigma, steps, fpr, num_eps=num_eps, rtol=rtol)
  with np.errstate(divide="ignore", invalid="ignore"):
    mu = np.max(_sps.ndtri(b.tpr_upper) - _sps.ndtri(fpr), axis=-1)
  mu = np.maximum(mu, 0.0)
  shape = np.shape(mu)
  qq, ss, tt = (np.broadcast_to(np.asarray(a, np.float64), shape) for a in (q, sigma, steps))
  return GdpEstimate(mu, _mu_clt(qq, ss, tt))
