"""No machine's measured figures in the code: comments and docstrings state the contract and the why.

A figure measured on one machine (a CPU model, an N-core box, a date, "17-37 %", "528-544 µs",
"4 of 9 A/A runs", "measured 12 %") goes stale the day the code or the machine changes, and a reader
cannot tell it from the contract. Such figures live in docs/, dated, with their machine. This test
reads only comments (``tokenize``) and module, class and function docstrings (``ast``) of every module
under perfsuite/ and benchmarks/; strings the code uses are not prose and are not read.

What counts as a measured figure (each rule is exercised by the examples below):
- a CPU model name or a machine description ("EPYC", "2-core", "family 26 model 2");
- a date ("2026-11", "Nov 2026");
- a range of a measured quantity whose ends are not round numbers ("17-37 %", "528-544 µs"):
  a contract's bounds are chosen ("5-20 %", "1-6 s"), a measurement's are whatever the machine gave;
- a signed percentage ("+7.6 %", "a -22 % change"), an approximate duration ("~22 ms");
- counts of runs or trials ("4 of 9 A/A runs");
- any figure in a sentence that says it was measured or where ("measured 12 %", "on the loaded box").
A single chosen number ("MAX_SHARE = 0.05  # 5 % of a batch", "keeps >= 90 % busy") is a contract.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("perfsuite", "benchmarks")

_NUM = r"\d+(?:[.,]\d+)*"
_UNIT = r"(?:%|µs|us|ms|s|min|×|x|samples/s|steps/s)"
_FIGURE = re.compile(rf"(?<![\w.]){_NUM}\s*{_UNIT}(?!\w)|\b\d+ of \d+\b")
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"

RULES = {
    "CPU model": re.compile(
        r"\b(?:EPYC|Xeon|Ryzen|Threadripper|Opteron|Graviton|Neoverse|Core i[3579])\b", re.IGNORECASE
    ),
    "machine description": re.compile(
        r"\b\d+-(?:core|vcpu|cpu)\b|\b\d+ (?:cores|vcpus)\b|\bfamily \d+,? model \d+\b", re.IGNORECASE
    ),
    "date": re.compile(rf"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])\b|\b{_MONTH} (?:19|20)\d\d\b"),
    "signed percentage": re.compile(rf"(?<![\w.+±−-])[+−-]{_NUM}\s*%"),
    "approximate duration": re.compile(rf"~\s*{_NUM}\s*(?:µs|us|ms|s|min)(?![\w.])"),
    "count of runs": re.compile(r"\b\d+ of \d+ (?:[\w/]+ )?(?:runs|trials|comparisons)\b"),
}
_RANGE = re.compile(rf"(?<![\w.])({_NUM})\s*[–-]\s*({_NUM})\s*{_UNIT}(?!\w)")
_MEASURED_VERB = re.compile(r"\b(?:measured|took|moved|differed|drifted|observed)\b", re.IGNORECASE)
_MEASURED_WHERE = re.compile(r"\bon (?:a|an|the|this|one) (?:[\w-]+ ){0,3}(?:box|VM|machine|runner)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+")


def is_round(number: str) -> bool:
    """A chosen bound: an integer up to 10 or a multiple of 5, or a decimal ending in 5 (0.05, 0.25)."""
    digits = number.replace(",", "")
    if float(digits).is_integer():
        return int(float(digits)) <= 10 or int(float(digits)) % 5 == 0
    return digits.rstrip("0")[-1] == "5"


def figures(text: str) -> list[tuple[int, str, str]]:
    """(offset, rule, matched text) of every measured figure in one comment block or docstring."""
    found = [(m.start(), rule, m.group()) for rule, pattern in RULES.items() for m in pattern.finditer(text)]
    found += [
        (m.start(), "measured range", m.group())
        for m in _RANGE.finditer(text)
        if not (is_round(m.group(1)) and is_round(m.group(2)))
    ]
    offset = 0
    for sentence in _SENTENCE_END.split(text):
        start = text.index(sentence, offset)
        offset = start + len(sentence)
        verb, where = _MEASURED_VERB.search(sentence), _MEASURED_WHERE.search(sentence)
        # "measured 12 %" (the figure after the verb), not "its 95 % interval ... measured"
        figure = _FIGURE.search(sentence, verb.end()) if verb else None
        if where and not figure:
            figure = _FIGURE.search(sentence)  # "~22 ms on the loaded box"
        if figure:
            said = (verb or where).group()
            found.append((start + figure.start(), f"figure said to be measured ({said!r})", figure.group()))
    return sorted(found)


def prose(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each comment block (consecutive comment lines) and each docstring."""
    blocks: list[tuple[int, str]] = []
    previous_full_line = None  # the line of the last comment that had a line to itself
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line, text = token.start[0], token.string.lstrip("#").strip()
        full_line = token.line.strip().startswith("#")
        if full_line and previous_full_line == line - 1:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + "\n" + text)
        else:
            blocks.append((line, text))
        previous_full_line = line if full_line else None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = node.body[0] if node.body else None
            if (
                isinstance(docstring, ast.Expr)
                and isinstance(docstring.value, ast.Constant)
                and isinstance(docstring.value.value, str)
            ):
                blocks.append((docstring.value.lineno, docstring.value.value))
    return blocks


def offending_lines(path: Path) -> list[str]:
    """'file:line: rule: text' for every measured figure in the comments and docstrings of one module."""
    source = path.read_text(encoding="utf-8")
    source_lines = source.splitlines()
    found = []
    for first_line, text in prose(source):
        for offset, rule, match in figures(text):
            line = first_line + text.count("\n", 0, offset)
            where = f"{path.relative_to(ROOT)}:{line}"
            found.append(f"{where}: {rule} {match!r}: {source_lines[line - 1].strip()}")
    return found


@pytest.mark.parametrize(
    "text",
    [
        "machine-specific run-to-run noise (17-37 % between two runs minutes apart)",
        "``tf.audio.decode_wav`` took 528–544 µs of CPU an utterance",
        "the sign test then flagged 4 of 9 A/A runs",
        "the probe measured 12 % more time",
        "gains 1.19-1.26x for WAV",
        "flagged at p=1e-11 with a -22 % change",
        "fractions 0.045 and 0.18: +7.6 % and +28 % time per sample",
        "one epoch per round (~22 ms)",
        "on the first AMD EPYC box",
        "a loaded 2-core runner",
        "AMD family 26 model 2",
        "recorded on 2026-11-23",
        "as of Nov 2026",
        "the cycle was found in 3 of 6 rounds on an idle machine",
        "(measured: 1.7 % input-bound)",
        "differed by up to 13 % on a fast benchmark",
    ],
)
def test_a_measured_figure_is_found(text):
    assert figures(text), f"expected a measured figure in {text!r}"


@pytest.mark.parametrize(
    "text",
    [
        "5 % of a batch: the share above which a pipeline counts as input-bound",
        "'not input-bound' (< 5 %), 'moderately input-bound' (5-20 %), 'highly input-bound' (>= 20 %)",
        "the shortest fixed step the pipeline keeps >= 90 % busy",
        "Leading and trailing silences are 0.05-0.25 s",
        "a 4-5 s LJSpeech utterance; short utterances (1-2 s), or 1.0-2.0 s",
        "its interval lies within +-10 % of the median",
        "the arms A, A', A + 10 % and A + 25 %",
        "it needs 24 of 32 rounds slower: exact size 0.35 % a trial",
        "the measured rounds, warm-up not counted",
        "every thread of the process pinned to one CPU",
        "~1.8e9 s (0.24 µs) must not drop the last one",
        "each as a rate with its 95 % Clopper-Pearson interval, and the slowdown ab measured for each",
    ],
)
def test_a_contract_is_not_a_measured_figure(text):
    assert figures(text) == []


def test_only_comments_and_docstrings_are_read():
    source = (
        '"""Module: the contract."""\n'
        'NOTE = "measured 17-37 % on an EPYC box"\n'
        "LIMIT = 0.05  # 5 % of a batch\n"
        "# it took 528-544 µs\n"
        "def f():\n"
        '    """Measured on 2026-11-23."""\n'
    )
    blocks = prose(source)
    assert sorted(line for line, _ in blocks) == [1, 3, 4, 6]
    flagged = sorted(text for _, text in blocks if figures(text))
    assert flagged == ["Measured on 2026-11-23.", "it took 528-544 µs"]


def test_no_module_names_a_machine_a_date_or_a_measured_figure():
    offending = [
        line
        for package in SCANNED
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in offending_lines(path)
    ]
    assert offending == [], (
        "comments and docstrings state the contract and the why; measured figures go to docs/, dated, with "
        "their machine:\n" + "\n".join(offending)
    )
