"""How the model under test is asked: the record's context goes into the prompt (RAG-style), per task type."""

from __future__ import annotations

PROMPT_VERSION = 1  # bump when a template changes, so a resumed run never mixes answers to different prompts

QA = ("Answer the question in one or two sentences, using only the information in the context.\n\n"
      "Context:\n{context}\n\nQuestion: {question}\nAnswer:")
SUMMARY = ("Summarize the following text in a few sentences, using only the information it contains.\n\n"
           "Text:\n{context}\n\nSummary:")
DATA2TXT = ("Write an objective overview of the following structured data in a few sentences, using only the "
            "information it contains.\n\nData:\n{context}\n\nOverview:")
NO_CONTEXT = "Answer the question in one or two sentences.\n\nQuestion: {question}\nAnswer:"


def build_prompt(context: str, question: str | None, task_type: str | None, template: str | None = None) -> str:
    """A custom `template` may use {context} and {question}; otherwise the template follows the task type."""
    if template:
        return template.replace("{context}", context or "").replace("{question}", question or "")
    if not (context or "").strip():
        return NO_CONTEXT.format(question=question or "")
    if question:
        return QA.replace("{context}", context).replace("{question}", question)
    return (DATA2TXT if task_type == "Data2txt" else SUMMARY).replace("{context}", context)
