"""The text task's benchmarks, one module each: TOFU's (`tofu`), MUSE's (`muse`) and WMDP's (`wmdp`) evaluations,
and the corpus bench MUSE's and WMDP's share (`corpus`)."""
