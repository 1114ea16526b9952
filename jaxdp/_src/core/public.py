"""How the public facades (``jaxdp.rdp``, ``jaxdp.pld``, ...) adopt their names.

The implementation lives in ``jaxdp._src``; each public module re-exports the
names of one implementation module and calls :func:`adopt`, so that classes
and functions defined there report the public module as their ``__module__``
(stable reprs, pickles and documentation), as jax and optax do.
"""

from __future__ import annotations

__all__ = ["adopt"]


def adopt(public_name: str, impl, namespace: dict, names) -> None:
  """Sets ``__module__ = public_name`` on the objects of ``names`` that
  ``impl`` defines (re-exports from elsewhere keep their own module).

  Args:
    public_name: the facade's ``__name__``.
    impl: the implementation module the facade mirrors.
    namespace: the facade's ``globals()``.
    names: the facade's ``__all__``.
  """
  for name in names:
    obj = namespace[name]
    if getattr(obj, "__module__", None) == impl.__name__:
      try:
        obj.__module__ = public_name
      except (AttributeError, TypeError):   # builtins and C-level wrappers
        pass
