"""The table a job prints: the headline metrics per method, one section per target (no torch needed).

The columns are the headline metrics of the result's own catalogue (its task's legacy catalogue for a result that
has none, `read/catalogue.py`), headed by their labels; those without a value in the job are left out, a metric
recorded per round shows its last round, and the records along a method's steps (`step`) are left out.
"""

from __future__ import annotations

from unlearnbench.core.catalogue import Catalogue
from unlearnbench.report.read.catalogue import result_catalogue, result_legacy
from unlearnbench.report.read.collect import describe_numerics


def row_name(record: dict) -> str:
    return record["method"] if record["role"] == "unlearned" else f"({record['role']})"


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}" if abs(value) < 1000 else f"{value:.3g}"


def table_rows(records: list[dict]) -> dict[str, dict]:
    """Row name → {(metric, split): value}, keeping the value of the latest round of per-round metrics."""
    values: dict[str, dict] = {}
    latest: dict[tuple, int] = {}
    for r in records:
        key, round_ = (row_name(r), r["metric"], r["split"] or ""), r.get("round")
        if round_ is None or round_ >= latest.get(key, -1):
            values.setdefault(key[0], {})[key[1:]] = r["value"]
            latest[key] = -1 if round_ is None else round_
    return values


def own_catalogue(result: dict) -> Catalogue:
    """The declarations the result carries; its task's legacy catalogue where it has none or a damaged one."""
    try:
        return result_catalogue(result)
    except ValueError:
        return result_legacy(result)


def job_table(result: dict) -> str:
    """Plain-text table per target: rows original, retrained, then every method; a column per headline metric."""
    headline = own_catalogue(result).headline()
    job = result["job"]
    lines = [f"{job['dataset']} · {job['model']} · {job['scenario']} · seeds train {job['seed_train']} "
             f"unlearn {job['seed_unlearn']} eval {job['seed_eval']}",
             f"on {describe_numerics(result.get('numerics'))}"]
    final = [r for r in result["records"] if r.get("step") is None]  # a record along the steps is no final one
    for target in dict.fromkeys(r["target"] for r in final):
        values = table_rows([r for r in final if r["target"] == target])
        columns = [c for c in headline if any(v.get(c[1:]) is not None for v in values.values())]
        header = ["target " + target, *(c[0] for c in columns)]
        rows = [[name, *(fmt(v.get((metric, split))) for _, metric, split in columns)] for name, v in values.items()]
        widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
        lines.append("")
        for i, row in enumerate([header, *rows]):
            lines.append("  ".join(str(x).rjust(w) if j else str(x).ljust(w) for j, (x, w) in
                                   enumerate(zip(row, widths, strict=True))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
