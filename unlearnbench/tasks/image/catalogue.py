"""The image task's catalogue: its metrics (each declared beside the function that computes it: `metrics/functions.py`,
and `metrics/scoring.py` for the differences to M_r), its splits and its gold standard: what the report knows of them
(`core/catalogue.py`)."""

from unlearnbench.core.catalogue import Catalogue, PerExample
from unlearnbench.tasks.image.metrics import functions as fn
from unlearnbench.tasks.image.metrics.functions import FORGET_TEST, FORGET_TRAIN, RETAIN_TEST, RETAIN_TRAIN
from unlearnbench.tasks.image.metrics.scoring import DELTA_ACC, DELTA_LOSS, DELTA_MIA

CATALOGUE = Catalogue(
    (fn.ACC, fn.LOSS, DELTA_ACC, DELTA_LOSS, fn.MIA, DELTA_MIA, fn.MIA_LOSS, fn.ACTIVATION_DISTANCE, fn.JS_DIVERGENCE,
     fn.COMPLETENESS, fn.LAYER_DISTANCE, fn.TOW),
    {FORGET_TRAIN: "D_f", RETAIN_TRAIN: "D_r", FORGET_TEST: "D'_f", RETAIN_TEST: "D'_r"},
    frozenset({"retrain"}),
    per_example=PerExample(FORGET_TRAIN, RETAIN_TRAIN, RETAIN_TEST, accuracy=fn.ACC.name, privacy=fn.MIA.name),
    plane=(f"{DELTA_ACC.name}:{FORGET_TRAIN}", f"{DELTA_ACC.name}:{RETAIN_TEST}"))  # Δacc on D_f against D'_r
