"""What the text task's benchmarks share: the metrics on per-example arrays (`metrics`), generation and Leak@k sampling
(`generation`), teacher-forced scores (`scoring`), the examples table (`examples`), multiple-choice accuracy and the NLI
judge."""
