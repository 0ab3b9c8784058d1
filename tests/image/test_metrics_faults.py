"""Metrics under faults: non-finite values, diverged models, extreme logits, bunched attacker features, the loss
attacker's non-members, and NVML's device lookup and sample window (unlearnbench.tasks.image.metrics,
runtime.monitor)."""

from __future__ import annotations

import math
import os
import sys
import time
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from unlearnbench.core.result import finite
from unlearnbench.runtime import monitor
from unlearnbench.runtime.monitor import CostMonitor, NvmlUtilisation
from unlearnbench.tasks.image.data.base import ImageData
from unlearnbench.tasks.image.data.scenarios import FullClass, RandomSample
from unlearnbench.tasks.image.metrics import functions as fn
from unlearnbench.tasks.image.metrics.scoring import Outputs, Scorer

SPLITS = ("forget_train", "retain_train", "forget_test", "retain_test")


def make_data(n_train: int, n_test: int, classes: int = 3) -> ImageData:
    g = torch.Generator().manual_seed(0)
    return ImageData(
        "tiny",
        torch.randint(0, 256, (n_train, 1, 4, 4), dtype=torch.uint8, generator=g), torch.arange(n_train) % classes,
        torch.randint(0, 256, (n_test, 1, 4, 4), dtype=torch.uint8, generator=g), torch.arange(n_test) % classes,
        [chr(ord("a") + i) for i in range(classes)], (0.5,), (0.25,),
    )


def right_logits(labels: torch.Tensor, scales: torch.Tensor, classes: int = 3) -> torch.Tensor:
    """Logit `scale` on the label, 0 elsewhere: loss log(1 + (classes − 1)·exp(−scale))."""
    return F.one_hot(labels, classes).double() * scales[:, None]


def test_a_row_with_a_non_finite_logit_is_all_nan():
    data = make_data(6, 3)
    train = torch.zeros(6, 3, dtype=torch.float64)
    train[1, 0], train[2, 2], train[4, 1] = -math.inf, math.inf, math.nan
    out = Outputs(train, torch.zeros(3, 3, dtype=torch.float64), {})
    splits = FullClass(name="full_class").split(data, "a", torch.Generator().manual_seed(0))
    rows = out.logits(splits.retain_train)  # train rows 1, 2, 4, 5
    assert torch.isnan(rows[:3]).all()
    assert rows[3].tolist() == [0.0, 0.0, 0.0]


def model(data: ImageData, params: dict | None = None) -> Outputs:
    n_train, n_test = len(data.train_labels), len(data.test_labels)
    train = right_logits(data.train_labels, torch.linspace(6.0, 8.0, n_train, dtype=torch.float64))
    test = right_logits(data.test_labels, torch.linspace(0.2, 1.0, n_test, dtype=torch.float64))
    return Outputs(train, test, params if params is not None else {"w": torch.tensor([1.0, 2.0], dtype=torch.float64)})


@pytest.fixture
def tiny():
    data = make_data(30, 15)
    splits = FullClass(name="full_class").split(data, "a", torch.Generator().manual_seed(0))
    return data, splits, Scorer(splits, seed_eval=0, target="a", mia_max_members=1000, mia_loss_folds=2)


# ------------------------------------------------------------------------------- finite, deltas, tow


def test_finite_maps_nan_and_both_infinities_to_none():
    assert finite(math.nan) is None
    assert finite(math.inf) is None
    assert finite(-math.inf) is None
    assert finite(None) is None
    assert finite(1.5) == 1.5
    assert finite(0.0) == 0.0


def test_tug_of_war_of_an_infinite_delta_is_nan_not_infinite():
    assert math.isnan(fn.tug_of_war(math.inf, 0.0, 0.0))
    assert math.isnan(fn.tug_of_war(0.0, -math.inf, 0.5))
    assert fn.tug_of_war(0.5, 0.0, 0.0) == 0.5


def test_layer_distance_that_overflows_or_is_not_finite_is_none(tiny):
    data, _, scorer = tiny
    out_r = model(data)
    scores_r = scorer.model_scores(out_r)
    huge = model(data, {"w": torch.tensor([1e200, 2.0], dtype=torch.float64)})  # (1e200)² overflows float64
    assert scorer.comparison_scores(huge, scores_r, out_r, scores_r)["layer_distance", None] is None
    inf = model(data, {"w": torch.tensor([math.inf, 2.0], dtype=torch.float64)})
    assert scorer.comparison_scores(inf, scores_r, out_r, scores_r)["layer_distance", None] is None
    near = model(data, {"w": torch.tensor([4.0, 6.0], dtype=torch.float64)})
    assert scorer.comparison_scores(near, scores_r, out_r, scores_r)["layer_distance", None] == pytest.approx(5.0)


def test_deltas_and_tow_that_overflow_are_none(tiny):
    data, _, scorer = tiny
    out = model(data)
    scores_r = scorer.model_scores(out)
    scores_u = dict(scores_r)
    scores_r = dict(scores_r)
    scores_u["loss", "forget_train"], scores_r["loss", "forget_train"] = 1e308, -1e308  # difference: +inf
    scores_u["acc", "retain_train"], scores_r["acc", "retain_train"] = 1e308, -1e308
    comparison = scorer.comparison_scores(out, scores_u, out, scores_r)
    assert comparison["delta_loss", "forget_train"] is None
    assert comparison["delta_acc", "retain_train"] is None
    assert comparison["tow", None] is None
    assert comparison["delta_loss", "retain_train"] == 0.0
    values = [v for v in comparison.values() if v is not None]
    assert all(math.isfinite(v) for v in values)


# ---------------------------------------------------------------------------------- diverged models


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_scoring_a_model_with_non_finite_logits_gives_none_not_an_exception(tiny, bad):
    data, splits, scorer = tiny
    out_r = model(data)
    scores_r = scorer.model_scores(out_r)
    out_u = model(data)
    out_u.train[splits.forget_train.indices[:2], 0] = bad  # D_f is diverged; D_r and the test pool are not
    scores_u = scorer.model_scores(out_u)
    comparison = scorer.comparison_scores(out_u, scores_u, out_r, scores_r)

    assert scores_u["acc", "forget_train"] is None
    assert scores_u["loss", "forget_train"] is None
    assert scores_u["mia", "forget_train"] is None
    assert scores_u["mia_loss", "forget_train"] is None
    assert scores_u["acc", "retain_test"] == scores_r["acc", "retain_test"] == 1.0  # a clean split stays computed
    for metric in ("js_divergence", "activation_distance", "completeness"):
        assert comparison[metric, "forget_train"] is None
        assert comparison[metric, "retain_train"] == (1.0 if metric == "completeness" else 0.0)
    assert comparison["tow", None] is None  # no Δacc on D_f
    assert comparison["layer_distance", None] == 0.0
    assert all(v is None or math.isfinite(v) for v in comparison.values())
    assert all(v is None or math.isfinite(v) for v in scores_u.values())


def test_scoring_a_model_with_nan_logits_everywhere(tiny):
    data, _, scorer = tiny
    out = model(data, {"w": torch.tensor([math.nan, 1.0], dtype=torch.float64)})
    out.train[:] = math.nan
    out.test[:] = math.nan
    scores = scorer.model_scores(out)
    assert set(scores.values()) == {None}
    reference = model(data)
    scores_r = scorer.model_scores(reference)
    assert set(scorer.comparison_scores(out, scores, reference, scores_r).values()) == {None}


def test_attackers_on_non_finite_inputs_are_nan():
    some = torch.linspace(0.1, 1.0, 20, dtype=torch.float64)
    bad = some.clone()
    bad[3] = math.nan
    rng = np.random.default_rng
    assert math.isnan(fn.entropy_mia(bad, some, some, 100, rng(0)))
    assert math.isnan(fn.entropy_mia(some, bad, some, 100, rng(0)))
    assert math.isnan(fn.entropy_mia(some, some, bad, 100, rng(0)))
    inf = some.clone()
    inf[0] = math.inf
    assert math.isnan(fn.loss_mia(inf, some, 2, rng(0)))
    assert math.isnan(fn.loss_mia(some, bad, 2, rng(0)))


def test_entropy_of_nan_probabilities_is_nan_not_zero():
    probs = torch.tensor([[math.nan, math.nan], [1.0, 0.0]], dtype=torch.float64)
    value = fn.entropy(probs)
    assert math.isnan(value[0])
    assert value[1] == 0.0


def test_non_finite_reason_of_outputs():
    train, test = torch.zeros(1438, 3), torch.zeros(360, 3)
    params = {"layer1.0.conv1.weight": torch.ones(2, 2), "fc.bias": torch.ones(3)}
    assert Outputs(train, test, params).non_finite() is None

    train[torch.arange(12) * 7, 1] = math.nan
    train[7, 2] = math.inf  # a second bad value in a row already counted does not count twice
    train[6] = -math.inf
    assert Outputs(train, test, params).non_finite() == "non-finite logits on 13 of 1438 train samples"

    params["layer1.0.conv1.weight"][0, 1] = math.inf
    clean_train = torch.zeros(1438, 3)
    assert Outputs(clean_train, test, params).non_finite() == "non-finite parameters in layer1.0.conv1.weight"
    params["fc.bias"][0] = math.nan
    test[0, 0] = math.nan
    assert Outputs(clean_train, test, params).non_finite() == (
        "non-finite parameters in layer1.0.conv1.weight and 1 more; non-finite logits on 1 of 360 test samples")


# ------------------------------------------------------------------------------ js_divergence extremes


def js_of_logits(logits_r, logits_u) -> float:
    to_log = fn.log_probabilities
    return fn.js_divergence(to_log(torch.tensor(logits_r, dtype=torch.float64)),
                            to_log(torch.tensor(logits_u, dtype=torch.float64)))


def test_js_divergence_of_saturated_disjoint_logits_is_one_bit():
    assert js_of_logits([[0.0, -750.0]], [[-750.0, 0.0]]) == pytest.approx(1.0, abs=1e-12)


def test_js_divergence_with_a_subnormal_probability_against_zero_is_finite():
    # softmax([0, −745]) holds 5e-324, softmax([0, −750]) holds 0: (p + q)/2 underflows to 0
    assert torch.softmax(torch.tensor([0.0, -745.0], dtype=torch.float64), 0)[1] > 0
    value = js_of_logits([[0.0, -750.0]], [[0.0, -745.0]])
    assert math.isfinite(value) and 0.0 <= value <= 1.0
    assert value == pytest.approx(0.0, abs=1e-300)
    assert js_of_logits([[0.0, -745.0]], [[0.0, -750.0]]) == value


def test_js_divergence_in_the_scorer_with_logit_gaps_of_745(tiny):
    data, splits, scorer = tiny
    out_r, out_u = model(data), model(data)
    forget = splits.forget_train.indices
    out_r.train[forget] = torch.tensor([0.0, -750.0, -750.0], dtype=torch.float64)
    out_u.train[forget] = torch.tensor([0.0, -745.0, -750.0], dtype=torch.float64)
    scores_r, scores_u = scorer.model_scores(out_r), scorer.model_scores(out_u)
    value = scorer.comparison_scores(out_u, scores_u, out_r, scores_r)["js_divergence", "forget_train"]
    assert value is not None and 0.0 <= value <= 1e-300


def test_js_divergence_stays_in_the_unit_interval_for_extreme_random_logits():
    g = torch.Generator().manual_seed(1)
    for scale in (100.0, 1000.0, 1e5):
        a = fn.log_probabilities(scale * torch.randn(200, 5, generator=g, dtype=torch.float64))
        b = fn.log_probabilities(scale * torch.randn(200, 5, generator=g, dtype=torch.float64))
        ab = fn.js_divergence(a, b)
        assert 0.0 <= ab <= 1.0
        assert ab == pytest.approx(fn.js_divergence(b, a), abs=1e-12)
        assert fn.js_divergence(a, a.clone()) == 0.0


# -------------------------------------------------------------------------------- attacker precision


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_entropy_mia_separates_tightly_bunched_entropies(dtype):
    data = np.random.default_rng(0)
    members = torch.from_numpy(data.normal(1e-4, 1e-7, 400).astype(dtype))
    nonmembers = torch.from_numpy(data.normal(2e-4, 1e-7, 200).astype(dtype))
    forget = torch.from_numpy(data.normal(1e-4, 1e-7, 100).astype(dtype))
    unseen = torch.from_numpy(data.normal(2e-4, 1e-7, 100).astype(dtype))
    assert fn.entropy_mia(members, nonmembers, forget, 1000, np.random.default_rng(1)) > 0.9
    assert fn.entropy_mia(members, nonmembers, unseen, 1000, np.random.default_rng(1)) < 0.1


def test_loss_mia_separates_tightly_bunched_losses():
    data = np.random.default_rng(0)
    forget = torch.from_numpy(data.normal(1e-4, 1e-7, 200))
    unseen = torch.from_numpy(data.normal(2e-4, 1e-7, 200))
    assert fn.loss_mia(forget, unseen, 5, np.random.default_rng(1)) > 0.9


def test_entropy_and_attacker_features_are_float64():
    probs32 = torch.tensor([[0.9999, 0.0001], [0.5, 0.5]], dtype=torch.float32)
    value = fn.entropy(probs32)
    assert value.dtype == torch.float64
    exact = probs32.double()
    assert value.tolist() == pytest.approx((-(exact * exact.log()).sum(1)).tolist(), rel=1e-15)
    features = fn.attacker_features(torch.tensor([1e-4], dtype=torch.float32), torch.tensor([2.0]))
    assert features.dtype == np.float64 and features.shape == (2, 1)


# ------------------------------------------------------------------------- the loss attacker's non-members


def class_forgetting_model(data: ImageData) -> Outputs:
    """Like a model retrained without class a: high loss on every sample of class a, train or test (one
    distribution), low loss on the other classes."""
    g = torch.Generator().manual_seed(3)
    outputs = []
    for labels in (data.train_labels, data.test_labels):
        scales = 6.0 + torch.rand(len(labels), generator=g, dtype=torch.float64)
        forgotten = labels == 0
        scales[forgotten] = -(1.0 + 3.0 * torch.rand(int(forgotten.sum()), generator=g, dtype=torch.float64))
        outputs.append(right_logits(labels, scales, 10))
    return Outputs(outputs[0], outputs[1], {"w": torch.zeros(2, dtype=torch.float64)})


def test_mia_loss_in_class_forgetting_uses_the_forgotten_class_test_samples():
    data = make_data(1000, 1000, classes=10)
    splits = FullClass(name="full_class").split(data, "a", torch.Generator().manual_seed(0))
    scorer = Scorer(splits, seed_eval=0, target="a", mia_max_members=1000, mia_loss_folds=5)
    out = class_forgetting_model(data)
    value = scorer.model_scores(out)["mia_loss", "forget_train"]
    # 100 forget against 100 unseen samples of one loss distribution: chance level, standard deviation ≈ 0.035
    assert abs(value - 0.5) < 0.15
    assert scorer.loss_nonmembers() is splits.forget_test

    # the whole test set as non-members (90 % other classes) separates class a from the others, not members
    # from non-members
    forget = splits.forget_train
    forget_loss = fn.per_sample_loss(out.logits(forget), data.train_labels[forget.indices])
    test_loss = fn.per_sample_loss(out.test, data.test_labels)
    assert fn.loss_mia(forget_loss, test_loss, 5, np.random.default_rng(0)) > 0.9


def test_mia_loss_in_the_random_sample_scenario_uses_the_whole_test_set():
    data = make_data(60, 40)
    splits = RandomSample(name="random_sample").split(data, "0.1", torch.Generator().manual_seed(0))
    assert splits.forget_test.pool == "train"
    nonmembers = Scorer(splits, 0, "0.1", 1000, 2).loss_nonmembers()
    assert nonmembers.pool == "test"
    assert nonmembers.indices.tolist() == list(range(40))


# ------------------------------------------------------------------------------------------------ NVML

UUID_BYTES = bytes(range(16))


def now_us() -> int:
    """NVML's timestamps: microseconds since the epoch."""
    return int(time.time() * 1e6)


NVML_UUID = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
PCI_BUS_ID = "00000000:3B:00.0"


class FakeNvml(types.ModuleType):
    """pynvml with one GPU whose handle is found by UUID, PCI bus id or index; `buffer` holds its samples."""

    class NVMLError(Exception):
        pass

    def __init__(self, uuid_ok: bool = True, pci_ok: bool = True) -> None:
        super().__init__("pynvml")
        self.uuid_ok, self.pci_ok = uuid_ok, pci_ok
        self.lookups: list[tuple[str, object]] = []
        self.last_seen_args: list[int] = []
        self.buffer: list[SimpleNamespace] = []
        self.live_util: int | None = None  # when set, every poll adds a sample stamped "now"

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.lookups.append(("uuid", uuid))
        if not self.uuid_ok or uuid != NVML_UUID:
            raise self.NVMLError("not found")
        return ("uuid", uuid)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id):
        self.lookups.append(("pci", bus_id))
        if not self.pci_ok or bus_id != PCI_BUS_ID:
            raise self.NVMLError("not found")
        return ("pci", bus_id)

    def nvmlDeviceGetHandleByIndex(self, index):
        self.lookups.append(("index", index))
        return ("index", index)

    def nvmlDeviceGetProcessUtilization(self, handle, last_seen):
        self.last_seen_args.append(last_seen)
        if self.live_util is not None:
            self.buffer.append(SimpleNamespace(pid=os.getpid(), timeStamp=now_us(), smUtil=self.live_util))
        newer = [s for s in self.buffer if s.timeStamp > last_seen]
        if not newer:
            raise self.NVMLError("not found")
        return newer


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(**kwargs) -> FakeNvml:
        nvml = FakeNvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        props = SimpleNamespace(uuid=SimpleNamespace(bytes=UUID_BYTES), pci_domain_id=0, pci_bus_id=0x3B,
                                pci_device_id=0)
        nvml.props_asked: list[int] = []

        def get_device_properties(index):
            nvml.props_asked.append(index)
            return props

        monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)
        return nvml

    return install


def test_nvml_handle_is_found_by_uuid(fake_gpu):
    nvml = fake_gpu()
    util = NvmlUtilisation(1)  # torch's cuda:1 need not be NVML's GPU 1 under CUDA_VISIBLE_DEVICES
    assert util.handle == ("uuid", NVML_UUID)
    assert nvml.props_asked == [1]
    assert nvml.lookups == [("uuid", NVML_UUID)]


def test_nvml_handle_falls_back_to_the_pci_bus_id(fake_gpu):
    nvml = fake_gpu(uuid_ok=False)
    assert NvmlUtilisation(1).handle == ("pci", PCI_BUS_ID)
    assert nvml.lookups == [("uuid", NVML_UUID), ("pci", PCI_BUS_ID)]


def test_nvml_handle_falls_back_to_the_index_only_when_neither_works(fake_gpu):
    nvml = fake_gpu(uuid_ok=False, pci_ok=False)
    assert NvmlUtilisation(1).handle == ("index", 1)
    assert nvml.lookups == [("uuid", NVML_UUID), ("pci", PCI_BUS_ID), ("index", 1)]


def test_nvml_handle_without_device_properties_uses_the_index(fake_gpu, monkeypatch):
    nvml = fake_gpu()

    def no_properties(index):
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_properties)
    assert NvmlUtilisation(2).handle == ("index", 2)
    assert nvml.lookups == [("index", 2)]


def test_nvml_uuid_spelling():
    assert monitor.nvml_uuid(SimpleNamespace(uuid=SimpleNamespace(bytes=UUID_BYTES))) == NVML_UUID
    assert monitor.nvml_uuid(SimpleNamespace(uuid="00010203-0405-0607-0809-0a0b0c0d0e0f")) == NVML_UUID
    assert monitor.nvml_uuid(SimpleNamespace()) is None
    props = SimpleNamespace(pci_domain_id=1, pci_bus_id=0xA1, pci_device_id=3)
    assert monitor.nvml_pci_bus_id(props) == "00000001:A1:03.0"
    assert monitor.nvml_pci_bus_id(SimpleNamespace()) is None


def test_nvml_samples_from_before_the_call_are_ignored(fake_gpu):
    nvml = fake_gpu()
    pid = os.getpid()
    before = now_us()
    nvml.buffer = [SimpleNamespace(pid=pid, timeStamp=before - 2_000_000, smUtil=100),  # 2 s before the call
                   SimpleNamespace(pid=pid, timeStamp=before - 100_000, smUtil=90)]
    util = NvmlUtilisation(0)
    assert util.last_seen >= before
    time.sleep(0.002)
    now = now_us()
    nvml.buffer += [SimpleNamespace(pid=pid, timeStamp=now, smUtil=20),
                    SimpleNamespace(pid=pid + 1, timeStamp=now, smUtil=77),  # another process
                    SimpleNamespace(pid=pid, timeStamp=now + 1, smUtil=40)]
    util.sample()
    assert nvml.last_seen_args[0] >= before
    assert util.mean() == pytest.approx(30.0)
    util.sample()  # nothing new: NVML's NOT_FOUND is no sample, not an error
    assert util.mean() == pytest.approx(30.0)
    assert nvml.last_seen_args[1] == now + 1


def test_cost_monitor_on_a_faked_gpu_counts_only_samples_of_the_call(fake_gpu, monkeypatch):
    nvml = fake_gpu()
    nvml.buffer = [SimpleNamespace(pid=os.getpid(), timeStamp=now_us() - 500_000, smUtil=100)]
    nvml.live_util = 50
    for name in ("synchronize", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1024**3)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 1024**3)
    with CostMonitor(torch.device("cuda", 1), interval_s=0.05).measure() as cost:
        time.sleep(0.2)
    assert nvml.props_asked == [1]
    assert nvml.lookups == [("uuid", NVML_UUID)]
    assert cost.memory_gib == pytest.approx(2.0)
    assert cost.utilisation_pct == 50.0  # the sample of 100 % from before the call is not counted
    assert cost.notes == []
