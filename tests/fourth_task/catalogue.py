"""The tally task's metrics: the estimate itself, and its distance to the retrained estimate."""

from unlearnbench.core.catalogue import NO_SPLIT, RETRAINED, Catalogue, Metric

CATALOGUE = Catalogue(
    (Metric("mean", "estimated mean", RETRAINED, headline=(NO_SPLIT,)),
     Metric("gap", "|M_u − M_r|", 0.0, headline=(NO_SPLIT,), leaderboard=(NO_SPLIT,))),
    {}, frozenset())
