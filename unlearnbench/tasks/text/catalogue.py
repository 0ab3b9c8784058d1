"""The text task's one catalogue: the metrics of TOFU, MUSE and WMDP (each declared beside the function that computes
it: `evaluate/metrics.py`, `benchmarks/muse.py`, `benchmarks/wmdp.py`), its splits, its gold standard and the forget
quality the report derives against one fixed retain model: what the report knows of them (`core/catalogue.py`).
Each benchmark's bench selects which of them its jobs show, and how (`SELECTION` of `benchmarks/<name>.py`)."""

from unlearnbench.core.catalogue import Catalogue, PerExample
from unlearnbench.tasks.text.benchmarks.muse import KNOWMEM_ROUGE, VERBMEM_ROUGE
from unlearnbench.tasks.text.benchmarks.wmdp import MC_ACCURACY
from unlearnbench.tasks.text.evaluate import metrics

FORGET = "forget"

CATALOGUE = Catalogue(
    (metrics.FORGET_QUALITY, metrics.FORGET_QUALITY_FIRST, metrics.MODEL_UTILITY, metrics.PROB, metrics.ROUGE_L_RECALL,
     metrics.TRUTH_RATIO, metrics.EXTRACTION_STRENGTH, metrics.LEAK_AT_K, metrics.MAX_ROUGE_AT_K,
     metrics.EXACT_MEMORIZATION, *metrics.MIA_AUCS, metrics.PRIVLEAK, VERBMEM_ROUGE, KNOWMEM_ROUGE, MC_ACCURACY),
    {FORGET: "D_f", "retain": "D_r", "holdout": "holdout", "general_authors": "ra", "general_facts": "wf",
     "general": "general"},
    frozenset({"text_retrain"}),
    (metrics.FIRST_RETAIN_MODEL,),
    PerExample(FORGET, "retain", "holdout"),
    (f"{metrics.FORGET_QUALITY.name}:{FORGET}", metrics.MODEL_UTILITY.name))  # TOFU's plane (a selection without
# both metrics, MUSE's or WMDP's, has none)
