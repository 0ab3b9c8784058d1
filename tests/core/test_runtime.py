"""Runtime pieces: batches per rank, ordered prediction, the schedule, and what each strategy and precision needs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import compose_config
from lightning_fabric import Fabric

from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.fabric import check_runtime
from unlearnbench.runtime.train import recipe_schedule
from unlearnbench.tasks.image.data.base import ImageData, full_pool
from unlearnbench.tasks.image.data.transforms import Normalizer
from unlearnbench.tasks.image.evaluate import predict
from unlearnbench.tasks.image.train import Batches


def tiny_data(n_train: int = 23, n_test: int = 7) -> ImageData:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n_train + n_test, 1, 4, 4), generator=g, dtype=torch.uint8)
    labels = torch.arange(n_train + n_test) % 3
    return ImageData("tiny", images[:n_train], labels[:n_train], images[n_train:], labels[n_train:],
                     ["a", "b", "c"], (0.5,), (0.25,))


def rank(world: int, r: int) -> SimpleNamespace:
    return SimpleNamespace(world_size=world, global_rank=r)


def test_one_rank_sees_every_sample_once_per_epoch_in_a_seeded_order():
    subset = full_pool(tiny_data(), "train")
    norm = Normalizer((0.5,), (0.25,))
    batches = Batches(rank(1, 0), subset, 5, norm, torch.Generator().manual_seed(1))
    epoch = list(batches.positions())
    assert len(batches) == len(epoch) == 5 and [len(b) for b in epoch] == [5, 5, 5, 5, 3]
    assert sorted(torch.cat(epoch).tolist()) == list(range(23))
    again = Batches(rank(1, 0), subset, 5, norm, torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(epoch, again.positions(), strict=True))
    assert not torch.equal(torch.cat(epoch), torch.cat(list(batches.positions())))  # the next epoch reshuffles
    ordered = Batches(rank(1, 0), subset, 5, norm)
    assert torch.cat(list(ordered.positions())).tolist() == list(range(23))


def test_ranks_split_every_global_batch_and_take_the_same_number_of_steps():
    subset = full_pool(tiny_data(), "train")
    norm = Normalizer((0.5,), (0.25,))
    single = list(Batches(rank(1, 0), subset, 8, norm, torch.Generator().manual_seed(3)).positions())
    ranks = [list(Batches(rank(2, r), subset, 8, norm, torch.Generator().manual_seed(3)).positions())
             for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(single) == 3
    for whole, first, second in zip(single, *ranks, strict=True):
        assert torch.equal(torch.cat([first, second]), whole)
    # a last batch with fewer than two samples per rank is dropped: no empty batch, no single-sample batch norm
    assert len(Batches(rank(4, 0), full_pool(tiny_data(n_train=15), "train"), 8, norm)) == 1
    assert len(Batches(rank(4, 0), full_pool(tiny_data(n_train=16), "train"), 8, norm)) == 2
    assert len(Batches(rank(1, 0), full_pool(tiny_data(n_train=17), "train"), 8, norm)) == 2
    assert len(Batches(rank(1, 0), full_pool(tiny_data(n_train=18), "train"), 8, norm)) == 3


def test_batches_yield_normalised_images_and_their_labels():
    data = tiny_data()
    x, y = next(iter(Batches(rank(1, 0), full_pool(data, "train"), 4, Normalizer((0.5,), (0.25,)))))
    assert torch.allclose(x, (data.train_images[:4].float() / 255 - 0.5) / 0.25)
    assert torch.equal(y, data.train_labels[:4])


def test_predict_returns_every_sample_in_order_whatever_the_batch_size():
    data = tiny_data()
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
    norm = Normalizer((0.5,), (0.25,))
    expected = model(norm(data.train_images.float() / 255)).detach()
    for batch_size in (1, 4, 23, 100):
        logits = predict(fabric, model, full_pool(data, "train"), batch_size, norm)
        assert logits.shape == (23, 3)
        torch.testing.assert_close(logits, expected)


def test_schedule_warms_up_linearly_then_decays_at_each_milestone():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = recipe_schedule(optimizer, steps_per_epoch=4, warmup_epochs=1, milestones=[2, 3], gamma=0.1)
    lrs = []
    for _ in range(16):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4:8] == pytest.approx([1.0] * 4)
    assert lrs[8:12] == pytest.approx([0.1] * 4) and lrs[12:] == pytest.approx([0.01] * 4)


def runtime(overrides: list[str]):
    cfg = compose_config(overrides)
    return cfg.strategy, cfg.precision


@pytest.mark.parametrize(("overrides", "message"), [
    (["precision=16-mixed"], "precision 16-mixed needs a CUDA GPU"),
    (["precision=transformer-engine"], "the package transformer_engine (pip install 'unlearnbench[fp8]')"),
    (["precision=nf4-dq"], "the package bitsandbytes (pip install 'unlearnbench[quant]')"),
    (["precision=int8-training"], "needs the package bitsandbytes"),
    (["strategy=fsdp"], "strategy fsdp needs a CUDA GPU"),
    (["strategy=deepspeed_stage_3"], "the package deepspeed (pip install 'unlearnbench[deepspeed]')"),
    (["strategy=ddp"], "use strategy=ddp_spawn"),
    (["strategy.devices=2"], "strategy single runs on 1 device(s), not 2"),
])
def test_what_this_machine_cannot_run_fails_with_what_it_needs(overrides, message):
    with pytest.raises(UserError) as error:
        check_runtime(*runtime(overrides), accelerator="cpu")
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-mixed", "bf16-true", "16-true"])
def test_cpu_precisions_and_local_strategies_pass_the_check(precision):
    for strategy in ("single", "ddp_spawn"):
        assert check_runtime(*runtime([f"strategy={strategy}", f"precision={precision}"]), "cpu") == "cpu"


def test_spawned_ranks_start_as_the_strategy_says_and_a_bad_start_method_is_one_line():
    """ddp_spawn's ranks are forks of a preloaded forkserver by default; Fabric's own spawn stays one option away. A
    start method the platform lacks, or one given to a strategy that spawns no ranks, is refused in one line."""
    from unlearnbench.runtime.fabric import fabric_strategy

    strategy, _ = runtime(["strategy=ddp_spawn"])
    assert fabric_strategy(strategy)._start_method == "forkserver"
    assert fabric_strategy(runtime(["strategy=ddp_spawn", "strategy.start_method=spawn"])[0])._start_method == "spawn"
    for overrides, valid in ((["strategy=ddp_spawn", "strategy.start_method=thread"], "forkserver; got 'thread'"),
                             (["strategy=ddp", "strategy.start_method=spawn"], "must be null")):
        with pytest.raises(UserError) as error:
            fabric_strategy(runtime(overrides)[0])
        assert "'strategy.start_method'" in str(error.value) and valid in str(error.value)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize(("overrides", "bench", "reader"), [
    ([], "unlearnbench.tasks.image.bench", "unlearnbench.tasks.image.data.digits"),
    (["experiment=tofu"], "unlearnbench.tasks.text.bench", "unlearnbench.tasks.text.data.records")])
def test_the_forkserver_preloads_the_job_loop_the_bench_and_the_datasets_reader(overrides, bench, reader,
                                                                                 monkeypatch):
    """A launcher's worker or a spawned rank is a fork of a server that has imported what its job imports first: the
    job loop, the task's bench and the dataset's module (digits': scikit-learn's loader, 0.7 s of CPU a worker)."""
    import multiprocessing.forkserver

    from unlearnbench.core.plan import preload_forkserver

    server = multiprocessing.forkserver._forkserver  # the process's one server, its preload put back afterwards
    monkeypatch.setattr(server, "_preload_modules", server._preload_modules)
    launcher = "hydra_plugins.unlearnbench_launcher.local"
    preload_forkserver(compose_config(overrides), launcher)
    assert server._preload_modules == ["unlearnbench.core.job", bench, reader, launcher]


def test_ddp_is_allowed_when_slurm_started_the_ranks(monkeypatch):
    for key, value in {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "sweep", "SLURM_NODELIST": "n1",
                       "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}.items():
        monkeypatch.setenv(key, value)
    assert check_runtime(*runtime(["strategy=ddp"]), "cpu") == "cpu"
