"""The fixed extractor omega and its strict, permissive and maximal variants (paper 000 App. B).

Multiple choice: six answer positions, tried in order; the first position that occurs anywhere in
the response decides, and its last occurrence is read. Only the item's own option letters count, and
a letter followed directly by another letter is not read ("the answer is Because" gives nothing).
Positions 3, 4 and 6 ignore case. Free form: the last balanced ``\\boxed{}`` (an enclosing
``\\text{}`` removed), else the text after the last "the answer is" / "final answer is" up to the next
period or line end, else the text after the last "answer:". Answers are compared after a light
normalisation (dollar signs, spaces, a final period, a percent sign and thousands separators removed;
numbers compared as numbers). Pure functions over regular expressions: model text is never evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

VARIANTS = ("strict", "omega", "permissive", "maximal")
LETTERS = "ABCDEFGHIJ"
_NOT_A_WORD = r"(?![A-Za-z])"  # a letter followed directly by another letter is not read


def option_letters(n_options: int) -> str:
    if not 2 <= n_options <= 10:
        raise ValueError(f"n_options={n_options}: multiple-choice items have 2 to 10 options (A to J)")
    return LETTERS[:n_options]


def _positions(letters: str) -> list[re.Pattern[str]]:
    L = f"[{letters}]"
    ci = re.IGNORECASE
    return [
        # 1. a letter alone inside \boxed{}: \boxed{B}, \boxed{(B)}
        re.compile(rf"\\boxed\s*\{{\s*\(?({L})\)?\s*\}}"),
        # 2. a letter inside \boxed{\text{}}
        re.compile(rf"\\boxed\s*\{{\s*\\text\s*\{{\s*\(?({L})\)?\s*\}}\s*\}}"),
        # 3. after "answer is" / "the answer is" / "the correct answer is", colon, bold marks, parentheses optional
        re.compile(rf"answer\s+is\s*:?\s*(?:\*\*)?\s*\(?({L}){_NOT_A_WORD}", ci),
        # 4. after "Answer:"
        re.compile(rf"answer\s*:\s*(?:\*\*)?\s*\(?({L}){_NOT_A_WORD}", ci),
        # 5. a line that holds only the letter: B, (B), B., B)
        re.compile(rf"^[ \t]*(?:\(({L})\)|({L})[.)]?)[ \t]*\r?$", re.MULTILINE),  # CRLF line ends too
        # 6. after "option" or "choice"
        re.compile(rf"(?:option|choice)\s*:?\s*\(?({L}){_NOT_A_WORD}", ci),
    ]


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    hits = [next(g for g in m.groups() if g) for m in pattern.finditer(text)]
    return hits[-1].upper() if hits else None


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` (None if there is none): the panel's own box scan."""
    from crossed_rlvr.rewards.text import box_spans

    spans = box_spans(text)
    return text[spans[-1][0]:spans[-1][1]] if spans else None


def strip_text(content: str) -> str:
    """``\\text{X}`` enclosing the whole content becomes X."""
    m = re.fullmatch(r"\s*\\text\s*\{(.*)\}\s*", content, re.DOTALL)
    return m.group(1) if m else content


def mc(text: str, n_options: int, variant: str = "omega") -> str | None:
    """The option letter a response commits to under ``variant``, or None."""
    letters = option_letters(n_options)
    if variant == "strict":  # only the last \boxed{}
        box = last_boxed(text)
        if box is None:
            return None
        m = re.fullmatch(rf"\s*\(?([{letters}])\)?\s*", strip_text(box))
        return m.group(1) if m else None
    for pattern in _positions(letters):
        found = _last(pattern, text)
        if found is not None:
            return found
    if variant == "omega":
        return None
    # permissive: looser cues that need not stand alone, then a letter at the very end of the response
    loose = _last(re.compile(rf"answer\s*(?:is|:|=)\s*:?\s*(?:\*\*)?\s*\(?([{letters}])", re.IGNORECASE), text)
    if loose is not None:
        return loose
    m = re.search(rf"\(?([{letters}])\)?[.\s*]*$", text)
    if m and (m.start(1) == 0 or not text[m.start(1) - 1].isalpha()):
        return m.group(1)
    if variant == "permissive":
        return None
    # maximal: the last option letter anywhere, as a word of its own
    return _last(re.compile(rf"\b([{letters}])\b"), text)


# "up to the next period or line end": the cue's answer never continues on the next line
_ANSWER_IS = re.compile(r"(?:the answer is|final answer is)[ \t]*:?[ \t]*(.*?)(?:\.(?!\d)|\r?\n|$)", re.IGNORECASE)
_ANSWER_COLON = re.compile(r"answer:[ \t]*(.*?)(?:\r?\n|$)", re.IGNORECASE)
_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?")  # "numbers compared as numbers": decimals, not 1e3 or inf
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def free(text: str, variant: str = "omega") -> str | None:
    """The free-form answer a response commits to under ``variant``, or None."""
    box = last_boxed(text)
    if box is not None:
        return strip_text(box).strip()
    if variant == "strict":
        return None
    for pattern in (_ANSWER_IS, _ANSWER_COLON):
        hits = [m.group(1).strip() for m in pattern.finditer(text)]
        hits = [h for h in hits if h]
        if hits:
            return hits[-1]
    if variant in ("permissive", "maximal"):
        nums = _NUMBER.findall(text)
        return nums[-1] if nums else None
    return None


def normalize(answer: str) -> str:
    """Dollar signs, spaces, a final period, a percent sign and thousands separators removed."""
    a = answer.replace("\\$", "").replace("$", "").replace(" ", "").replace("%", "")  # \$ is a dollar sign too
    a = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", a)
    return a.removesuffix(".")


def same(answer: str | None, key: str) -> bool:
    """Whether a free-form answer equals the key after normalisation (numbers compared as numbers)."""
    if answer is None:
        return False
    a, k = normalize(answer), normalize(key)
    if a == k:
        return True
    if not (_DECIMAL.fullmatch(a) and _DECIMAL.fullmatch(k)):
        return False
    return abs(float(a) - float(k)) <= 1e-9 * max(1.0, abs(float(k)))


def where(text: str, kind: str, n_options: int = 4) -> str | None:
    """Where the answer omega read is written (paper 000 Fig. 3), None when it reads nothing: ``box`` when
    the output contains a ``\\boxed{}`` anywhere, else ``other`` when omega's answer is a line holding
    only the letter or a letter after "option"/"choice" (positions 5 and 6), else ``text`` (stated in the
    text, after "the answer is", "Answer:" and the like)."""
    if kind == "mc":
        for k, pattern in enumerate(_positions(option_letters(n_options))):
            if _last(pattern, text) is not None:
                if "\\boxed" in text:
                    return "box"
                return "other" if k >= 4 else "text"
        return None
    if free(text) is None:
        return None
    return "box" if "\\boxed" in text else "text"


def reader(kind: str, variant: str = "omega") -> Callable[..., str | None]:
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is unknown; expected one of {', '.join(VARIANTS)}")
    return (lambda text, n_options: mc(text, n_options, variant)) if kind == "mc" else (lambda text: free(text, variant))
