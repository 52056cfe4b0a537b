"""Deprecated: the solution pool moved to `combolayer.pool`. This name stays for a release,
with a `DeprecationWarning`, as that module itself: imports and layers pickled before the
move still load."""

import sys
import warnings

from .. import pool

warnings.warn("combolayer.backends.pool moved to combolayer.pool; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = pool
