"""The course around the lab: hand-in (``handin``), re-simulation, and grading a class (``grade``).

Expected values come from the golden directories in ``expected/`` (the handbook's reference runs),
from the handbook's own numbers (§17.5's self-check answers) and from hand-made hand-ins whose
defects are known by construction; never from the grader's own output.
"""

import csv
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile
import zipfile

import unittest

from sched.analysis.check import compare_runs
from sched.base.safe_write import ARTIFACT_FILES
from sched.course.plan import COURSE_RUNS, NOTES, course_run
from sched.course.references import reference_directory
from sched.course.resimulate import authenticity
from tests.helpers import EXPECTED, PROJECT, run_cli, temp_dir

REQUIRED = [run for run in COURSE_RUNS if run.required]


def class_dir(cls) -> str:
    """A temporary directory removed when the test class ends."""
    path = tempfile.mkdtemp(prefix="isl-test-")
    cls.addClassCleanup(shutil.rmtree, path, ignore_errors=True)
    return path


def make_lab_folder(lab: str, runs=REQUIRED) -> str:
    """A learner's lab folder ``lab``: the two filled-in notes, my-workload.json and the given course
    runs made by the handbook's own commands."""
    for note in NOTES:
        with open(os.path.join(PROJECT, note), encoding="utf-8") as template:
            text = template.read()
        with open(os.path.join(lab, note), "w", encoding="utf-8") as out:
            out.write(text + "\nS1 waits for L0's batch to end.\n")
    with open(os.path.join(EXPECTED, "baseline", "workload.json"), encoding="utf-8") as handle:
        workload = json.load(handle)
    for request in workload["requests"]:
        if request["name"] == "U6":
            request["suffix_tokens"] = 640   # exercise 6
    with open(os.path.join(lab, "my-workload.json"), "w", encoding="utf-8") as out:
        json.dump(workload, out, indent=2)
    cwd = os.getcwd()
    os.chdir(lab)
    try:
        for run in runs:
            argv = run.command.split()[2:]   # "python3 infer_sched_lab.py ..."
            code, _, err = run_cli(argv)
            if code != 0:
                raise AssertionError(f"{run.command}: exit {code}: {err}")
    finally:
        os.chdir(cwd)
    return lab


_SHARED_LAB: list[str] = []


def shared_lab() -> str:
    """One learner's lab folder (:func:`make_lab_folder`) for every class of this module, made once
    and removed when the module's tests end; tests that change it work on a copy."""
    if not _SHARED_LAB:
        path = tempfile.mkdtemp(prefix="isl-test-")
        unittest.addModuleCleanup(shutil.rmtree, path, ignore_errors=True)
        _SHARED_LAB.append(make_lab_folder(path))
    return _SHARED_LAB[0]


def handin(test, lab: str, out: str) -> tuple[int, str, str]:
    return run_cli(["handin", "--lab", lab, "--out", out])


class ReferencesTest(unittest.TestCase):
    def test_a_simulated_reference_equals_the_golden_directory(self):
        scratch = temp_dir(self)
        for run in COURSE_RUNS:
            if run.reference is None:
                continue
            with self.subTest(run=run.name):
                simulated = reference_directory(dataclasses.replace(run, reference=None), PROJECT, scratch)
                self.assertEqual(compare_runs(simulated, os.path.join(EXPECTED, run.reference)), [])

    def test_the_handbook_numbers_of_section_17_5(self):
        """docs/handbook/vllm-engine.md §17.5's answers: runs/vllm P95 TTFT 24; runs/vllm41 P95 TTFT 32 and makespan 58."""
        scratch = temp_dir(self)
        expected = {"vllm": {"p95_ttft": 24}, "vllm41": {"p95_ttft": 32, "makespan": 58}}
        for name, values in expected.items():
            with open(os.path.join(reference_directory(course_run(name), PROJECT, scratch), "summary.json")) as handle:
                (case,) = json.load(handle)["cases"]
            for field, value in values.items():
                self.assertEqual(case[field], value, (name, field))

    def test_u6_640_reference_is_the_baseline_with_u6_longer(self):
        scratch = temp_dir(self)
        results = compare_runs(reference_directory(course_run("u6-640"), PROJECT, scratch),
                               os.path.join(EXPECTED, "baseline"))
        self.assertEqual(results[0][0], "workload and configuration")
        self.assertIn("workload / U6 / suffix_tokens: got 640, expected 160", results[0][1])
        self.assertEqual(len(results[0][1]), 2)   # the sha256 line and U6's field, nothing else


class AuthenticityTest(unittest.TestCase):
    def test_every_golden_directory_is_authentic(self):
        for name in os.listdir(EXPECTED):
            with self.subTest(name=name):
                self.assertEqual(authenticity(os.path.join(EXPECTED, name)).status, "yes")

    def test_an_edited_result_is_caught_with_its_file_and_field(self):
        run = os.path.join(temp_dir(self), "run")
        shutil.copytree(os.path.join(EXPECTED, "baseline"), run)
        path = os.path.join(run, "requests.jsonl")
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines(keepends=True)
        record = json.loads(lines[8])   # the continuous case's first request (8 per case)
        record["first_token_at"] += 1
        lines[8] = json.dumps(record) + "\n"
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(lines)
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "no")
        self.assertIn(f"requests.jsonl: continuous / {record['name']} / first_token_at", verdict.detail)

    def test_an_imported_real_run_is_not_re_simulated(self):
        run = os.path.join(temp_dir(self), "real")
        code, _, err = run_cli(["import-results", os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090",
                                                               "requests.jsonl"), "--artifacts", run])
        self.assertEqual(code, 0, err)
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "not checked")
        self.assertIn("a run of kind 'real'", verdict.detail)

    def test_a_missing_workload_is_not_authentic(self):
        run = os.path.join(temp_dir(self), "run")
        shutil.copytree(os.path.join(EXPECTED, "baseline"), run)
        os.remove(os.path.join(run, "workload.json"))
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "no")
        self.assertIn("workload.json", verdict.detail)


class HandinTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = shared_lab()
        cls.zip_path = os.path.join(class_dir(cls), "zhang-san.zip")   # one hand-in, read by the tests below
        cls.handin_result = handin(None, cls.lab, cls.zip_path)

    def test_the_zip_holds_exactly_the_course_hand_in(self):
        out = self.zip_path
        code, stdout, err = self.handin_result
        self.assertEqual(code, 0, err)
        expected = {"zhang-san/prediction.md", "zhang-san/diagnosis.md", "zhang-san/my-workload.json",
                    "zhang-san/HANDIN.json"}
        expected |= {f"zhang-san/runs/{run.name}/{name}" for run in REQUIRED for name in ARTIFACT_FILES}
        with zipfile.ZipFile(out) as archive:
            self.assertEqual(set(archive.namelist()), expected)
            record = json.loads(archive.read("zhang-san/HANDIN.json"))
            self.assertEqual(record["kind"], "handin")
            self.assertEqual(record["runs"], [run.name for run in REQUIRED])
            for path, digest in record["files"].items():
                self.assertEqual(hashlib.sha256(archive.read(f"zhang-san/{path}")).hexdigest(), digest, path)
            self.assertEqual(archive.read("zhang-san/runs/baseline/summary.json"),
                             pathlib.Path(EXPECTED, "baseline", "summary.json").read_bytes())
        self.assertIn("wrote", stdout)

    def test_same_files_same_bytes(self):
        """A second hand-in of the same folder, elsewhere and later, gives the class's ZIP byte for byte."""
        self.assertEqual(self.handin_result[0], 0, self.handin_result[2])
        out = os.path.join(temp_dir(self), "again", "zhang-san.zip")
        os.makedirs(os.path.dirname(out))
        self.assertEqual(handin(self, self.lab, out)[0], 0)
        self.assertEqual(pathlib.Path(out).read_bytes(), pathlib.Path(self.zip_path).read_bytes())

    def test_filled_notes_give_no_warning(self):
        code, _, err = self.handin_result
        self.assertEqual((code, err), (0, ""))

    def test_an_unchanged_template_is_packed_with_one_warning_line_each(self):
        """Both notes as shipped (README course steps 2 and 10 never done): the ZIP is written all the
        same (exit 0, the learner's choice), and stderr has one warning line per note."""
        lab = temp_dir(self)
        shutil.copytree(self.lab, lab, dirs_exist_ok=True)
        for note in NOTES:
            shutil.copy(os.path.join(PROJECT, note), os.path.join(lab, note))
        out = os.path.join(temp_dir(self), "me.zip")
        code, stdout, err = handin(self, lab, out)
        self.assertEqual(code, 0, err)
        self.assertIn("wrote", stdout)
        self.assertEqual(err.splitlines(), [
            f"infer_sched_lab.py handin: warning: {note} is the unchanged template (packed as it is); fill it in "
            "(README, course steps 2 and 10) and run handin again with --force" for note in NOTES])
        with zipfile.ZipFile(out) as archive:
            self.assertEqual(archive.read("me/prediction.md"), pathlib.Path(PROJECT, "prediction.md").read_bytes())
        # one note filled in: one warning, for the other
        with open(os.path.join(lab, "diagnosis.md"), "a", encoding="utf-8") as note:
            note.write("S7 waits behind the static batch.\n")
        code, _, err = run_cli(["handin", "--lab", lab, "--out", out, "--force"])
        self.assertEqual(code, 0, err)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertIn("warning: prediction.md is the unchanged template", err)

    def test_a_missing_run_is_named_with_its_command_and_nothing_is_written(self):
        lab = temp_dir(self)
        shutil.copytree(self.lab, lab, dirs_exist_ok=True)
        shutil.rmtree(os.path.join(lab, "runs", "u6-640"))
        os.remove(os.path.join(lab, "diagnosis.md"))
        out = os.path.join(temp_dir(self), "me.zip")
        code, stdout, err = handin(self, lab, out)
        self.assertEqual((code, stdout), (2, ""))
        self.assertIn("runs/u6-640: missing (exercise 6); make it with: python3 infer_sched_lab.py --workload "
                      "my-workload.json --artifacts runs/u6-640", err)
        self.assertIn("diagnosis.md: missing", err)
        self.assertNotIn("Traceback", err)
        self.assertEqual(os.listdir(os.path.dirname(out)), [])

    def test_an_edited_run_is_named_and_nothing_is_written(self):
        lab = temp_dir(self)
        shutil.copytree(self.lab, lab, dirs_exist_ok=True)
        path = os.path.join(lab, "runs", "deadline30", "summary.json")
        with open(path, encoding="utf-8") as handle:
            summary = json.load(handle)
        summary["cases"][0]["num_ok"] = 8
        with open(path, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)
        out = os.path.join(temp_dir(self), "me.zip")
        code, _, err = handin(self, lab, out)
        self.assertEqual(code, 2)
        self.assertIn("runs/deadline30: not what the lab makes", err)
        self.assertIn("summary.json: static / num_ok", err)
        self.assertFalse(os.path.exists(out))

    def test_bad_out_names_are_refused(self):
        base = temp_dir(self)
        existing = os.path.join(base, "me.zip")
        open(existing, "w").close()
        for out, mention in ((existing, "already exists"), (os.path.join(base, "me.txt"), "a ZIP named after you"),
                             (os.path.join(base, ".zip"), "a ZIP named after you")):
            with self.subTest(out=out):
                code, _, err = handin(self, self.lab, out)
                self.assertEqual(code, 2)
                self.assertIn(mention, err)
        self.assertEqual(os.path.getsize(existing), 0)


def _zip(path: str, entries: dict, compression=zipfile.ZIP_DEFLATED) -> str:
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in entries.items():
            if isinstance(data, zipfile.ZipInfo):
                archive.writestr(data, b"x")
            else:
                archive.writestr(name, data)
    return path


class GradeTest(unittest.TestCase):
    """One class of hand-ins, each with a defect known by construction, graded in one command."""

    @classmethod
    def setUpClass(cls):
        lab = shared_lab()
        cls.room = os.path.join(class_dir(cls), "class")
        os.makedirs(cls.room)
        good = os.path.join(cls.room, "ann.zip")
        code, _, err = handin(None, lab, good)
        if code != 0:
            raise AssertionError(err)
        with zipfile.ZipFile(good) as source:   # cat: a number changed in the ZIP after handin
            with zipfile.ZipFile(os.path.join(cls.room, "cat.zip"), "w") as out:
                for info in source.infolist():
                    data = source.read(info)
                    if info.filename.endswith("runs/baseline/summary.json"):
                        data = data.replace(b'"p95_ttft": 26', b'"p95_ttft": 20', 1)
                    out.writestr(info.filename.replace("ann/", "cat/"), data)
        with open(os.path.join(cls.room, "bob.zip"), "w") as out:
            out.write("this is not a ZIP\n")
        _zip(os.path.join(cls.room, "dan.zip"), {"dan/../../escape.txt": "x"})
        _zip(os.path.join(cls.room, "eve.zip"), {"eve/runs/bomb.bin": b"\0" * (9 * 1024 * 1024)})
        link = zipfile.ZipInfo("gus/runs/baseline")
        link.external_attr = 0o120777 << 16
        _zip(os.path.join(cls.room, "gus.zip"), {"link": link})
        _zip(os.path.join(cls.room, "hal.zip"), {"/etc/hal.txt": "x"})
        fay = os.path.join(cls.room, "fay")   # a folder: one run missing, one the wrong scenario, one hand-made
        shutil.copytree(os.path.join(lab, "runs"), os.path.join(fay, "runs"))
        shutil.copy(os.path.join(PROJECT, "prediction.md"), fay)   # the unchanged template
        shutil.rmtree(os.path.join(fay, "runs", "deadline30"))
        shutil.rmtree(os.path.join(fay, "runs", "prefix-broken"))
        shutil.copytree(os.path.join(EXPECTED, "baseline"), os.path.join(fay, "runs", "prefix-broken"))
        handmade = os.path.join(fay, "runs", "u6-640")   # the result files of u6-640, the workload of the baseline
        shutil.copy(os.path.join(EXPECTED, "baseline", "workload.json"), handmade)
        data = pathlib.Path(good).read_bytes()
        pathlib.Path(cls.room, "ivy.zip").write_bytes(data[:len(data) // 2])   # cut short in transit
        with zipfile.ZipFile(good) as source:   # jon: one entry's compressed bytes damaged
            info = source.getinfo("ann/runs/baseline/timeline.jsonl")
        offset = info.header_offset + 30 + len(info.filename.encode()) + 40   # inside its compressed data
        pathlib.Path(cls.room, "jon.zip").write_bytes(data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1:])
        kim = os.path.join(cls.room, "kim")   # a folder whose baseline manifest is nested beyond reason
        shutil.copytree(os.path.join(lab, "runs", "baseline"), os.path.join(kim, "runs", "baseline"))
        pathlib.Path(kim, "runs", "baseline", "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
        cls.grades = os.path.join(cls.room, "..", "grades.csv")
        names = ["ann.zip", "bob.zip", "cat.zip", "dan.zip", "eve.zip", "fay", "gus.zip", "hal.zip", "missing.zip",
                 "ivy.zip", "jon.zip", "kim"]
        cls.result = run_cli(["grade", *(os.path.join(cls.room, n) for n in names), "--out", cls.grades])
        with open(cls.grades, newline="", encoding="utf-8") as handle:
            cls.rows = list(csv.DictReader(handle))

    def row(self, learner: str, run: str = "") -> dict:
        (found,) = [r for r in self.rows if r["learner"] == learner and r["run"] == run]
        return found

    def test_the_class_is_graded_whatever_the_hand_ins_hold(self):
        code, out, err = self.result
        self.assertEqual(code, 0, err)
        self.assertEqual(err, "")
        self.assertIn("graded 12 hand-ins", out)
        self.assertEqual([r["learner"] for r in self.rows if r["run"] == ""],
                         ["bob", "dan", "eve", "gus", "hal", "missing", "ivy", "jon"])

    def test_a_good_hand_in_is_same_and_authentic_on_every_required_run(self):
        rows = [r for r in self.rows if r["learner"] == "ann"]
        self.assertEqual([r["run"] for r in rows], [run.directory for run in REQUIRED])
        for row in rows:
            self.assertEqual((row["verdict"], row["differences"], row["authentic"], row["tampered"]),
                             ("same", "0", "yes", "no"), row)
        self.assertIn("prediction.md", rows[0]["notes"])
        self.assertNotIn("template", rows[0]["notes"])

    def test_bad_hand_ins_are_rows_with_a_reason(self):
        reasons = {"bob": "not a ZIP file", "dan": "escaping the hand-in folder (..)",
                   "eve": "more than 8388608", "gus": "a symbolic link", "hal": "escaping the hand-in folder",
                   "missing": "no such file or folder", "ivy": "not a ZIP file",
                   "jon": "entry 'ann/runs/baseline/timeline.jsonl': damaged"}
        for learner, reason in reasons.items():
            with self.subTest(learner=learner):
                row = self.row(learner)
                self.assertEqual(row["verdict"], "bad hand-in")
                self.assertIn(reason, row["reason"])
        self.assertFalse(os.path.exists(os.path.join(self.room, "..", "..", "escape.txt")))

    def test_a_file_changed_after_handin_is_tampered_different_and_not_authentic(self):
        row = self.row("cat", "runs/baseline")
        self.assertEqual((row["verdict"], row["differences"], row["authentic"], row["tampered"]),
                         ("different", "1", "no", "yes"))
        self.assertEqual(row["first_difference"], "summary.json: continuous+APC / p95_ttft: got 20, expected 26")
        self.assertIn("runs/baseline/summary.json: changed or removed after the handin command packed it", row["reason"])

    def test_a_folder_hand_in_missing_wrong_and_hand_made_runs(self):
        self.assertEqual(self.row("fay", "runs/deadline30")["verdict"], "missing")
        wrong = self.row("fay", "runs/prefix-broken")   # the baseline handed in as prefix-broken: authentic, different
        self.assertEqual((wrong["verdict"], wrong["authentic"]), ("different", "yes"))
        self.assertIn("workload and configuration: manifest / workload_sha256", wrong["first_difference"])
        handmade = self.row("fay", "runs/u6-640")
        self.assertEqual((handmade["verdict"], handmade["authentic"]), ("different", "no"))
        self.assertIn("workload.json", handmade["first_difference"])
        self.assertEqual(handmade["tampered"], "unknown")
        self.assertIn("prediction.md is the unchanged template; diagnosis.md missing", handmade["notes"])

    def test_an_unreadable_run_is_a_row_and_the_others_are_still_graded(self):
        row = self.row("kim", "runs/baseline")
        self.assertEqual(row["verdict"], "unusable")
        self.assertIn("nested too deeply", row["reason"])
        self.assertEqual([self.row("kim", f"runs/{name}")["verdict"] for name in
                          ("prefix-broken", "deadline30", "output-heavy", "u6-640")], ["missing"] * 4)

    def test_an_existing_grade_sheet_is_kept(self):
        code, out, err = run_cli(["grade", os.path.join(self.room, "ann.zip"), "--out", self.grades])
        self.assertEqual((code, out), (2, ""))
        self.assertIn("already exists", err)


class GradeCellsTest(unittest.TestCase):
    def test_a_name_a_spreadsheet_would_run_is_quoted(self):
        from sched.course.grade import render_csv, GRADE_COLUMNS
        row = {column: "" for column in GRADE_COLUMNS} | {"learner": "=HYPERLINK(1)", "reason": "two\nlines"}
        line = render_csv([row]).splitlines()[1]
        self.assertTrue(line.startswith("'=HYPERLINK(1)"))
        self.assertIn("two lines", line)


if __name__ == "__main__":
    unittest.main()


class AnswersTest(unittest.TestCase):
    """docs/answers.md's tables hold the numbers of the golden directories."""

    @staticmethod
    def table_after(heading: str) -> list[list[str]]:
        text = pathlib.Path(PROJECT, "docs", "answers.md").read_text(encoding="utf-8")
        section = text[text.index(heading):]
        block = []
        for line in section.splitlines()[1:]:
            if line.startswith("|"):
                block.append([cell.strip() for cell in line.strip("|").split("|")])
            elif block:
                break
        return block[2:]   # past the header and the rule

    @staticmethod
    def requests(name: str) -> dict:
        with open(os.path.join(EXPECTED, name, "requests.jsonl"), encoding="utf-8") as handle:
            return {(r["case"], r["name"]): r for r in map(json.loads, handle)}

    def test_exercise_1_table(self):
        requests = self.requests("baseline")
        for case, *cells in self.table_after("## 练习 1"):
            s1, s7 = requests[(case, "S1")], requests[(case, "S7")]
            self.assertEqual([int(c) for c in cells], [s1["admitted_at"], s1["first_token_at"], s1["ttft"],
                                                        s7["admitted_at"], s7["first_token_at"], s7["ttft"]], case)

    def test_exercise_4_table(self):
        with open(os.path.join(EXPECTED, "deadline30", "table.txt"), encoding="utf-8") as handle:
            table = handle.read()
        rows = self.table_after("## 练习 4")
        self.assertEqual(len(rows), 4)
        for case, p95, ok, samples in rows:
            line = next(l for l in table.splitlines() if l.split()[:1] == [case])
            self.assertEqual(line.split()[1], p95, case)
            self.assertIn(ok, line)
            self.assertEqual(line.split()[-1], samples, case)

    def test_exercise_6_table(self):
        """Against the u6-640 reference (the handbook's command) and the baseline golden directory."""
        scratch = temp_dir(self)
        before = self.requests("baseline")
        with open(os.path.join(reference_directory(course_run("u6-640"), PROJECT, scratch), "requests.jsonl")) as handle:
            after = {(r["case"], r["name"]): r for r in map(json.loads, handle)}
        for case, u6, s7 in self.table_after("## 练习 6"):
            for name, cell in (("U6", u6), ("S7", s7)):
                numbers = [int(n) for n in re.findall(r"\d+", cell)]
                self.assertEqual(numbers[:2], [before[(case, name)]["ttft"], after[(case, name)]["ttft"]], (case, name))
