"""The ranking task's metrics (`job.py`): what the report knows of them (`core/catalogue.py`)."""

from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Catalogue, Metric

CATALOGUE = Catalogue(
    (Metric("ndcg@10", "NDCG@10", RETRAINED, headline=(NO_SPLIT,), leaderboard=(NO_SPLIT,), figure=(NO_SPLIT,)),
     Metric("online_ndcg", "online NDCG", RETRAINED, headline=(NO_SPLIT,)),
     Metric("weight_distance", "‖w_T − w‖", headline=(NO_SPLIT,))),
    {},
    frozenset({"fed_retrain"}))
