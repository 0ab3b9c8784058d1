"""Experiment trackers (MLflow, Weights & Biases, TensorBoard): each job's params, curves, records and result.json,
and the sweep's report, logged from the files a sweep writes (`logger=…`, conf/logger/; docs/trackers.md). Like the
report, it reads the core's contracts (the result document) and imports no task."""
