"""Hydra configs of unlearnbench, shipped as the package `unlearnbench.conf`.

Importing it registers the structured-config schemas: the core's, and each task's own options (the module
`unlearnbench.tasks.<task>.options` of every task package that has one, `core.config.task_options`), so that
`pkg://unlearnbench.conf` composes the same way from the console script, the compose API and user code. A task's
options module imports no torch: it is read before every composition.
"""

import importlib
import importlib.util
import pkgutil

import unlearnbench.core.config
import unlearnbench.tasks

for _task in pkgutil.iter_modules(unlearnbench.tasks.__path__):
    if _task.ispkg and importlib.util.find_spec(f"unlearnbench.tasks.{_task.name}.options") is not None:
        importlib.import_module(f"unlearnbench.tasks.{_task.name}.options")
