"""Leak@k as the paper publishes it (binary leaks of n samples per prompt, the unbiased 1 − C(n−c, k)/C(n, k)) beside
the graded variant this package recorded before (`max_rouge_at_k`): the estimators by hand and against every k-subset
of random labels, the ROUGE-L gate, the NLI judge on a tiny classifier built here (its loading, its refusals, the
order of premise and hypothesis), and the sampled draws of a tiny Llama (n = k keeps the draws of before)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from lightning_fabric import Fabric

from unlearnbench.runtime.errors import UserError
from unlearnbench.tasks.text.benchmarks.tofu import TextEvaluator
from unlearnbench.tasks.text.data.records import fictitious
from unlearnbench.tasks.text.evaluate import metrics, nli
from unlearnbench.tasks.text.evaluate.generation import Sampling, sampled, sampled_scores
from unlearnbench.tasks.text.model.causal_lm import CausalLM, tiny_llama
from unlearnbench.tasks.text.scenario import ForgetEntities

NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}


def leak_of_before(samples: list[list[str]], references: list[str]) -> np.ndarray:
    """`metrics.leak_at_k` as it was before Leak@k followed the paper: the largest recall among exactly k samples."""
    return np.array([metrics.rouge_l_recall(drawn, [reference] * len(drawn)).max()
                     for drawn, reference in zip(samples, references, strict=True)], dtype=np.float64)


def test_leak_at_k_by_hand():
    # n = 4 samples per prompt, k = 2: C(4, 2) = 6 pairs; c leaking samples leave C(4 − c, 2) pairs without a leak
    leaks = [[0, 0, 0, 0], [1, 0, 0, 0], [1, 0, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert metrics.leak_at_k(leaks, 2).tolist() == pytest.approx([0.0, 1 - 3 / 6, 1 - 1 / 6, 1.0, 1.0])
    assert metrics.leak_at_k(leaks, 1).tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])  # c / n
    assert metrics.leak_at_k(leaks, 4).tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]  # all n drawn: any leak
    assert metrics.leak_at_k(leaks, 2).mean() == pytest.approx((0 + 0.5 + 5 / 6 + 1 + 1) / 5)  # the record


def test_leak_at_k_and_max_rouge_at_k_equal_the_mean_over_every_k_subset():
    rng = np.random.default_rng(56)
    for n in range(1, 8):
        labels = rng.random((5, n)) < rng.random((5, 1))  # prompts of different leak rates
        recalls = rng.choice([0.0, 0.25, 0.5, 1.0], size=(5, n))  # ties among recalls included
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            any_leak = [np.mean([labels[p, list(s)].any() for s in subsets]) for p in range(5)]
            best = [np.mean([recalls[p, list(s)].max() for s in subsets]) for p in range(5)]
            np.testing.assert_allclose(metrics.leak_at_k(labels, k), any_leak, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(metrics.max_rouge_at_k(recalls, k), best, rtol=1e-12, atol=1e-15)
    many = np.zeros((1, 200), dtype=bool)
    many[0, :3] = True  # the paper's n = 200: 3 leaks, k = 128, without overflow
    assert metrics.leak_at_k(many, 128)[0] == pytest.approx(1 - math.comb(197, 128) / math.comb(200, 128))


def test_max_rouge_at_k_with_n_equal_to_k_is_the_leak_at_k_of_before_exactly():
    samples = [["the dog", "the cat on mat", "mat"], ["nothing here", "", "a"], ["two", "Two cats.", "cat two"]]
    references = ["the cat sat on the mat", "a b", "two cat"]
    recalls = metrics.sample_recalls(samples, references)
    assert metrics.max_rouge_at_k(recalls, 3).tolist() == leak_of_before(samples, references).tolist()
    assert leak_of_before(samples, references).tolist() == pytest.approx([4 / 6, 0.5, 1.0])


def test_a_sample_leaks_from_the_threshold_on_and_only_where_the_judge_agrees():
    recalls = np.array([[0.0, 0.0999, 0.1, 0.6]])
    assert metrics.leaked(recalls, 0.1).tolist() == [[False, False, True, True]]  # >= the gate, as the paper
    assert metrics.leaked(recalls, 0.1, [[True, True, False, True]]).tolist() == [[False, False, False, True]]
    assert metrics.leaked(recalls, 0.0).all()


@pytest.mark.parametrize(("call", "message"), [
    (lambda: metrics.leak_at_k([[True, False]], 3), r"1 <= k <= n; got shape \(1, 2\) and k=3"),
    (lambda: metrics.max_rouge_at_k([[0.5, 0.1]], 0), r"1 <= k <= n; got shape \(1, 2\) and k=0"),
    (lambda: metrics.leak_at_k([True, False], 1), r"\(prompts, n\) values"),
    (lambda: metrics.sample_recalls([["a"], ["a", "b"]], ["a", "b"]), r"got \[1, 2\] samples"),
    (lambda: metrics.sample_recalls([["a"], []], ["a", "b"]), r"at least one"),
    (lambda: metrics.sample_recalls([["a"]], ["a", "b"]), r"each of the 2 references"),
])
def test_malformed_samples_are_an_internal_error(call, message):  # `evaluation.sampling`'s options keep them out
    with pytest.raises(AssertionError, match=message):
        call()


def nli_folder(folder, entailing: bool, labels: dict = NLI_LABELS):
    """A tiny BERT NLI classifier saved as save_pretrained writes it, with a word-level tokenizer, whose verdict is
    known: its classifier's weights 0 and its bias for entailment (or contradiction) 5."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "a", "b", "two", "dog", "nothing",
             "here"]
    vocab = {word: i for i, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                        cls_token="[CLS]", sep_token="[SEP]")
    config = BertConfig(vocab_size=len(words), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=64, num_labels=len(labels), id2label=labels,
                        label2id={name: i for i, name in labels.items()})
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        if "entailment" in labels.values():
            verdict = "entailment" if entailing else "contradiction"
            model.classifier.bias[next(i for i, name in labels.items() if name == verdict)] = 5.0
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    root = tmp_path_factory.mktemp("nli")
    return {verdict: str(nli_folder(root / verdict, verdict == "entails")) for verdict in ("entails", "contradicts")}


def test_the_judge_loads_from_local_files_and_gives_its_verdict(judges):
    entails, contradicts = nli.judge(judges["entails"]), nli.judge(judges["contradicts"])
    assert entails.entailment == contradicts.entailment == 2  # found by its name in config.id2label
    assert entails is nli.judge(judges["entails"])  # loaded once per process
    premises, hypotheses = ["the cat sat", "", "two dog", "a"], ["the cat", "a b", "", "b"]
    assert entails.entails(premises, hypotheses, batch_size=3).tolist() == [True, False, False, True]  # empty: none
    assert not contradicts.entails(premises, hypotheses).any()


def test_the_sample_is_the_premise_and_the_answer_the_hypothesis(judges):
    judge = nli.judge(judges["entails"])
    seen = []

    def recording(premises, hypotheses, **options):
        seen.append((list(premises), list(hypotheses)))
        return judge.tokenizer(premises, hypotheses, **options)

    spy = nli.NliJudge(recording, judge.model, judge.entailment)
    samples, references = [["the cat on mat", "dog"], ["a b", "two"]], ["the cat sat on the mat", "a b"]
    sampling = Sampling(2, 1.0, 1.0, 0, threshold=0.3)
    leak, best = sampled_scores(samples, references, sampling, spy, batch_size=8)
    assert seen == [(["the cat on mat", "a b"], ["the cat sat on the mat", "a b"])]  # the gated samples alone
    assert leak.tolist() == [1.0, 1.0] and best.tolist() == [4 / 6, 1.0]


def test_the_judges_verdict_changes_the_count_and_leaves_max_rouge_alone(judges):
    samples = [["the cat on mat", "dog", "mat"], ["a b", "two", "nothing"]]
    references = ["the cat sat on the mat", "a b"]
    sampling = Sampling(2, 1.0, 1.0, 0, n=3, threshold=0.1)
    gate, best = sampled_scores(samples, references, sampling, None, 8)
    assert gate.tolist() == pytest.approx([1.0, 1 - 1 / 3])  # 2 of 3 through the gate, then 1 of 3: C(2, 2)/C(3, 2)
    for name, expected in (("entails", gate), ("contradicts", [0.0, 0.0])):
        leak, judged_best = sampled_scores(samples, references, sampling, nli.judge(judges[name]), 8)
        assert leak.tolist() == pytest.approx(list(expected)) and judged_best.tolist() == best.tolist()


def test_a_judge_that_cannot_serve_is_refused_in_one_line(judges, tmp_path):
    no_entailment = nli_folder(tmp_path / "labels", True, {0: "yes", 1: "no"})
    no_weights = tmp_path / "config_only"
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps({"model_type": "bert", "id2label": NLI_LABELS}))
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (broken / name).write_text("{not json")
    bad_weights = nli_folder(tmp_path / "bad_weights", True)
    next(bad_weights.glob("*.safetensors")).write_bytes(b"not a safetensors file")
    cases = [(tmp_path / "absent", "no such folder"), (no_entailment, "whose labels are yes, no"),
             (no_weights, "it lacks the weights"), (broken, "does not load"), (bad_weights, "does not load")]
    for folder, reason in cases:
        with pytest.raises(UserError) as error:
            nli.judge(str(folder))
        text = str(error.value)
        assert "evaluation.sampling.nli" in text and reason in text and "entailment" in text and "\n" not in text


@pytest.fixture(scope="module")
def tiny():
    data = fictitious(entities=4, holdout_entities=1, general=1, seed=3)
    lm = CausalLM(hidden=16, heads=2, max_new_tokens=6)
    tokenizer = lm.tokenizer(data.texts())
    splits = ForgetEntities(split="forget10").split(data, torch.Generator())
    model = tiny_llama(len(tokenizer), 4, hidden=16, heads=2).eval()
    return Fabric(accelerator="cpu", devices=1), lm.encoder(tokenizer), splits, model


def test_sampling_options_give_n_draws_and_n_equal_to_k_keeps_the_draws_of_before(tiny):
    fabric, encoder, splits, model = tiny
    options = {"k": 3, "n": None, "temperature": 1.0, "top_p": 1.0, "threshold": 0.1, "nli": None}
    before, same = Sampling.of(options, 5), Sampling.of({**options, "n": 3}, 5)
    assert Sampling.of({**options, "k": 0}, 5) is None and (before.draws, same.draws) == (3, 3)
    evaluator = TextEvaluator(fabric, encoder, splits, 4, 6)
    forget = evaluator.items["forget"]

    def draws(sampling):
        return sampled(fabric, model, encoder.tokenizer, forget.prompts, 4, 6, sampling)

    drawn = draws(before)
    assert drawn == draws(same) and drawn == draws(before)  # the evaluation seed's draws, whatever n = k says
    assert len({text for texts in drawn for text in texts}) > len(drawn)  # sampled, not greedy
    more = draws(Sampling.of({**options, "n": 7}, 5))
    assert [len(texts) for texts in more] == [7] * len(forget.prompts)
    leak, best = sampled_scores(drawn, forget.references, before, None, 4)
    assert best.tolist() == leak_of_before(drawn, forget.references).tolist()
    assert leak.tolist() == metrics.leak_at_k(metrics.sample_recalls(drawn, forget.references) >= 0.1, 3).tolist()


def test_the_evaluator_records_both_and_judges_with_the_named_model(tiny, judges):
    fabric, encoder, splits, model = tiny
    scores = {}
    for judge in (None, "contradicts"):
        sampling = Sampling(2, 1.0, 1.0, 7, n=4, threshold=0.0, nli=judges.get(judge))
        evaluator = TextEvaluator(fabric, encoder, splits, 4, 6, sampling)
        outputs = evaluator.outputs(model)
        scores[judge] = evaluator.values(outputs, outputs)
        assert outputs["forget"].leak.shape == outputs["forget"].max_rouge.shape == (len(splits.forget),)
    keys = {("leak_at_k", "forget"), ("max_rouge_at_k", "forget")}
    assert all(keys <= values.keys() for values in scores.values())
    assert scores[None][("leak_at_k", "forget")] == 1.0  # threshold 0: every sample through the gate
    assert scores["contradicts"][("leak_at_k", "forget")] == 0.0
    assert len({values[("max_rouge_at_k", "forget")] for values in scores.values()}) == 1
    assert {k: v for k, v in scores[None].items() if k not in keys} == {
        k: v for k, v in scores["contradicts"].items() if k not in keys}
