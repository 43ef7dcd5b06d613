"""Tasks: prompt sets and reward functions.

* :mod:`tba_lab.tasks.arithmetic` -- the embedded synthetic GSM8K-format task.
* :mod:`tba_lab.tasks.gsm8k` -- answer extraction, exact-match reward, GSM8K loading.

Every task shares one prompt format (:func:`format_prompt`) so the SFT model, the searchers and
the evaluation see the same text.
"""
PROMPT_TEMPLATE = "Question: {question}\nAnswer:"


def format_prompt(question: str, template: str = PROMPT_TEMPLATE) -> str:
    """The prompt text for one question; the model continues with ``" <solution>\\n#### N"``."""
    return template.format(question=question)
