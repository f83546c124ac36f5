"""Bad real runs for ``calibrate`` and ``import-results``, bad vLLM artifacts for ``explain``/``diff``/
``compare``, and the vLLM run's command line (a breaker's findings on the vLLM engine).

Every bad input is one stderr line naming the file, the request and the field, exit 2; nothing here
replays a run (``calibrate`` refuses before its fit), so the file stays fast.
"""

import json
import os
import shutil
import unittest

from sched.timing.calibrate import load_real_run
from tests.helpers import PROJECT, assert_bad_input, read, run_cli, temp_dir

RUN_DIR = os.path.join(PROJECT, "tests", "data", "llmservingsim-vllm-rtx4090-run")


def run_lines(count=20):
    with open(os.path.join(RUN_DIR, "requests.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()][:count]


def meta_document(count=20):
    meta = json.loads(read(os.path.join(RUN_DIR, "meta.json")))
    meta["num_requests"] = count
    return meta


def write_run(base, name, lines, meta=None, encoding="utf-8"):
    """``base/name/requests.jsonl`` (``lines``: dicts, or raw text lines) with a meta.json; its path."""
    directory = os.path.join(base, name)
    os.makedirs(directory)
    with open(os.path.join(directory, "requests.jsonl"), "w", encoding=encoding) as out:
        out.writelines((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    with open(os.path.join(directory, "meta.json"), "w", encoding="utf-8") as out:
        json.dump(meta or meta_document(len(lines)), out)
    return os.path.join(directory, "requests.jsonl")


def changed(index, **fields):
    """The 20-line run with request ``index``'s fields replaced."""
    lines = run_lines()
    lines[index] = dict(lines[index], **fields)
    return lines


class CalibrateInputTest(unittest.TestCase):
    def test_bad_runs_are_refused_naming_the_field(self):
        """Each case: exit 2, one line naming the file, the request and the field (never exit 3, never
        "did not finish" for a time that is present but not finite, never the whole settings dict)."""
        base = temp_dir(self)
        nan_line = json.dumps(run_lines()[5]).replace(str(run_lines()[5]["first_token_ts"]), "NaN")
        inf_line = json.dumps(run_lines()[5]).replace(str(run_lines()[5]["last_token_ts"]), "Infinity")
        seqs0 = meta_document()
        seqs0["engine_kwargs"]["max_num_seqs"] = 0
        seqs0["resolved_config"]["scheduler_config"]["max_num_seqs"] = 0
        cases = {
            # a first token but no output token: the replay would wait forever (it was exit 3)
            "output_toks 0": (changed(1), {"output_toks": 0}, None,
                              ["line 2 (bench-1)", "field 'output_toks'"]),
            # the id becomes the workload's name: the run would refuse it (lab.md §7)
            "id with a line break": (changed(5, request_id="bench-5\nFAKE: ok"), {}, None,
                                     ["request 5", "field 'request_id'", "must be printable"]),
            "id of 100 characters": (changed(7, request_id="x" * 100), {}, None,
                                     ["request 7", "field 'request_id'", "at most 64 characters"]),
            "first token NaN": ([*run_lines()[:5], nan_line, *run_lines()[6:]], {}, None,
                                ["line 6 (bench-5)", "field 'first_token_ts'", "finite", "NaN"]),
            "last token Infinity": ([*run_lines()[:5], inf_line, *run_lines()[6:]], {}, None,
                                    ["line 6 (bench-5)", "field 'last_token_ts'", "finite", "Infinity"]),
            "max_num_seqs 0": (run_lines(), {}, seqs0,
                               ["meta.json", "field 'engine_kwargs.max_num_seqs'", "at least 1, got 0"]),
        }
        for name, (lines, change, meta, mentions) in cases.items():
            with self.subTest(name):
                if change:
                    lines = changed(1, **change)
                run = write_run(base, name.replace(" ", "_"), lines, meta)
                out = os.path.join(base, "out")
                code, stdout, err = run_cli(["calibrate", run, "--train-first", "5", "--out", out])
                self.assertEqual((code, stdout), (2, ""), err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                for mention in mentions + [os.path.basename(os.path.dirname(run))]:
                    self.assertIn(mention, err)
                self.assertNotIn("did not finish", err)
                self.assertNotIn("{'num_gpu_blocks'", err)
                self.assertFalse(os.path.exists(out))

    def test_import_results_shares_the_line_checks(self):
        """import-results reads the same lines: output_toks 0 after a first token is refused there too."""
        base = temp_dir(self)
        run = write_run(base, "zero", changed(1, output_toks=0))
        assert_bad_input(self, ["import-results", run, "--artifacts", os.path.join(base, "imp")],
                         "line 2 (bench-1): field 'output_toks'")
        self.assertFalse(os.path.exists(os.path.join(base, "imp")))

    def test_a_bom_is_read_by_calibrate_as_by_import_results(self):
        """A UTF-8 BOM before the first line: the same requests as without it, for both commands."""
        base = temp_dir(self)
        plain = load_real_run(write_run(base, "plain", run_lines()))
        bom = write_run(base, "bom", run_lines(), encoding="utf-8-sig")
        with open(bom, "rb") as handle:
            self.assertEqual(handle.read(3), b"\xef\xbb\xbf")
        self.assertEqual(load_real_run(bom).records, plain.records)
        code, _, err = run_cli(["import-results", bom, "--artifacts", os.path.join(base, "imp")])
        self.assertEqual(code, 0, err)


def vllm_run(test):
    """The baseline run on the vLLM engine (ample KV blocks): request 3 is U3, arrival 3, admitted 3, done 19."""
    base = temp_dir(test)
    out = os.path.join(base, "run")
    code, _, err = run_cli(["--engine", "vllm", "--artifacts", out])
    test.assertEqual(code, 0, err)
    return base, out


def edited(base, run, name, change, index=3):
    """A copy of ``run`` whose requests.jsonl line ``index`` is ``change(line)``; its path and that request."""
    copy = os.path.join(base, name)
    shutil.copytree(run, copy)
    path = os.path.join(copy, "requests.jsonl")
    lines = read(path).splitlines()
    line = json.loads(lines[index])
    lines[index] = json.dumps(change(dict(line)))
    with open(path, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return copy, line["name"]


def assert_refused(test, argv, mentions):
    """``main(argv)``: exit 2, nothing on stdout, one stderr line naming every one of ``mentions``."""
    code, out, err = run_cli(argv)
    test.assertEqual((code, out), (2, ""), err)
    test.assertEqual(len(err.strip().splitlines()), 1, err)
    for mention in mentions:
        test.assertIn(mention, err)


class VllmArtifactTest(unittest.TestCase):
    def test_impossible_preemption_fields(self):
        """explain and diff both refuse them (one check, sched.output.vllm_artifacts.preemption_problem)."""
        base, run = vllm_run(self)

        def with_fields(**fields):
            return lambda line: dict(line, **fields)

        def without(key):
            return lambda line: {k: v for k, v in line.items() if k != key}

        def late(line):  # one preemption after the request ended (tick 24, done 19)
            return dict(line, num_preemptions=1, preempted_at=[line["done_at"] + 5])

        def early(line):  # one preemption before the request arrived (tick 2, arrival 3)
            return dict(line, num_preemptions=1, preempted_at=[line["arrival"] - 1])
        cases = {
            "preempted_at 10**15": (with_fields(num_preemptions=1, preempted_at=[10**15]), "'preempted_at'"),
            "preempted_at -3": (with_fields(num_preemptions=1, preempted_at=[-3]), "'preempted_at'"),
            "preempted_at 12.5": (with_fields(num_preemptions=1, preempted_at=[12.5]), "'preempted_at'"),
            "preempted_at a string": (with_fields(num_preemptions=1, preempted_at="12"), "'preempted_at'"),
            "preempted_at an object": (with_fields(num_preemptions=1, preempted_at={}), "'preempted_at'"),
            "preempted_at null": (with_fields(num_preemptions=0, preempted_at=None), "'preempted_at'"),
            "preempted_at after done": (late, "'preempted_at'"),
            "preempted_at before arrival": (early, "'preempted_at'"),
            "preempted_at missing": (without("preempted_at"), "'preempted_at': missing"),
            "num_preemptions a string": (with_fields(num_preemptions="1"), "'num_preemptions'"),
            "num_preemptions -1": (with_fields(num_preemptions=-1), "'num_preemptions'"),
            "num_preemptions true": (with_fields(num_preemptions=True), "'num_preemptions'"),
            "num_preemptions 10**15": (with_fields(num_preemptions=10**15), "'num_preemptions'"),
            "num_preemptions missing": (without("num_preemptions"), "'num_preemptions': missing"),
            "count not the list's length": (with_fields(num_preemptions=2, preempted_at=[]), "'num_preemptions'"),
        }
        for name, (change, mention) in cases.items():
            copy, request = edited(base, run, name.replace(" ", "_"), change)
            named = [mention, f"request '{request}'", os.path.join(copy, "requests.jsonl")]
            with self.subTest(name, command="explain"):
                assert_refused(self, ["explain", request, "--artifacts", copy], named)
            with self.subTest(name, command="diff"):
                assert_refused(self, ["diff", run, copy], named)

    def test_compare_refuses_negative_hit_tokens(self):
        base, run = vllm_run(self)
        copy, _ = edited(base, run, "hit_neg", lambda line: dict(line, hit_tokens=-16))
        assert_bad_input(self, ["compare", run, copy], "field 'hit_tokens'")


class VllmCommandLineTest(unittest.TestCase):
    def test_policy_given_twice_under_two_names(self):
        """--policy and --scheduling-policy are one setting: two different values are refused;
        the same value twice is fine (checked by the run writing its files)."""
        base = temp_dir(self)
        assert_bad_input(self, ["--engine", "vllm", "--scheduling-policy", "priority", "--policy", "fcfs",
                                "--artifacts", os.path.join(base, "a")], "--policy")
        self.assertFalse(os.path.exists(os.path.join(base, "a")))
        code, _, err = run_cli(["--engine", "vllm", "--scheduling-policy", "fcfs", "--policy", "fcfs",
                                "--artifacts", os.path.join(base, "b")])
        self.assertEqual(code, 0, err)

    def test_every_request_that_cannot_fit_is_named(self):
        """Three requests of 500, 600, 700 prompt tokens + 1 output need 32, 38, 44 blocks of 16 (the
        last token is never computed: ceil((p + 1 - 1) / 16)); 10 blocks leave 9 usable: three lines."""
        base = temp_dir(self)
        workload = os.path.join(base, "big.json")
        with open(workload, "w", encoding="utf-8") as out:
            json.dump({"requests": [{"name": n, "arrival": 0, "prefix_key": None, "prefix_tokens": 0,
                                     "suffix_tokens": p, "output_tokens": 1}
                                    for n, p in (("X", 500), ("Y", 600), ("Z", 700))]}, out)
        code, out, err = run_cli(["--engine", "vllm", "--workload", workload, "--num-gpu-blocks", "10",
                                  "--artifacts", os.path.join(base, "run")])
        self.assertEqual((code, out), (2, ""))
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 3, err)
        for line, (name, need) in zip(lines, (("X", 32), ("Y", 38), ("Z", 44))):
            self.assertIn(f"({name}): prompt", line)
            self.assertIn(f"need {need} KV blocks", line)


if __name__ == "__main__":
    unittest.main()
