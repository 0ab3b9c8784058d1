"""Each text method's step loss, as its YAML configures it, on a fixed forget and retain batch, against γ·L_forget +
α·L_retain written here from the formulas of OpenUnlearning's trainers (plain torch over whole distributions, no
call into unlearnbench.tasks.text.model.losses): the wiring of terms, signs, coefficients and reference model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import compose_config
from omegaconf import OmegaConf
from tiny import tiny_setting

from unlearnbench.core.components import build
from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.monitor import Cost
from unlearnbench.runtime.seeding import streams
from unlearnbench.tasks.text.methods.base import TextTask
from unlearnbench.tasks.text.model.encoding import IGNORE

TEXT_METHODS = ["grad_ascent", "grad_diff", "npo", "simnpo", "idk_dpo", "rmu", "undial", "wga", "satimp", "ceu", "pdu",
                "altpo"]


@pytest.fixture(scope="module")
def setting():
    return tiny_setting()


def method(name: str, *overrides: str):
    config = compose_config(["experiment=tofu", f"+method={name}", *overrides])
    return build(OmegaConf.to_container(config.method, resolve=True), "method")


def task_of(setting, name: str) -> TextTask:
    fabric, encoder, splits, forget, retain, _, reference, _, _ = setting
    return TextTask(fabric, encoder, splits, forget, retain, streams("method", 0, name), None,
                    original=lambda: reference, retrained=reference, retrained_cost=Cost())


def logits(model, batch):
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()


def nll(model, batch):
    """Per sequence: the summed NLL of the labelled next tokens, and their count."""
    logp = torch.log_softmax(logits(model, batch)[:, :-1], -1)
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE
    picked = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    return -(picked * mask).sum(1), mask.sum(1)


def token_nlls(model, batch, labels=None):
    """Per labelled next token of the batch, flattened: its NLL (with gradient)."""
    labels = (batch["labels"] if labels is None else labels)[:, 1:]
    logp = torch.log_softmax(logits(model, batch)[:, :-1], -1)
    return -logp[labels != IGNORE].gather(-1, labels[labels != IGNORE][:, None])[:, 0]


def mean_nll(model, batch):
    total, count = nll(model, batch)
    return total.sum() / count.sum()


def expected(name: str, model, reference, forget, retain, extra=None):
    """γ·L_forget + α·L_retain of the method with its YAML's defaults."""
    with torch.no_grad():
        ref_f, _ = nll(reference, forget)
    if name == "grad_ascent":
        return -mean_nll(model, forget)
    retain_nll = mean_nll(model, retain)
    if name == "grad_diff":
        return -mean_nll(model, forget) + retain_nll
    if name == "npo":
        theta, _ = nll(model, forget)
        return -(2 / 0.1) * F.logsigmoid(-0.1 * (ref_f - theta)).mean() + retain_nll
    if name == "simnpo":
        theta, count = nll(model, forget)
        return 0.125 * -(2 / 4.5) * F.logsigmoid(4.5 * theta / count).mean() + retain_nll
    if name in ("idk_dpo", "altpo"):  # DPO: the preferred answer ("I don't know", or M_o's alternate) over the true
        idk = extra
        theta_w, _ = nll(model, idk)
        with torch.no_grad():
            ref_w, _ = nll(reference, idk)
        theta_l, _ = nll(model, forget)
        margin = (ref_w - theta_w) - (ref_f - theta_l)
        return -(2 / 0.1) * F.logsigmoid(0.1 * margin).mean() + retain_nll
    if name == "undial":
        z, z_ref = logits(model, forget)[:, :-1], logits(reference, forget)[:, :-1].detach()
        labels = forget["labels"][:, 1:]
        lowered = z_ref.clone()
        for b, t in (labels != IGNORE).nonzero().tolist():
            lowered[b, t, labels[b, t]] -= 10.0
        return -(torch.softmax(lowered, -1) * torch.log_softmax(z, -1)).sum(-1).mean()
    if name == "wga":  # p^1, γ = α = 1
        ell = token_nlls(model, forget)
        return -(torch.exp(-ell).detach() * ell).mean() + retain_nll
    if name in ("satimp", "satimp_authors"):  # p^5 (1 − p)^1; γ = 0.1, α = 1 (SatImp.yaml) or γ = 1, α = 0.1
        ell = token_nlls(model, forget)
        p = torch.exp(-ell).detach()
        gamma, alpha = (0.1, 1.0) if name == "satimp" else (1.0, 0.1)
        return gamma * -(p ** 5 * (1 - p) * ell).mean() + alpha * retain_nll
    if name == "ceu":  # the first answer token of each sequence left out; q: softmax without the true token
        labels = forget["labels"].clone()
        for row in range(labels.shape[0]):
            labels[row, (labels[row] != IGNORE).nonzero()[0, 0]] = IGNORE
        z, shifted = logits(model, forget)[:, :-1], labels[:, 1:]
        chosen, targets = z[shifted != IGNORE], shifted[shifted != IGNORE]
        q = torch.softmax(chosen.detach().scatter(-1, targets[:, None], -torch.inf), -1)
        return -(q * torch.log_softmax(chosen, -1)).sum(-1).mean()
    if name.startswith("pdu"):  # margin + λ(L_r − ε), λ = α at the start
        z, answer = logits(model, forget), forget["labels"] != IGNORE
        margin = ((z.max(-1).values - z.mean(-1)) ** 2)[answer].mean()
        if name == "pdu_unlearnbench":  # α = 1, ε = 2 × the model's NLL over the retain set
            with torch.no_grad():
                eps = 2 * mean_nll(model, extra)
            return margin + (retain_nll - eps)
        alpha = 100.0 if name == "pdu_authors" else 1.0  # run.sh's pref 100; PDU.yaml's α 1; both ε = 0.3 (run.sh)
        return margin + alpha * (retain_nll - 0.3)
    raise AssertionError(name)


VARIANTS = {"satimp_authors": ("satimp", "authors"), "pdu_authors": ("pdu", "authors"),
            "pdu_unlearnbench": ("pdu", "unlearnbench")}


@pytest.mark.parametrize("name", [m for m in TEXT_METHODS if m != "rmu"] + list(VARIANTS))
def test_each_methods_step_loss_is_its_formula(setting, name, monkeypatch):
    _, encoder, splits, _, _, model, reference, forget, retain = setting
    chosen = method(*(VARIANTS[name][0], f"method.variant={VARIANTS[name][1]}") if name in VARIANTS else (name,))
    task = task_of(setting, name)
    extra = None
    if name == "idk_dpo":  # one "I don't know" answer, so that the draw does not matter
        monkeypatch.setattr("unlearnbench.tasks.text.methods.idk_dpo.IDK_ANSWERS", ("I don't know.",))
        chosen.prepare(model, reference, task)
        from unlearnbench.tasks.text.model.encoding import collate
        extra = collate([encoder.item(splits.forget[row]["question"], "I don't know.")
                         for row in forget["row"].tolist()], encoder.pad_id)
    elif name == "altpo":  # the alternate each forget example draws (`draw` mod the number of its alternates)
        chosen.prepare(model, reference, task)
        from unlearnbench.tasks.text.model.encoding import collate
        extra = collate([encoder.item(splits.forget[row]["question"], chosen.alternates[row][draw % 5])
                         for row, draw in zip(forget["row"].tolist(), forget["draw"].tolist(), strict=True)],
                        encoder.pad_id)
    else:
        chosen.prepare(model, reference, task)
        if name == "pdu_unlearnbench":
            extra = task.retain.rows(torch.arange(len(task.retain)))
    got = chosen.loss(model, reference, forget, retain, task)
    assert got.item() == pytest.approx(expected(name, model, reference, forget, retain, extra).item(), rel=1e-5)
    assert got.requires_grad


def test_grad_diffs_kl_retain_term_is_the_kl_from_the_reference_at_every_position(setting):
    *_, model, reference, forget, retain = setting
    chosen = method("grad_diff", "method.retain_loss=kl")
    assert chosen.needs_reference() and not method("grad_diff").needs_reference()
    p_ref = torch.softmax(logits(reference, retain), -1).detach()
    kl = (p_ref * (p_ref.log() - torch.log_softmax(logits(model, retain), -1))).sum(-1).mean()
    got = chosen.loss(model, reference, forget, retain, task_of(setting, "grad_diff"))
    assert got.item() == pytest.approx((-mean_nll(model, forget) + kl).item(), rel=1e-5)


def test_rmu_steers_one_layers_output_to_a_seeded_direction_and_keeps_the_retain_activations(setting):
    *_, model, reference, forget, retain = setting
    chosen, task = method("rmu"), task_of(setting, "rmu")
    chosen.prepare(model, reference, task)
    try:
        got = chosen.loss(model, reference, forget, retain, task)
    finally:
        chosen.hidden.handle.remove()
        chosen.reference_hidden.handle.remove()
    # layer null → (2 − 1) // 2 = 0: hidden_states[1] is the first decoder layer's output
    direction = torch.rand(1, 1, 16, generator=streams("method", 0, "rmu").torch)
    target = 2.0 * direction / direction.norm()

    def distance(h, goal, labels):
        answer = (labels != IGNORE).float()
        return (((h - goal) ** 2).mean(-1) * answer).sum(1).div(answer.sum(1)).mean()

    def layer(m, batch):
        return m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 output_hidden_states=True).hidden_states[1]

    want = distance(layer(model, forget), target, forget["labels"]) + distance(
        layer(model, retain), layer(reference, retain).detach(), retain["labels"])
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    with pytest.raises(UserError, match="layer=5 is not valid; valid: 0 to 1"):
        method("rmu", "method.layer=5").prepare(model, reference, task)


def test_the_retain_draw_and_the_order_come_from_the_unlearning_seed(setting):
    task = task_of(setting, "npo")
    again, other = task_of(setting, "npo"), TextTask(*[getattr(task, f) for f in ("fabric", "encoder", "splits",
                                                                                     "forget", "retain")],
                                                      streams("method", 1, "npo"), None, task.original,
                                                      task.retrained, task.retrained_cost)
    rows = [[(f["row"].tolist(), r["row"].tolist()) for f, r in t.pairs(2)] for t in (task, again, other)]
    assert rows[0] == rows[1] and rows[0] != rows[2]
    forget_rows = sorted(row for f, _ in rows[0] for row in f)
    assert forget_rows == list(range(len(task.forget)))  # one epoch: every forget example once


def test_every_text_method_is_one_of_the_task_and_refuses_an_image_dataset():
    config = compose_config(["experiment=tofu", "+method=ssd"])
    from unlearnbench.core.job import plan_job

    with pytest.raises(UserError, match="method ssd serves the image task, but dataset fictitious "
                                        "is of the text task"):
        plan_job(config, None)
    with pytest.raises(UserError, match="method npo serves the text task, but dataset digits is of "
                                        "the image task"):
        plan_job(compose_config(["+method=npo"]), None)


@pytest.mark.parametrize("upon", ["step", "epoch"])
def test_pdus_dual_variable_moves_with_the_retain_loss_only_after_its_warm_up(setting, upon):
    """λ ← max(0, λ + η(L_r − ε)): not before `dual_warmup_epochs` epochs; then after every step with that step's
    retain loss, or at each epoch's end with the mean over a pass of drawn retain batches."""
    _, _, _, _, _, model, reference, forget, retain = setting
    chosen = method("pdu", "method.retain_loss_eps=0.5", "method.dual_step_size=2.0", "method.dual_warmup_epochs=1",
                    f"method.dual_update_upon={upon}")
    task = task_of(setting, "pdu")
    chosen.prepare(model, reference, task)
    assert (chosen.dual, chosen.eps) == (1.0, 0.5)
    with torch.no_grad():
        chosen.loss(model, reference, forget, retain, task)
        assert chosen.dual == 1.0  # within the warm-up
        drawn = [mean_nll(model, r).item() for _, r in task_of(setting, "pdu").pairs(chosen.batch_size)]
        chosen.end_epoch(model, reference, task)  # the warm-up's end: updates on (in epoch mode, one now)
        after_epoch = chosen.dual
        chosen.loss(model, reference, forget, retain, task)
    if upon == "step":
        assert after_epoch == 1.0
        assert chosen.dual == pytest.approx(max(0.0, 1.0 + 2.0 * (mean_nll(model, retain).item() - 0.5)), rel=1e-6)
    else:  # the same stream as the method's: the same retain draws
        assert after_epoch == pytest.approx(max(0.0, 1.0 + 2.0 * (np.mean(drawn) - 0.5)), rel=1e-5)
        assert chosen.dual == after_epoch  # no step updates
    assert chosen.dual >= 0.0


def test_altpos_alternates_are_m_os_samples_drawn_from_the_unlearning_seed(setting):
    """`repeats` sampled answers per forget question from the model it starts from, the same for the same unlearning
    seed, others for another."""
    _, _, splits, _, _, model, _, _, _ = setting
    chosen = method("altpo", "method.repeats=3")
    runs = {}
    for seed in (0, 0, 1):
        task = task_of(setting, "altpo")
        task.rng = streams("method", seed, "altpo")
        runs.setdefault(seed, []).append(chosen.alternates_of(model, task))
    first = runs[0][0]
    assert len(first) == len(splits.forget) and all(len(drawn) == 3 for drawn in first)
    assert runs[0][1] == first and runs[1][0] != first
    assert len({text for drawn in first for text in drawn}) > 1  # sampled, not one greedy answer


def test_a_steps_micro_batches_are_cut_from_the_same_draws_as_the_whole_batch(setting):
    """`accumulation` cuts each global batch into micro-batches of ⌈batch_size / accumulation⌉ rows: the same forget
    rows, retain draws and per-example draws as the uncut batch, in order (the last batch of the epoch into fewer)."""
    whole = [(f["row"].tolist(), f["draw"].tolist(), r["row"].tolist()) for f, r in task_of(setting, "npo").pairs(3)]
    cut = list(task_of(setting, "npo").steps(3, 2))
    assert len(setting[3]) == 10  # 10 forget examples: batches of 3, 3, 3, 1
    assert [[len(f["row"]) for f, _ in micro] for micro in cut] == [[2, 1], [2, 1], [2, 1], [1]]
    for (rows, draws, retained), micro in zip(whole, cut, strict=True):
        assert torch.cat([f["row"] for f, _ in micro]).tolist() == rows
        assert torch.cat([f["draw"] for f, _ in micro]).tolist() == draws
        assert torch.cat([r["row"] for _, r in micro]).tolist() == retained


def test_an_accumulated_step_follows_the_mean_of_its_micro_batches_losses(monkeypatch):
    """Each micro-batch's loss back-propagated in turn at 1/n: the update is the gradient of their mean (the HF
    Trainer's accumulation); a non-finite micro-batch stops the step before any update; DeepSpeed's engine, which
    counts its own accumulation, is refused in one line."""
    from lightning_fabric import Fabric

    from unlearnbench.runtime.train import NonFiniteStep
    from unlearnbench.tasks.text.model.train import accumulated_step

    fabric = Fabric(accelerator="cpu", devices=1)
    weight = torch.nn.Parameter(torch.tensor([0.1, -0.2]))
    module = torch.nn.Module()
    module.weight = weight
    model, optimizer = fabric.setup(module, torch.optim.SGD([weight], lr=1.0))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    inputs = [torch.tensor([0.3, 0.1]), torch.tensor([-0.1, 0.2]), torch.tensor([0.2, 0.2])]
    accumulated_step(fabric, model, optimizer, schedule, [lambda x=x: (weight * x).sum() ** 2 for x in inputs])
    start = torch.tensor([0.1, -0.2])
    gradient = sum(2 * (start * x).sum() * x for x in inputs) / 3  # of the mean of the three losses (norm < 1)
    assert torch.allclose(weight.detach(), start - gradient, atol=1e-7)
    before = weight.detach().clone()
    with pytest.raises(NonFiniteStep):
        accumulated_step(fabric, model, optimizer, schedule,
                         [lambda: (weight * 0).sum(), lambda: weight.sum() * torch.nan])
    assert torch.equal(weight.detach(), before)
    monkeypatch.setattr("unlearnbench.tasks.text.model.train.engine_clips", lambda fabric: True)
    with pytest.raises(UserError, match=r"gradient accumulation \(2 micro-batches a step\) does not run under "
                                        r"DeepSpeed .*; set train.unlearn.accumulation=1"):
        accumulated_step(fabric, model, optimizer, schedule, [lambda: weight.sum(), lambda: weight.sum()])


def test_the_unlearning_schedules_linear_as_before_and_constant():
    """`linear` counted in steps is the recipe's epoch-counted schedule exactly (the records do not move); `constant`
    keeps the full rate after its warm-up (none: the HF Trainer's `constant`); a `max_steps` run decays to 0 at its
    last step."""
    from unlearnbench.runtime.train import recipe_schedule
    from unlearnbench.tasks.text.model.train import learning_rate_schedule

    def factors(schedule, steps):
        return [schedule.lr_lambdas[0](step) for step in range(steps)]

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for warmup in (0.0, 1.0, 0.5):
        assert factors(learning_rate_schedule(optimizer, 7, warmup, 70), 70) == factors(
            recipe_schedule(optimizer, 7, warmup, [], 1.0, "linear", 10), 70)
    assert factors(learning_rate_schedule(optimizer, 7, 0.0, 80, "constant"), 80) == [1.0] * 80
    warm = factors(learning_rate_schedule(optimizer, 4, 1.0, 80, "constant"), 80)
    assert warm[:4] == [0.25, 0.5, 0.75, 1.0] and warm[4:] == [1.0] * 76
    decay = factors(learning_rate_schedule(optimizer, 7, 0.0, 80), 81)
    assert decay[0] == 1.0 and decay[79] == pytest.approx(1 / 80) and decay[80] == 0.0


def test_the_jobs_unlearning_loop_replaces_the_methods_own_max_steps_ending_it(setting, monkeypatch):
    """`train.unlearn` over the method's options: 5 optimiser steps of 4 rows in micro-batches of 2 at a constant
    rate, across the epoch boundary (10 forget examples: 3 steps an epoch, the last of one micro-batch), as the
    Trainer's `max_steps` runs."""
    from types import SimpleNamespace

    from unlearnbench.tasks.text.methods import base

    steps, ends = [], []
    real = base.accumulated_step

    def counted(fabric, model, optimizer, schedule, losses):
        steps.append((len(losses), optimizer.param_groups[0]["lr"]))
        real(fabric, model, optimizer, schedule, losses)

    monkeypatch.setattr(base, "accumulated_step", counted)
    chosen = method("grad_diff")
    monkeypatch.setattr(chosen, "end_epoch", lambda *args: ends.append(len(steps)))
    task = task_of(setting, "grad_diff")
    task.recipe = SimpleNamespace(lr=1.0, unlearn={"max_steps": 5, "batch_size": 4, "accumulation": 2, "lr": 1e-3,
                                                    "schedule": "constant", "warmup_epochs": 0.0, "epochs": None})
    chosen.unlearn(copy_of(setting[5]), task)
    assert steps == [(2, 1e-3), (2, 1e-3), (1, 1e-3), (2, 1e-3), (2, 1e-3)]  # batches of 4, 4, 2 an epoch
    assert ends == [3, 5]  # the end of the first epoch, and of the cut second one
    assert (chosen.max_steps, chosen.batch_size, chosen.epochs) == (5, 4, 10)  # null keeps the method's own


def copy_of(model):
    import copy

    return copy.deepcopy(model)


def test_rmu_steers_the_references_layer_7_of_a_large_model_and_the_middle_of_a_small_one(setting):
    """`layer: null`: layer 7 (OpenUnlearning's RMU.yaml and WMDP's rmu/unlearn.py) on a 32-layer Llama, where it was
    (L − 1) // 2 = 15; the middle of a model of 7 layers or fewer (the CPU model's layer 0, as before). With
    `trainable: wmdp`, only layers 5, 6 and 7's MLP down-projections train (WMDP's `--layer_ids 5,6,7`)."""
    from unlearnbench.tasks.text.methods.rmu import decoder_layers, steered_layer
    from unlearnbench.tasks.text.model.causal_lm import tiny_llama

    assert [steered_layer(None, count) for count in (1, 2, 7, 8, 16, 32)] == [0, 0, 3, 7, 7, 7]
    assert steered_layer(3, 32) == 3
    encoder = setting[1]
    large = tiny_llama(len(encoder.tokenizer), 0, layers=32, hidden=8, heads=2)
    chosen, task = method("rmu", "method.trainable=wmdp"), task_of(setting, "rmu")
    chosen.prepare(large, large, task)
    try:
        layers = decoder_layers(large)
        assert [i for i, layer in enumerate(layers) if chosen.hidden.handle.id in layer._forward_hooks] == [7]
    finally:
        chosen.hidden.handle.remove()
        chosen.reference_hidden.handle.remove()
    chosen.parameters(large)
    assert [n for n, p in large.named_parameters() if p.requires_grad] == [
        f"model.layers.{i}.mlp.down_proj.weight" for i in (5, 6, 7)]


class CharTokenizer:
    """A tokenizer of one id per character, without BOS: the prompt's text reads back exactly."""

    bos_token_id = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def test_altpos_default_asks_m_o_for_a_rewrite_as_openunlearnings_generate_py(setting):
    """`variant: openunlearning` continues the reference's rewrite request (question, true answer, its instruction,
    the reply begun with "Alternate Answer :") in the model's tags, and cuts each sample at generate.yaml's stop
    strings; `own_samples` continues the question's own prompt."""
    from unlearnbench.tasks.text.methods.altpo import cut, rewrite_prompt
    from unlearnbench.tasks.text.model.causal_lm import Encoder
    from unlearnbench.tasks.text.model.encoding import Template

    encoder = Encoder(CharTokenizer(), Template("Question: ", "\n", "Answer: "), 512)
    text = "".join(map(chr, rewrite_prompt(encoder, "Who wrote it?", "Ann Lee.")))
    assert text.startswith("Question: Question: Who wrote it?\nAnswer: Ann Lee.\nNow pretend you are making things "
                           "up. Write another answer to the question that is of a different template than the given "
                           "answer and changes all facts")
    assert text.endswith("only introduces changes to all the facts introduced answer.\nAnswer: Alternate Answer :")
    assert [cut(s) for s in (" Bo Day wrote it.\nQuestion: next", "Cy Ray. Q: more", "  plain  ")] == [
        "Bo Day wrote it.", "Cy Ray.", "plain"]
    _, real_encoder, splits, *_ = setting
    task = task_of(setting, "altpo")
    default, own = method("altpo"), method("altpo", "method.variant=own_samples")
    assert default.variant == "openunlearning"
    assert own.prompts(task) == [real_encoder.prompt(r["question"]) for r in splits.forget]
    assert default.prompts(task) == [rewrite_prompt(real_encoder, r["question"], r["answer"]) for r in splits.forget]
