"""The text task's metrics (`evaluate.py`, from the functions of `metrics.py`), its splits, its gold standard and
the forget quality the report derives against one fixed retain model: what the report knows of them
(`core/catalogue.py`). Likelihoods, ROUGE, truth ratio, utility and the MIA AUCs are best where M_r is."""

from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Catalogue, Derived, Metric, PerExample

FORGET = "forget"

CATALOGUE = Catalogue(
    (Metric("forget_quality", "FQ", 1.0, headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,)),
     # the report's: each model's forget truth ratios against the M_r of the configuration's first job
     Metric("forget_quality_first", "FQ first M_r", 1.0, headline=(FORGET,)),
     Metric("model_utility", "MU", RETRAINED, headline=(NO_SPLIT,), leaderboard=(NO_SPLIT,), figure=(NO_SPLIT,)),
     Metric("prob", "prob", RETRAINED, headline=(FORGET,)),
     Metric("rouge_l_recall", "ROUGE", RETRAINED, headline=(FORGET,)),
     Metric("truth_ratio", "TR", RETRAINED, headline=(FORGET,)),
     Metric("extraction_strength", "ES", RETRAINED),
     Metric("leak_at_k", "Leak@k", RETRAINED),
     Metric("max_rouge_at_k", "max ROUGE@k", RETRAINED),
     Metric("exact_memorization", "EM", RETRAINED),
     Metric("mia_loss_auc", "mia_loss_auc", RETRAINED),
     Metric("mia_zlib_auc", "mia_zlib_auc", RETRAINED),
     Metric("mia_min_k_auc", "MinK AUC", RETRAINED, headline=(FORGET,)),
     Metric("mia_min_k_pp_auc", "mia_min_k_pp_auc", RETRAINED),
     Metric("mia_reference_auc", "mia_reference_auc", RETRAINED),
     Metric("mia_gradnorm_auc", "mia_gradnorm_auc", RETRAINED),
     Metric("privleak", "privleak", 0.0, headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,), scale=100.0)),
    {FORGET: "D_f", "retain": "D_r", "holdout": "holdout", "general_authors": "ra", "general_facts": "wf"},
    frozenset({"text_retrain"}),
    (Derived("forget_quality_first", source="forget_quality", split=FORGET, column="truth_ratio",
             statistic="ks_p_value"),),
    PerExample(FORGET, "retain", "holdout"))

# MUSE (muse_bench.py): memorisation and knowledge closest to M_r's, privleak 0 (M_r's own leakage).
MUSE_CATALOGUE = Catalogue(
    (Metric("verbmem_rouge", "VerbMem", RETRAINED, headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,)),
     Metric("knowmem_rouge", "KnowMem", RETRAINED, headline=(FORGET, "retain"), leaderboard=(FORGET, "retain"),
            figure=(FORGET, "retain")),
     Metric("privleak", "privleak", 0.0, headline=(FORGET,), leaderboard=(FORGET,), figure=(FORGET,), scale=100.0),
     Metric("mia_min_k_auc", "MinK AUC", RETRAINED),
     Metric("extraction_strength", "ES", RETRAINED),
     Metric("leak_at_k", "Leak@k", RETRAINED),
     Metric("max_rouge_at_k", "max ROUGE@k", RETRAINED)),
    {FORGET: "D_f", "retain": "D_r", "holdout": "holdout"},
    frozenset({"text_retrain"}),
    per_example=PerExample(FORGET, "retain", "holdout"))

# WMDP (wmdp_bench.py): the hazard and general accuracies closest to M_r's.
WMDP_CATALOGUE = Catalogue(
    (Metric("mc_accuracy", "Acc", RETRAINED, headline=(FORGET, "general"), leaderboard=(FORGET, "general"),
            figure=(FORGET, "general")),),
    {FORGET: "D_f", "general": "general"},
    frozenset({"text_retrain"}))
