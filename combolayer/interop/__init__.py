"""Other libraries' models behind combolayer's registry: each module here wraps one
library's models as a registered backend (`combolayer.interop.pyepo`: PyEPO's
``optModel``), so that the layer, the losses and ``make_solver`` take them as they take
any backend, through a `combolayer.backends.BackendConfig`."""
