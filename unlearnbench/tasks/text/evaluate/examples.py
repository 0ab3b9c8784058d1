"""`examples.parquet` of a text job: a question split's per-example outputs (`SplitOutputs`), the rows they make
(`TextExamples`) with the logit-scaled confidence of an answer, and the reference attack's score per example."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from unlearnbench.core.examples import COLUMNS, ExampleTable
from unlearnbench.tasks.text.evaluate import metrics

EXAMPLE_SPLITS = ("forget", "retain", "holdout")
TEXT_COLUMNS = (*COLUMNS, "loss_true", "loss_perturbed", "truth_ratio", "prob", "rouge_l_recall", "mia_zlib",
                "mia_min_k", "mia_min_k_pp", "mia_reference", "mia_gradnorm")


@dataclass
class SplitOutputs:
    """Per example of one split (arrays of its length)."""

    loss: np.ndarray  # the answer's mean NLL over its labelled tokens (L̄)
    loss_true: np.ndarray | None  # the true side of the truth ratio: paraphrase (forget, retain) or answer
    loss_perturbed: np.ndarray | None  # (n, k)
    rouge: np.ndarray | None  # None where a point of the dynamics generates nothing
    exact: np.ndarray  # exact memorisation
    extraction: np.ndarray  # extraction strength
    mia: dict[str, np.ndarray] = field(default_factory=dict)  # higher = less likely a member
    leak: np.ndarray | None = None  # Leak@k per prompt, where `evaluation.sampling` draws samples
    max_rouge: np.ndarray | None = None  # the expected largest ROUGE-L recall among k samples, per prompt
    reference_numerics: bool = False  # OpenUnlearning's exact numerics (`metrics` module docstring)

    @property
    def truth_ratio(self) -> np.ndarray | None:
        return None if self.loss_perturbed is None else metrics.truth_ratio(self.loss_true, self.loss_perturbed,
                                                                             self.reference_numerics)

    def finite(self) -> bool:
        arrays = [self.loss] + [a for a in (self.rouge, self.loss_true, self.loss_perturbed) if a is not None]
        return all(np.isfinite(a).all() for a in arrays)

    def subset(self, rows: np.ndarray) -> SplitOutputs:
        """The outputs of the examples at `rows`."""
        def rows_of(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[rows]
        return replace(self, loss=self.loss[rows], loss_true=rows_of(self.loss_true),
                       loss_perturbed=rows_of(self.loss_perturbed), rouge=rows_of(self.rouge), exact=self.exact[rows],
                       extraction=self.extraction[rows], mia={name: values[rows] for name, values in self.mia.items()},
                       leak=rows_of(self.leak), max_rouge=rows_of(self.max_rouge))


def reference_score(out: SplitOutputs, reference: SplitOutputs) -> np.ndarray:
    """The reference-model attack's score per example (OpenUnlearning's `mia_reference`): the model's mean answer NLL
    minus the reference model's (this job's M_r), higher for non-members."""
    return out.loss - reference.loss


def confidence(loss: np.ndarray) -> np.ndarray:
    """The logit-scaled confidence of an answer, log P̃ − log(1 − P̃) with P̃ = exp(−L̄): the image task's `conf`
    for a sequence, so the report's per-example pools (ε, F, LiRA) read text jobs unchanged. L̄ is floored at 1e-30
    (P̃ = 1 in float64 would make it infinite)."""
    loss = np.maximum(loss, 1e-30)
    return -loss - np.log(-np.expm1(-loss))


@dataclass
class TextExamples(ExampleTable):
    """`examples.parquet` of a text job: one row per (target, model, split, example) of forget, retain and holdout.
    `index` is the record's position in `full` (forget) or in its evaluated split, `label` its entity's position
    among the entities (−1 for holdout), `pred` 1 where the teacher-forced argmax reproduces the whole answer."""

    columns: dict[str, list] = field(default_factory=lambda: {name: [] for name in TEXT_COLUMNS})

    def add_model(self, target: str, role: str, method: str | None, outputs: dict[str, SplitOutputs],
                  positions: dict[str, tuple[np.ndarray, np.ndarray]], reference: dict[str, SplitOutputs]) -> None:
        """The model's rows; `reference` (M_r's outputs) gives the reference attack's score."""
        for split in EXAMPLE_SPLITS:
            out, (index, label) = outputs[split], positions[split]
            n, missing = len(out.loss), np.full(len(out.loss), np.nan)
            tr = out.truth_ratio
            values = {"index": index, "label": label, "conf": confidence(out.loss), "loss": out.loss,
                      "pred": (out.exact == 1).astype(np.int64), "loss_true": missing if out.loss_true is None
                      else out.loss_true, "loss_perturbed": missing if out.loss_perturbed is None
                      else out.loss_perturbed.mean(1), "truth_ratio": missing if tr is None else tr,
                      "prob": metrics.probability(out.loss), "rouge_l_recall": out.rouge,
                      "mia_zlib": out.mia["zlib"], "mia_min_k": out.mia["min_k"], "mia_min_k_pp": out.mia["min_k_pp"],
                      "mia_reference": reference_score(out, reference[split]),
                      "mia_gradnorm": out.mia.get("gradnorm", missing)}
            self.extend(n, {"target": target, "role": role, "method": method, "split": split}, values)
