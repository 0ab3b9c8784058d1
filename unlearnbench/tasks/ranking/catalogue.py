"""The ranking task's catalogue: its metrics (each declared beside the function that computes it, in `bench.py`):
what the report knows of them (`core/catalogue.py`)."""

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.tasks.ranking.bench import NDCG_AT_10, ONLINE_NDCG, WEIGHT_DISTANCE

CATALOGUE = Catalogue((NDCG_AT_10, ONLINE_NDCG, WEIGHT_DISTANCE), {}, frozenset({"fed_retrain"}))
