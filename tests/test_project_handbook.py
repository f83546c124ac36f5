"""The handbook as a course done in order (README's course list): every link leads to a file, every
section number cited in code, tests and docs leads to a heading, the answers are folded, and the lab
ZIP carries every chapter file.

The README keeps sections 1-10, 12, 13 and 15 whole; each longer optional chapter (11, 11.5, 14,
16-19) is a file of its own in ``docs/handbook/``, and README keeps that chapter's heading with a
list of its sections (``- 14.1 ...``) and a link to the file. Expected values here are the handbook's
own structure: the section list of each README stub must match the headings of the file it links.
"""

import glob
import os
import re
import unittest

from sched.runs.labzip import lab_files
from tests.helpers import PROJECT, read

README = os.path.join(PROJECT, "README.md")
HANDBOOK = os.path.join(PROJECT, "docs", "handbook")
#: Chapters other branches write this round; README links them before they land.
PENDING = {"docs/handbook/calibrate-your-gpu.md", "docs/handbook/choosing-settings.md"}
#: The course list's self-check labels (README "课程清单"), each asked again in its section.
SELF_CHECKS = ("4a", "4b", "5a", "5b", "6a", "7a", "7b", "8a", "9a", "9b", "12a", "12b", "12c", "15a", "15b",
               "16a", "16b", "16c", "18a")

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def _labels(text: str) -> set[str]:
    """Self-check labels asked in ``text``: ``自查 4a``, also listed as ``自查 16a、16b、16c``."""
    return {label for run in re.findall(r"自查 (\d+[a-z](?:、\d+[a-z])*)", text) for label in run.split("、")}


def _markdown_files():
    return [README] + sorted(glob.glob(os.path.join(PROJECT, "docs", "**", "*.md"), recursive=True))


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(text: str) -> list[str]:
    return [line.lstrip("#").strip() for line in _FENCE.sub("", text).splitlines() if line.startswith("#")]


def _section_numbers(path: str) -> set[str]:
    """Section numbers a file holds: ``## 14.1 ...`` headings, ``# 第 14 节`` titles, README's ``## 14.``
    headings and the ``- 14.1 ...`` items README lists for a chapter that moved."""
    text = read(path)
    numbers = set()
    for heading in _headings(text):
        match = re.match(r"第 (\d+(?:\.\d+)*) 节|(\d+(?:\.\d+)*)[. ]", heading)
        if match:
            numbers.add(match.group(1) or match.group(2))
    if path == README:
        numbers |= set(re.findall(r"^- (\d+\.\d+) ", text, re.M))
    return numbers


class HandbookLinksTest(unittest.TestCase):
    def test_every_relative_link_leads_to_a_file_or_heading(self):
        for path in _markdown_files():
            text = _FENCE.sub("", read(path))
            for target in _LINK.findall(text):
                if re.match(r"[a-z]+:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                relative = os.path.relpath(resolved, PROJECT).replace(os.sep, "/")
                with self.subTest(file=os.path.relpath(path, PROJECT), link=target):
                    if relative in PENDING and not os.path.exists(resolved):
                        continue
                    self.assertTrue(os.path.exists(resolved), f"{target} leads nowhere")
                    if anchor:
                        self.assertIn(anchor, {_slug(h) for h in _headings(read(resolved))})

    def test_each_moved_chapter_lists_the_sections_its_file_holds(self):
        text = read(README)
        stubs = re.findall(r"^## (\d+)\. .*?(?=^## |\Z)", text, re.S | re.M)
        self.assertEqual([str(n) for n in range(1, 20)], stubs, "README keeps every chapter's heading, in order")
        for chapter in re.split(r"^## ", text, flags=re.M)[1:]:
            number = chapter.split(".", 1)[0]
            listed = re.findall(r"^- (\d+\.\d+) ", chapter, re.M)
            links = [link for link in _LINK.findall(chapter) if link.startswith("docs/handbook/")]
            if not number.isdigit() or not listed:
                continue
            held = set()
            for link in links:
                if os.path.exists(os.path.join(PROJECT, link)):
                    held |= _section_numbers(os.path.join(PROJECT, link))
            with self.subTest(chapter=number):
                self.assertTrue(links, "a chapter that lists its sections links the file holding them")
                self.assertLessEqual(set(listed), held)

    def test_each_chapter_file_opens_with_its_section_number(self):
        titles = {"priority-and-compare.md": "11", "real-measurements.md": "11.5", "real-traffic.md": "14",
                  "window-model.md": "16", "vllm-engine.md": "17", "calibration.md": "18", "dask.md": "19"}
        for name, number in titles.items():
            with self.subTest(file=name):
                first = read(os.path.join(HANDBOOK, name)).splitlines()[0]
                self.assertTrue(first.startswith(f"# 第 {number} 节："), first)
                self.assertIn(f"docs/handbook/{name}", read(README))

    def test_cited_sections_exist(self):
        """``README §14.1``, ``README 第 14.1 节`` and ``docs/handbook/<file>.md §17.5`` in code, tests and docs name a
        real section (the first of a list such as ``第 12.3、12.5 节``)."""
        cited = re.compile(r"(README|docs/handbook/[\w-]+\.md) (?:§|第 )(\d+(?:\.\d+)*)")
        sources = (glob.glob(os.path.join(PROJECT, "sched", "**", "*.py"), recursive=True)
                   + glob.glob(os.path.join(PROJECT, "tests", "*.py")) + glob.glob(os.path.join(PROJECT, "bench", "*.py"))
                   + glob.glob(os.path.join(PROJECT, "*.py")) + _markdown_files())
        seen = 0
        for source in sources:
            for where, number in cited.findall(read(source)):
                target = README if where == "README" else os.path.join(PROJECT, where)
                if os.path.relpath(target, PROJECT).replace(os.sep, "/") in PENDING and not os.path.exists(target):
                    continue
                seen += 1
                with self.subTest(source=os.path.relpath(source, PROJECT), cited=f"{where} §{number}"):
                    self.assertIn(number, _section_numbers(target))
        self.assertGreater(seen, 20)


class HandbookAnswersTest(unittest.TestCase):
    def test_the_reference_table_is_folded(self):
        """§5's table (expected/baseline/table.txt) is in README, inside a <details> block."""
        text = read(README)
        table = read(os.path.join(PROJECT, "expected", "baseline", "table.txt"))
        at = text.index(table)
        self.assertGreater(at, text.rindex("<details>", 0, at))
        self.assertLess(text.rfind("</details>", 0, at), text.rindex("<details>", 0, at))
        self.assertGreater(text.index("</details>", at), at)

    def test_every_fold_is_closed(self):
        for path in [README] + sorted(glob.glob(os.path.join(HANDBOOK, "*.md"))):
            text = read(path)
            with self.subTest(file=os.path.relpath(path, PROJECT)):
                depth = 0
                for tag in re.findall(r"</?details>", text):
                    depth += 1 if tag == "<details>" else -1
                    self.assertIn(depth, (0, 1), "folds are not nested and never closed twice")
                self.assertEqual(0, depth)

    def test_every_self_check_of_the_list_is_asked_in_its_section(self):
        text = read(README)
        course_list, body = text.split("## 三个 TTFT，两套规则", 1)
        chapters = body + "".join(read(p) for p in glob.glob(os.path.join(HANDBOOK, "*.md")))
        self.assertEqual(set(SELF_CHECKS), _labels(course_list))
        self.assertLessEqual(set(SELF_CHECKS), _labels(chapters))


class HandbookInZipTest(unittest.TestCase):
    def test_the_lab_zip_packs_every_chapter_file(self):
        packed = set(lab_files(PROJECT))
        chapters = {os.path.relpath(p, PROJECT).replace(os.sep, "/") for p in glob.glob(os.path.join(HANDBOOK, "*.md"))}
        self.assertGreaterEqual(len(chapters), 8)
        self.assertLessEqual(chapters | {"README.md", "docs/reference.md", "docs/answers.md"}, packed)


if __name__ == "__main__":
    unittest.main()
