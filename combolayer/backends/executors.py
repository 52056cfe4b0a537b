"""Deprecated: the executors moved to `combolayer.executors`. This name stays for a release,
with a `DeprecationWarning`, as that module itself: imports written before the move still
work."""

import sys
import warnings

from .. import executors

warnings.warn("combolayer.backends.executors moved to combolayer.executors; import it from "
              "there", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = executors
