"""The text task's unlearning methods: one module each, configured by `conf/method/<name>.yaml`."""
