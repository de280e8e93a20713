"""Open-domain question answering with In-Context RALM (the paper's §7): passages in the prompt, greedy answers,
exact match. One module per job: ``questions`` (reading and checking them), ``prompts`` (the passages a question
gets and the paper's prompts), ``exact_match`` (SQuAD's normalization, ``has_answer``, the metric's score),
``answerer`` (greedy answers in batches), ``records`` (one record per question, the figures), ``gold_corpus`` (the
questions' gold passages as a corpus) and ``run`` (``evaluate_qa``: the resumable, sharded run, its identity and
its output folder). The names below are the package's public face.

Examples:
    >>> from hf_ralm.evaluation.qa import build_qa_prompt, exact_match
    >>> build_qa_prompt("what is the capital of France")
    'Answer these questions:\\nQ: what is the capital of France?\\nA:'
    >>> exact_match("The Shakespeare.", ["shakespeare"])
    True
"""

from .answerer import MAX_NEW_TOKENS
from .exact_match import check_exact_match_inputs, exact_match, exact_match_score, has_answer, normalize_answer
from .gold_corpus import GOLD_CORPUS_FILE, write_gold_corpus
from .prompts import (
    CLOSED_BOOK_PROMPT,
    build_qa_prompt,
    default_num_docs,
    find_passages,
    first_line,
    format_passages,
    normalize_question,
)
from .questions import load_questions
from .records import QARecord, qa_figures, qa_record
from .run import EVAL_FILE, PREDICTIONS_FILE, check_qa_output_dir, evaluate_qa, qa_run_settings

__all__ = [
    "CLOSED_BOOK_PROMPT",
    "EVAL_FILE",
    "GOLD_CORPUS_FILE",
    "MAX_NEW_TOKENS",
    "PREDICTIONS_FILE",
    "QARecord",
    "build_qa_prompt",
    "check_exact_match_inputs",
    "check_qa_output_dir",
    "default_num_docs",
    "evaluate_qa",
    "exact_match",
    "exact_match_score",
    "find_passages",
    "first_line",
    "format_passages",
    "has_answer",
    "load_questions",
    "normalize_answer",
    "normalize_question",
    "qa_figures",
    "qa_record",
    "qa_run_settings",
    "write_gold_corpus",
]
