"""Public ``jaxdp.cli``: re-exports :mod:`jaxdp._src.interfaces.cli` (its docstring is this module's)."""

from jaxdp._src.interfaces import cli as _impl
from jaxdp._src.interfaces.cli import (  # noqa: F401
    main,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)

if __name__ == "__main__":   # python -m jaxdp.cli
  import sys
  sys.exit(main())
