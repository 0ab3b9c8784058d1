"""The numerics identity (what besides the config fixes a float trajectory): what it holds, and that the report warns
when one sweep mixes identities. That it separates cache entries and that a warm cache equals a cold run:
test_job.py, on the jobs it runs anyway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from unlearnbench.report.build import build_report
from unlearnbench.report.read.collect import describe_numerics, mixed_numerics
from unlearnbench.runtime.numerics import _proc_cpuinfo, numerics_id, numerics_identity
from unlearnbench.runtime.seeding import configure_determinism

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 amx_tile amx_bf16 hypervisor

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: another core (never read)
"""


@pytest.fixture
def restore_switches():
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    configure_determinism(deterministic, threads, precision)


def test_cpuinfo_parser_reads_the_first_core(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    fields = _proc_cpuinfo(path)
    assert fields["model name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert (fields["cpu family"], fields["model"]) == ("6", "143")
    assert "amx_bf16" in fields["flags"].split()
    assert _proc_cpuinfo(tmp_path / "absent") == {}


def test_identity_follows_the_live_switches(restore_switches, monkeypatch):
    cpu = torch.device("cpu")
    configure_determinism(True, 1, "high")
    one = numerics_identity(cpu, "32-true")
    assert one["threads"] == 1 and one["deterministic"] is True and one["matmul_precision"] == "high"
    assert one["device"] == "cpu" and one["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert one["torch"] == torch.__version__
    assert one["id"] == numerics_id(one) and len(one["id"]) == 12
    assert numerics_identity(cpu, "32-true") == one  # stable within a process
    configure_determinism(True, 2, "high")
    two = numerics_identity(cpu, "32-true")
    assert two["threads"] == 2 and two["id"] != one["id"]
    configure_determinism(True, 1, "high")
    for changed in (numerics_identity(cpu, "bf16-mixed"), numerics_identity(cpu, "32-true", world_size=2),
                    numerics_identity(cpu, "32-true", strategy="ddp_spawn")):
        assert changed["id"] != one["id"]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # capping oneDNN's kernels is another trajectory
    capped = numerics_identity(cpu, "32-true")
    assert capped["environment"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and capped["id"] != one["id"]


def test_a_gpu_is_identified_by_name_capability_and_libraries(monkeypatch):
    from types import SimpleNamespace

    from unlearnbench.runtime.numerics import device_identity

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(name=f"NVIDIA H200 #{device.index}", major=9, minor=0))
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    gpu = device_identity(torch.device("cuda", 1))
    assert gpu == {"device": "cuda", "gpu": "NVIDIA H200 #1", "capability": "9.0", "cuda": torch.version.cuda,
                   "cudnn": 91000}
    assert "threads" not in gpu  # the host's thread count does not steer a GPU's kernels


def identity(threads: int, cpu: str = "AMD EPYC") -> dict:
    fields = {"torch": "2.14.1", "device": "cpu", "cpu": cpu, "cpu_capability": "AVX2", "threads": threads,
              "precision": "32-true", "world_size": 1}
    return {"id": numerics_id(fields), **fields}


def write_job(folder: Path, seed: int, numerics: dict | None) -> None:
    folder.mkdir(parents=True)
    job = {"task": "image_classification", "dataset": "digits", "model": "resnet18", "scenario": "full_class",
           "method": "ssd", "seed_train": seed, "seed_unlearn": seed, "seed_eval": seed, "strategy": "single",
           "precision": "32-true", "devices": 1}
    records = [{"target": "3", "method": "ssd", "role": "unlearned", "metric": "acc", "split": "forget_test",
                "value": 0.1 * seed}]
    result = {"schema": 1, "status": "complete", "error": None, "job": job, "records": records}
    if numerics is not None:
        result["numerics"] = numerics
    (folder / "result.json").write_text(json.dumps(result))


def test_report_warns_when_a_sweep_mixes_numerics_identities(tmp_path):
    same, mixed = tmp_path / "same", tmp_path / "mixed"
    for seed in range(3):
        write_job(same / f"t{seed}", seed, identity(2))
        write_job(mixed / f"t{seed}", seed, identity(1 if seed == 0 else 2))
    write_job(mixed / "old", 9, None)  # a result from before identities: not counted either way
    clean = build_report([same], same / "report", figures=False)
    assert not any("numerics" in w for w in clean.warnings)
    text = (same / "report" / "report.md").read_text()
    assert "Ran on: AMD EPYC (AVX2), 2 threads, torch 2.14.1, precision 32-true" in text
    report = build_report([mixed], mixed / "report", figures=False)
    (warning,) = [w for w in report.warnings if "numerics" in w]
    assert "2 different numerics identities" in warning
    assert "2 job(s) with threads=2; 1 job(s) with threads=1" in warning  # only what differs, largest group first
    assert warning in (mixed / "report" / "report.md").read_text()
    results = (mixed / "report" / "results.csv").read_text()
    assert identity(1)["id"] in results and identity(2)["id"] in results  # every record names its identity


def test_mixed_numerics_names_every_differing_field():
    jobs = [{"status": "complete", "numerics_identity": identity(2, cpu)} for cpu in ("AMD EPYC", "Intel Xeon")]
    assert "cpu=AMD EPYC" in mixed_numerics(jobs) and "cpu=Intel Xeon" in mixed_numerics(jobs)
    assert "threads=" not in mixed_numerics(jobs)
    assert mixed_numerics(jobs[:1]) is None
    assert mixed_numerics([{**jobs[0], "status": "failed"}, jobs[1]]) is None  # failed jobs do not count
    gpu = {"id": "x", "device": "cuda", "gpu": "NVIDIA H200", "capability": "9.0", "cuda": "13.0",
           "torch": "2.14.1", "precision": "bf16-mixed", "world_size": 2, "strategy": "ddp"}
    assert describe_numerics(gpu) == "NVIDIA H200 (sm 9.0, CUDA 13.0) × 2 ranks (ddp), torch 2.14.1, " \
                                     "precision bf16-mixed"
