"""The text task's data: TOFU's question-answer records and the built-in generator (`records`), the TOFU, MUSE and
WMDP readers, and the corpora the MUSE and WMDP benchmarks read (`corpus`)."""
