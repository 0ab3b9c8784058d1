"""MUSE's text handling (text/model/pretraining.py, text/benchmarks/muse.py) against re-implementations of
OpenUnlearning's loops, and ROUGE-L F1 (text/evaluate/metrics.py) on hand-computed examples."""

from __future__ import annotations

import pytest
from tokenizers import processors

from unlearnbench.tasks.text.benchmarks.muse import KNOWMEM_STOPS, cut_at_stops, decoded_stops, knowmem_prompt
from unlearnbench.tasks.text.evaluate.metrics import rouge_l_f1
from unlearnbench.tasks.text.model.encoding import IGNORE, train_tokenizer
from unlearnbench.tasks.text.model.pretraining import chunk_item, pretraining_chunks

TEXTS = ["Alma Verne founded the river guild in 1901 .", "The guild kept ledgers of every crossing .",
         "Its last ledger burned in 1950 ."]


def tokenizer_with_bos():
    """The built-in word-level tokenizer, made to put BOS first as Llama's does."""
    tokenizer = train_tokenizer(TEXTS)
    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.bos_token_id)])
    return tokenizer


def reference_chunks(tokenizer, texts, max_length):
    """OpenUnlearning's `PretrainingDataset._chunk_raw_text`, re-implemented from its description."""
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(ids[i * max_length:(i + 1) * max_length]) for i in range(len(ids) // max_length + 1)]


@pytest.mark.parametrize("max_length", [5, 7, 24])  # 24: the corpus's length, so the reference ends in an empty piece
def test_chunks_are_the_references_without_an_empty_last_piece(max_length):
    tokenizer = train_tokenizer(TEXTS)
    assert len(tokenizer("\n\n".join(TEXTS), add_special_tokens=False)["input_ids"]) == 24
    reference = reference_chunks(tokenizer, TEXTS, max_length)
    chunks = pretraining_chunks(tokenizer, TEXTS, max_length)
    assert chunks == [piece for piece in reference if piece]
    assert (reference[-1] == "") == (max_length == 24)


@pytest.mark.parametrize("with_bos", [False, True])
def test_a_chunk_item_labels_every_token_but_the_first_and_what_the_tokenizer_puts_first(with_bos):
    tokenizer = tokenizer_with_bos() if with_bos else train_tokenizer(TEXTS)
    item = chunk_item(tokenizer, TEXTS[1], max_length=4)
    words = tokenizer(TEXTS[1], add_special_tokens=False)["input_ids"]
    if with_bos:  # as preprocess_pretraining_instance: the prefix "" encodes to [BOS], 4 ids after it
        assert item["input_ids"] == [tokenizer.bos_token_id, *words[:4]]
        assert item["labels"] == [IGNORE, *words[:4]]
    else:  # the prefix encodes to nothing: 4 ids, the first unlabelled all the same
        assert item["input_ids"] == words[:4]
        assert item["labels"] == [IGNORE, *words[1:4]]


def test_the_knowmem_prompt_is_muses_character_for_character():
    shots = [{"question": "Who founded the guild?", "answer": "Alma Verne"},
             {"question": "When did the ledger burn?", "answer": "1950"}]
    assert knowmem_prompt(shots, "What did the guild keep?") == (
        "Question: Who founded the guild?\nAnswer: Alma Verne\n\n"
        "Question: When did the ledger burn?\nAnswer: 1950\n\n"
        "Question: What did the guild keep?\nAnswer: ")


def reference_cut(text: str, eos_text: str) -> str:
    """OpenUnlearning's loop in `eval_text_similarity`: split at each stop word in turn, keep the first part."""
    for word in [eos_text, *KNOWMEM_STOPS]:
        if word and word in text:
            text = text.split(word)[0]
    return text.strip()


@pytest.mark.parametrize("text", [" ledgers of every crossing\n\nQuestion: next", "1950 Question: When\nQuestion",
                                  "Alma\nQuestion: x\n\ny", "no stop at all  ", "\n\n", "a</s>b\n\nc", ""])
def test_an_answer_is_cut_as_the_reference_cuts_it(text):
    assert cut_at_stops(text, ("</s>", *KNOWMEM_STOPS)) == reference_cut(text, "</s>")


def metaspace_tokenizer():
    """A SentencePiece-like BPE tokenizer (a Metaspace pre-tokenizer, as Llama's marks word starts with "▁") that
    writes line breaks but reads "\\nQuestion" back as " \\nQuestion": the stop string is not what it decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    corpus = ["Question: Who founded the guild?\nAnswer: Alma Verne\n\nQuestion: When?\nAnswer: 1950",
              "Paris. A Question of taste.", "next"]
    backend.train_from_iterator(corpus * 4, trainers.BpeTrainer(special_tokens=["<pad>", "<unk>", "<s>", "</s>"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


def test_a_knowmem_answer_is_cut_at_the_line_break_before_question_never_at_a_bare_question():
    """MUSE (swj0419/muse_bench metrics/knowmem.py) and OpenUnlearning (eval_text_similarity) cut the decoded text
    at "\\nQuestion" itself: an answer holding the word "Question" keeps it, whatever the tokenizer."""
    tokenizer = metaspace_tokenizer()
    read_back = lambda text: tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert read_back("\nQuestion") == " \nQuestion" != "\nQuestion"
    stops = decoded_stops(tokenizer)
    generated = read_back("Paris. A Question of taste.\nQuestion: next")
    assert cut_at_stops(generated, stops) == "Paris. A Question of taste."
    assert cut_at_stops("A Question of taste. Question of", stops) == "A Question of taste. Question of"
    assert cut_at_stops("1950\nQuestion", stops) == cut_at_stops("1950\n\nQuestion: When?", stops) == "1950"
    assert cut_at_stops("a Question: b", stops) == "a"  # "Question:" is a stop of its own


def test_a_tokenizer_that_writes_no_line_break_keeps_its_reading_of_the_stops():
    """The built-in word-level tokenizer has no line break: "\\nQuestion" is written "Question" and "Question:"
    "Question :" in its text, the only forms the stops take there (the built-in presets' cuts)."""
    assert decoded_stops(train_tokenizer([*TEXTS, "Question: Answer:"])) == (
        *KNOWMEM_STOPS, "Question", "Question :")


def test_rouge_l_f1_by_hand():
    # LCS of the words: the, cat, on, mat (4 of 6 each way): precision = recall = F1 = 4/6
    assert rouge_l_f1(["the cat lay on a mat"], ["the cat sat on the mat"]) == pytest.approx([4 / 6])
    # Porter stems and lower case: "Cats sitting" and "cat sits" are the same two words
    assert rouge_l_f1(["Cats sitting", "unrelated"], ["cat sits", "cat sits"]).tolist() == [1.0, 0.0]
    # precision 1 (both words of the generation), recall 2/4: F1 = 2·1·0.5 / 1.5
    assert rouge_l_f1(["guild ledger"], ["the guild ledger burned"]) == pytest.approx([2 / 3])
    with pytest.raises(AssertionError, match="2 generations for 1 references"):
        rouge_l_f1(["a", "b"], ["a"])
