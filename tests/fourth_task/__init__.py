"""A fourth task, `tally`, from outside the project: estimating a mean and unlearning a group of its values. It
shows what adding a task takes: this package (its options, bench, methods and metrics) and its configs (`conf/`,
on Hydra's search path), with no file of unlearnbench edited (tests/core/test_fourth_task.py)."""
