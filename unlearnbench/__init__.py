"""unlearnbench: a seed-aware benchmark for machine unlearning."""

__version__ = "0.1.0"
