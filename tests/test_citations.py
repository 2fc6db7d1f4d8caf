"""Every citation in the repository resolves inside it (docs/design.md, "The rules of
the house" and "How the code is written").

Comments, tests and docs cite requirement ids (``S2.7``), which docs/requirements.md
must explain, and design rules ("design rule 4"), which docs/design.md numbers. A
contributor has only the repository, so nothing may send them to a document that is
not in it.
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
    """The ids docs/requirements.md explains: the first cell of its table rows."""
    return set(re.findall(r"^\| (S\d+\.\d+) \|", text, re.MULTILINE))


def design_rules(text):
    """How many rules docs/design.md's "The rules of the house" numbers."""
    section = text.split("## The rules of the house", 1)[1].split("\n## ", 1)[0]
    return len(re.findall(r"^\d+\. ", section, re.MULTILINE))


def unresolved(files, listed, rules):
    """C{{relative path: [what does not resolve]}} over C{{path: text}}."""
    found = {}
    for path, text in files.items():
        bad = sorted({sid for sid in REQUIREMENT.findall(text) if sid not in listed})
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
             "b.md": "see FACTS.md", "c.py": "fine (S2.1)"}
    assert unresolved(files, {"S2.1"}, 7) == {
        "a.py": ["S99.1", "design rule 8"], "b.md": ["FACTS.md"]}


def test_the_docs_are_what_the_check_reads():
    """The two parsers find the table and the rules (so an empty set cannot pass)."""
    listed = listed_requirements((ROOT / "docs" / "requirements.md").read_text("utf-8"))
    assert {"S0.1", "S2.1", "S10.3"} <= listed
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
