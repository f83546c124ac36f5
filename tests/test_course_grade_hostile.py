"""Hostile and odd hand-ins found by trying to break ``grade``: each one is a row with a clear reason,
the class goes on, and the grader never simulates for minutes or fills its memory for one learner.

Every hand-in here is built by hand from ``expected/baseline`` (the handbook's reference run) with
one defect known by construction; expected texts come from that golden directory or from the
construction, never from the grader's own output.
"""

import json
import os
import shutil
import tempfile
import unittest
import zipfile
from unittest import mock

from sched.analysis.check import first_line
from sched.course.grade import grade_handin
from sched.course.resimulate import MAX_FULL_TIMELINE_TOKENS, MAX_REQUEST_TICKS, authenticity
from tests.helpers import EXPECTED, PROJECT, run_cli, temp_dir


def _request(i: int, suffix: int, output: int) -> dict:
    return {"name": f"r{i}", "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
            "suffix_tokens": suffix, "output_tokens": output}


def _baseline_copy(test, **manifest_changes) -> str:
    """A copy of expected/baseline whose manifest.json has ``manifest_changes`` (``config`` merged)."""
    run = os.path.join(temp_dir(test), "run")
    shutil.copytree(os.path.join(EXPECTED, "baseline"), run)
    path = os.path.join(run, "manifest.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest["config"].update(manifest_changes.pop("config", {}))
    manifest.update(manifest_changes)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(manifest, out)
    return run


def _write_workload(run: str, requests: list) -> None:
    with open(os.path.join(run, "workload.json"), "w", encoding="utf-8") as out:
        json.dump({"requests": requests}, out)


def _golden_lines(name: str) -> list[str]:
    with open(os.path.join(EXPECTED, "baseline", name), encoding="utf-8") as handle:
        return handle.read().splitlines()


class ScaleTest(unittest.TestCase):
    """A workload.json in a hand-in is the learner's: one built to take hours must not stop the class."""

    def test_a_full_timeline_beyond_the_course_scale_is_not_re_simulated(self):
        # One request with 60,000 output tokens: the full timeline would hold a record per tick,
        # about 60,000 per case (hundreds of MB); the lab itself writes it in full only up to 50,000 tokens.
        run = _baseline_copy(self)
        _write_workload(run, [_request(0, 1, 59_999)])
        self.assertGreater(60_000, MAX_FULL_TIMELINE_TOKENS)
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "not checked", verdict.detail)
        self.assertIn("a full timeline of 1 requests and 60000 prompt + output tokens", verdict.detail)

    def test_many_requests_active_at_once_for_many_ticks_are_not_re_simulated(self):
        # 400 requests of 1 + 199 tokens, all active (max_active 400), budget 8 = one decode of cost 8
        # per tick: about 400 / 8 + 400 × 199 walked ticks per case (under the 2,000,000 walked-tick bound) with
        # 400 requests visited in each: 4 cases × 79,650 ticks × 400 = 127,440,000 request-ticks.
        run = _baseline_copy(self, timeline="counts", config={"budget": 8, "decode_cost": 8, "max_active": 400})
        _write_workload(run, [_request(i, 1, 199) for i in range(400)])
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "not checked", verdict.detail)
        self.assertIn("request-ticks", verdict.detail)
        self.assertLess(MAX_REQUEST_TICKS, 4 * (-(-400 // 8) + 8 * 400 * 199 // 8) * 400)


class FirstLineTest(unittest.TestCase):
    """A grade sheet's first_difference and authenticity reason say where a text artifact differs."""

    def test_a_field_difference_is_kept_as_it_is(self):
        self.assertEqual(first_line("continuous / S7 / first_token_at: got 40, expected 37"),
                         "continuous / S7 / first_token_at: got 40, expected 37")

    def test_a_text_difference_names_its_line_and_both_sides(self):
        run = _baseline_copy(self)
        lines = _golden_lines("table.txt")
        lines[2] = "static edited by hand"
        with open(os.path.join(run, "table.txt"), "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "no")
        expected = _golden_lines("table.txt")[2]
        self.assertEqual(verdict.detail, f"table.txt: text differs from line 3: got 'static edited by hand', "
                                         f"expected {expected[:57] + '...'!r}")

    def test_a_cut_short_diff_does_not_claim_a_side_is_empty(self):
        # requests.jsonl rewritten compactly: every record equal, every line different; the diff
        # shown is cut after its first lines (all the removed ones), so the run's side is not shown.
        run = _baseline_copy(self)
        records = [json.loads(line) for line in _golden_lines("requests.jsonl")]
        with open(os.path.join(run, "requests.jsonl"), "w", encoding="utf-8") as out:
            out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        verdict = authenticity(run)
        self.assertEqual(verdict.status, "no")
        self.assertTrue(verdict.detail.startswith("requests.jsonl: text differs from line 1: expected '{\"case\""),
                        verdict.detail)
        self.assertNotIn("got nothing", verdict.detail)


class OddHandinTest(unittest.TestCase):
    def _grade(self, path: str) -> list[dict]:
        references = tempfile.mkdtemp(prefix="isl-test-")
        self.addCleanup(shutil.rmtree, references, ignore_errors=True)
        return grade_handin(path, PROJECT, references)

    def test_a_file_where_a_folder_goes_is_a_clear_row(self):
        path = os.path.join(temp_dir(self), "ola.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("ola/runs", "a file named like the runs folder")
            archive.writestr("ola/runs/baseline/summary.json", "{}")
        (row,) = self._grade(path)
        self.assertEqual(row["verdict"], "bad hand-in")
        self.assertEqual(row["reason"], "entry 'ola/runs/baseline/summary.json': clashes with a file of the same "
                                        "name as its folder")

    def test_a_path_longer_or_deeper_than_a_hand_in_s_is_a_clear_row(self):
        # A file name past the file system's 255 bytes, 3,000 folders deep, 30 folders of 200 bytes.
        for entry in ("ola/" + "a" * 300 + ".md", "ola/" + "d/" * 3000 + "x.md", "ola/" + ("b" * 200 + "/") * 30 + "x"):
            with self.subTest(entry=entry[:12]):
                path = os.path.join(temp_dir(self), "ola.zip")
                with zipfile.ZipFile(path, "w") as archive:
                    archive.writestr(entry, "x")
                (row,) = self._grade(path)
                self.assertEqual(row["verdict"], "bad hand-in")
                self.assertEqual(row["reason"], f"entry {entry[:77] + '...'!r}: a path longer or deeper than a hand-in's")

    def test_a_hand_in_record_naming_an_impossible_path_is_tampered_and_its_runs_graded(self):
        folder = os.path.join(temp_dir(self), "pia")
        shutil.copytree(os.path.join(EXPECTED, "baseline"), os.path.join(folder, "runs", "baseline"))
        with open(os.path.join(folder, "HANDIN.json"), "w", encoding="utf-8") as out:
            json.dump({"tool": "infer-sched-lab", "kind": "handin", "version": "0.1.0", "runs": ["baseline"],
                       "files": {"runs/baseline/\u0000manifest.json": "0" * 64}}, out)
        rows = {row["run"]: row for row in self._grade(folder)}
        baseline = rows["runs/baseline"]
        self.assertEqual((baseline["verdict"], baseline["authentic"], baseline["tampered"]), ("same", "yes", "yes"))
        self.assertEqual([rows[f"runs/{name}"]["verdict"] for name in
                          ("prefix-broken", "deadline30", "output-heavy", "u6-640")], ["missing"] * 4)


    def test_a_hand_in_record_with_a_version_that_is_not_one_says_so(self):
        for version in (float("nan"), {"a": 1}, "9" * 65):
            with self.subTest(version=str(version)[:10]):
                folder = os.path.join(temp_dir(self), "qin")
                shutil.copytree(os.path.join(EXPECTED, "baseline"), os.path.join(folder, "runs", "baseline"))
                with open(os.path.join(folder, "HANDIN.json"), "w", encoding="utf-8") as out:
                    json.dump({"kind": "handin", "version": version, "files": {}}, out)
                row = {r["run"]: r for r in self._grade(folder)}["runs/baseline"]
                self.assertEqual((row["lab_version"], row["tampered"]), ("", "no"))
                self.assertEqual(row["reason"], "HANDIN.json: field 'version' is not a lab version")


class HandinNameTest(unittest.TestCase):
    def test_a_hand_in_name_with_a_control_character_is_refused(self):
        from sched.course.handin import Handin, HandinError, write_handin
        folder = temp_dir(self)
        for name in ("zhang\nsan.zip", "zhang\tsan.zip"):
            with self.subTest(name=repr(name)):
                with self.assertRaises(HandinError) as raised:
                    write_handin(Handin({"prediction.md": b"x"}, ()), os.path.join(folder, name))
                self.assertIn("control character", raised.exception.problems[0])
                self.assertEqual(os.listdir(folder), [])


class GradeOutTest(unittest.TestCase):
    """--out that cannot be written is refused before any hand-in is graded (a class can take minutes)."""

    def test_an_out_in_a_missing_folder_is_refused_before_grading(self):
        out = os.path.join(temp_dir(self), "no-such-folder", "grades.csv")
        with mock.patch("sched.commands.course.grade_class", side_effect=AssertionError("graded")) as grade:
            code, stdout, err = run_cli(["grade", os.path.join(EXPECTED, "baseline"), "--out", out])
        self.assertEqual((code, stdout), (2, ""), err)
        self.assertIn("no-such-folder does not exist", err)
        grade.assert_not_called()

    def test_one_row_is_one_row(self):
        out = os.path.join(temp_dir(self), "grades.csv")
        code, stdout, err = run_cli(["grade", os.path.join(temp_dir(self), "gone.zip"), "--out", out])
        self.assertEqual(code, 0, err)
        self.assertTrue(stdout.startswith("graded 1 hand-in, 1 row: 1 bad hand-in; 0 not authentic; wrote "), stdout)

    def test_an_out_that_is_a_folder_suggests_a_grade_sheet(self):
        folder = temp_dir(self)
        with mock.patch("sched.commands.course.grade_class", side_effect=AssertionError("graded")) as grade:
            code, _, err = run_cli(["grade", os.path.join(EXPECTED, "baseline"), "--out", folder, "--force"])
        self.assertEqual(code, 2)
        self.assertIn(f"is a directory; give a file name, e.g. {os.path.join(folder, 'grades.csv')}", err)
        grade.assert_not_called()


if __name__ == "__main__":
    unittest.main()
