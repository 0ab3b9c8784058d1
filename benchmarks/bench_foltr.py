"""Time one full federated online learning-to-rank run on synthetic LETOR data of MQ2007's size.

1,017 training and 339 test queries, 10 clients (3 poisoning), 1000 training rounds, then 1000 unlearning rounds of
one method, with offline NDCG@10 after every round. Target on a 2-core CPU: under 10 s (the reference code needs
about 4 minutes). Run with `make bench`; `--rounds`, `--train-queries` and `--test-queries` set a smaller run (whose
time the target does not describe).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import numpy as np

from unlearnbench.tasks.ranking.data import SyntheticLetor
from unlearnbench.tasks.ranking.federation import ModelPoisoning, Simulator, train_federation
from unlearnbench.tasks.ranking.methods.base import FederatedTask
from unlearnbench.tasks.ranking.methods.fed_finetune import FedFinetune
from unlearnbench.tasks.ranking.pdgd import CLICK_MODELS, Ndcg

TARGET_S = 10.0


def bench_foltr() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1000, help="training rounds, and as many unlearning rounds")
    parser.add_argument("--train-queries", type=int, default=1017, help="MQ2007's: 1017")
    parser.add_argument("--test-queries", type=int, default=339, help="MQ2007's: 339")
    args = parser.parse_args()
    clients = ModelPoisoning.clients
    if args.rounds < 1 or args.test_queries < 1 or args.train_queries < clients:
        parser.error(f"--rounds and --test-queries must be ≥ 1 and --train-queries ≥ {clients} (a query for each "
                     f"client); got {args.rounds}, {args.test_queries} and {args.train_queries}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        source = SyntheticLetor(name="synthetic_letor", root=folder, train_queries=args.train_queries,
                                test_queries=args.test_queries)
        start = time.perf_counter()
        source.generate(source.folder())
        rows.append(("write synthetic LETOR files (once)", time.perf_counter() - start, ""))
        start = time.perf_counter()
        data = source.load()
        rows.append(("read them (LETOR parser)", time.perf_counter() - start, ""))
    scenario = ModelPoisoning(rounds=args.rounds, unlearning_rounds=args.rounds)
    run_start = time.perf_counter()
    trained = train_federation(data, scenario, 0.1, seed=0)
    rows.append((f"train: {args.rounds} rounds × {scenario.clients} clients × {scenario.queries_per_round} queries",
                 time.perf_counter() - run_start, ""))
    start = time.perf_counter()
    task = FederatedTask(data, scenario, Simulator(data.train, CLICK_MODELS[scenario.click_model], 0.1), 0, 0)
    rounds = FedFinetune("fed_finetune").unlearn(trained, task)
    rows.append((f"unlearn: fed_finetune, {args.rounds} rounds × {clients - len(scenario.malicious)} clients",
                 time.perf_counter() - start, ""))
    start = time.perf_counter()
    ndcg = Ndcg(data.test.features, data.test.labels)
    curve = np.concatenate([ndcg.curve(trained.globals), ndcg.curve(np.array(rounds.globals))])
    rows.append((f"evaluate: NDCG@10 after each of {len(curve)} rounds", time.perf_counter() - start, ""))
    rows.append(("one full run (train + unlearn + evaluate)", time.perf_counter() - run_start,
                 f"target < {TARGET_S:.0f} s"))
    print(f"FOLTR on synthetic LETOR ({len(data.train)} train / {len(data.test)} test queries, navigational clicks)")
    print(f"{'stage':48} {'seconds':>8}  note")
    print(f"{'-' * 48} {'-' * 8}  {'-' * 14}")
    for name, seconds, note in rows:
        print(f"{name:48} {seconds:8.2f}  {note}")
    print(f"NDCG@10: start {curve[0]:.3f}, after poisoned training {curve[args.rounds]:.3f}, "
          f"after unlearning {curve[-1]:.3f}")
    sys.stdout.flush()


def main() -> None:
    from unlearnbench.cli import run_script

    run_script(bench_foltr)


if __name__ == "__main__":
    main()
