"""The image task's metrics (computed in `metrics/scoring.py` from the functions of `metrics/functions.py`), its
splits and its gold standard: what the report knows of them (`core/catalogue.py`)."""

from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Catalogue, Metric, PerExample

FORGET_TRAIN, RETAIN_TRAIN, FORGET_TEST, RETAIN_TEST = "forget_train", "retain_train", "forget_test", "retain_test"

CATALOGUE = Catalogue(
    (Metric("acc", "acc", RETRAINED, headline=(FORGET_TEST, RETAIN_TEST), figure=(FORGET_TEST, RETAIN_TEST)),
     Metric("loss", "loss", RETRAINED),
     Metric("delta_acc", "Δacc", 0.0, headline=(FORGET_TEST, RETAIN_TEST, FORGET_TRAIN),
            leaderboard=(FORGET_TRAIN, FORGET_TEST, RETAIN_TEST), figure=(FORGET_TEST,)),
     Metric("delta_loss", "Δloss", 0.0),
     Metric("mia", "MIA", RETRAINED, headline=(FORGET_TRAIN,)),
     Metric("delta_mia", "ΔMIA", 0.0, headline=(FORGET_TRAIN,), leaderboard=(FORGET_TRAIN,), figure=(FORGET_TRAIN,)),
     Metric("mia_loss", "mia_loss", 0.5),  # an attacker at chance (docs/metrics.md)
     Metric("activation_distance", "act.dist", 0.0, headline=(FORGET_TRAIN,), figure=(FORGET_TRAIN,)),
     Metric("js_divergence", "JS", 0.0, headline=(FORGET_TRAIN,)),
     Metric("completeness", "completeness", 1.0),
     Metric("layer_distance", "layer dist", 0.0, headline=(NO_SPLIT,), figure=(NO_SPLIT,)),
     Metric("tow", "tow", 1.0, headline=(NO_SPLIT,))),
    {FORGET_TRAIN: "D_f", RETAIN_TRAIN: "D_r", FORGET_TEST: "D'_f", RETAIN_TEST: "D'_r"},
    frozenset({"retrain"}),
    per_example=PerExample(FORGET_TRAIN, RETAIN_TRAIN, RETAIN_TEST, accuracy="acc", privacy="mia"))
