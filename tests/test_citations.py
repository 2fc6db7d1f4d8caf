"""Every citation in the repository resolves inside it (docs/design.md, "The rules of
the house" and "How the code is written").

Comments, tests and docs cite requirement ids (``S2.7``) and sections of the notes
about other systems (``FACTS 1.6``, ``SPEC introduction``, ``seed 004``), which
docs/requirements.md must explain, and design rules ("design rule 4"), which
docs/design.md numbers. A contributor has only the repository, so nothing may send
them to a document that is not in it.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Where citations are written: the code, its tests, the benchmarks, the docs and the
#: files an operator reads.
SCANNED = ["mqgate", "twisted", "tests", "bench", "docs", "etc"]
SCANNED_FILES = ["README.md", "Makefile", "setup.cfg", "pyproject.toml", "MANIFEST.in"]
SUFFIXES = {".py", ".md", ".js", ".properties", ".cfg", ".toml", ".service", ".conf",
            ".xml", ".txt", ""}
SKIPPED_DIRS = {"node_modules", "__pycache__", "results"}

REQUIREMENT = re.compile(r"\bS\d+\.\d+\b")
DESIGN_RULE = re.compile(r"design rule (\d+)")
#: A section of the notes: "FACTS 1.6", "FACTS section 5", "SPEC intro", "seed 004".
NOTE = re.compile(r"\bFACTS (?:section )?(\d+(?:\.\d+)?)|\b(SPEC intro)(?:duction)?\b"
                  r"|\b(seed \d{3})\b")
#: Documents of the project's planning that are not in the repository.
OUTSIDE = re.compile(r"\b(?:FACTS|SPEC|ARCHITECTURE)\.md\b|/work/shared")


def scanned_files():
    for name in SCANNED:
        for path in sorted((ROOT / name).rglob("*")):
            if (path.is_file() and path.suffix in SUFFIXES
                    and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)):
                yield path
    for name in SCANNED_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name


def listed_requirements(text):
    """What docs/requirements.md explains: the first cell of its table rows, each
    spelled as L{cited} spells a citation."""
    return {cited(first) for first in re.findall(r"^\| ([^|]+?) \|", text, re.MULTILINE)}


def cited(text):
    """A citation in one spelling: "FACTS section 5" -> "FACTS 5", "SPEC introduction"
    -> "SPEC intro"; an id as it is."""
    match = NOTE.fullmatch(text)
    if match is None:
        return text
    facts, spec, seed = match.groups()
    return f"FACTS {facts}" if facts else spec or seed


def citations(text):
    """Every requirement id and note section C{text} cites, each spelled by L{cited}."""
    return set(REQUIREMENT.findall(text)) | {cited(m.group(0)) for m in NOTE.finditer(text)}


def design_rules(text):
    """How many rules docs/design.md's "The rules of the house" numbers."""
    section = text.split("## The rules of the house", 1)[1].split("\n## ", 1)[0]
    return len(re.findall(r"^\d+\. ", section, re.MULTILINE))


def unresolved(files, listed, rules):
    """C{{relative path: [what does not resolve]}} over C{{path: text}}."""
    found = {}
    for path, text in files.items():
        bad = sorted(name for name in citations(text) if name not in listed)
        bad += sorted({f"design rule {n}" for n in DESIGN_RULE.findall(text)
                       if not 1 <= int(n) <= rules})
        bad += sorted(set(OUTSIDE.findall(text)))
        if bad:
            found[path] = bad
    return found


def test_the_check_can_fail():
    """An unknown id, a rule past the last one and an outside document are each found;
    a listed id and an existing rule are not."""
    files = {"a.py": "# S2.1 and S99.1, design rule 3 and design rule 8",
             "b.md": "see FACTS.md", "c.py": "fine (S2.1, FACTS section 1.6, SPEC intro)",
             "d.py": "# FACTS 9.9 and seed 007"}
    listed = listed_requirements("| S2.1 | x |\n| FACTS 1.6 | y |\n| SPEC introduction | z |")
    assert listed == {"S2.1", "FACTS 1.6", "SPEC intro"}
    assert unresolved(files, listed, 7) == {
        "a.py": ["S99.1", "design rule 8"], "b.md": ["FACTS.md"],
        "d.py": ["FACTS 9.9", "seed 007"]}


def test_the_docs_are_what_the_check_reads():
    """The two parsers find the table and the rules (so an empty set cannot pass)."""
    listed = listed_requirements((ROOT / "docs" / "requirements.md").read_text("utf-8"))
    assert {"S0.1", "S2.1", "S10.3", "FACTS 1.1", "SPEC intro", "seed 004"} <= listed
    assert design_rules((ROOT / "docs" / "design.md").read_text("utf-8")) >= 7


def test_every_citation_resolves_inside_the_repository():
    listed = listed_requirements((ROOT / "docs" / "requirements.md").read_text("utf-8"))
    rules = design_rules((ROOT / "docs" / "design.md").read_text("utf-8"))
    files = {str(path.relative_to(ROOT)): path.read_text("utf-8", errors="replace")
             for path in scanned_files()
             if path.name != Path(__file__).name}
    assert len(files) > 100
    problems = unresolved(files, listed, rules)
    if problems:
        pytest.fail("citations that do not resolve in the repository (add the id to "
                    "docs/requirements.md, or cite what is there):\n"
                    + "\n".join(f"  {path}: {', '.join(bad)}"
                                for path, bad in sorted(problems.items())))
