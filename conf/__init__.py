"""Hydra configs of unlearnbench, shipped as the package `unlearnbench.conf`.

Importing it registers the structured-config schemas, so `pkg://unlearnbench.conf` composes the same way from the
console script, the compose API and user code.
"""

import unlearnbench.core.config  # noqa: F401
