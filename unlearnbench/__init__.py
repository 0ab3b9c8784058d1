"""unlearnbench: a seed-aware benchmark for machine unlearning.

From Python: `run_sweep(overrides)` runs a sweep as the command line does and returns its records as a pandas
DataFrame; `load_report(folder)` reads a finished sweep's report (unlearnbench.api). Both are imported on first use,
so that the console scripts start without pandas.
"""

__version__ = "0.1.0"
__all__ = ["Report", "SweepError", "load_report", "run_sweep"]


def __getattr__(name: str):
    if name in __all__:
        from unlearnbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'unlearnbench' has no attribute {name!r}")
