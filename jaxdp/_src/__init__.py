"""jaxdp's implementation, in layers (see docs/architecture.md).

Nothing here is public: import from the public modules (``jaxdp.rdp``, ...).
"""
