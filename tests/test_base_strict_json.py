"""sched.base.strict_json: what plain json.loads lets through, refused with the field's path.

Expected values are from RFC 8259 (no NaN or Infinity in JSON; names "SHOULD be unique") and the
module's contract; each row is a text, where it comes from, and the words of the one error.
"""

import unittest

from sched.base.cmdline import InputError
from sched.base.strict_json import printable_text, strict_json, whole_number


class StrictJsonTest(unittest.TestCase):
    def test_refusals_name_the_path(self):
        table = [
            ('{"a": 1, "a": 2}', "field 'a': written twice in one object"),
            ('{"x": {"y": [0, {"z": 1, "z": 1}]}}', "field 'x.y[1].z': written twice"),
            ('{"s": {"a": NaN}}', "field 's.a': must be a finite number, got NaN"),
            ('{"list": [1, -Infinity]}', "field 'list[1]': must be a finite number, got -Infinity"),
            ('{"b": 1e999}', "field 'b': must be a finite number, got Infinity (written 1e999)"),
            ('{"n": ' + "9" * 31 + "}", "field 'n': an integer of 31 digits is no measurement"),
            ("[NaN]", "field '[0]': must be a finite number, got NaN"),
            ('{"a": 1,}', "not valid JSON at line 1"),
            ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ]
        for text, words in table:
            with self.subTest(text=text[:40]):
                with self.assertRaises(InputError) as caught:
                    strict_json(text, "f.json")
                self.assertTrue(str(caught.exception).startswith("f.json: "), caught.exception)
                self.assertIn(words, str(caught.exception))

    def test_a_record_is_named_by_its_id(self):
        with self.assertRaises(InputError) as caught:
            strict_json('{"request_id": "r-7", "input_toks": 3, "input_toks": 4}', "run.jsonl: line 8", "request_id")
        self.assertEqual(str(caught.exception), "run.jsonl: line 8 (r-7): field 'input_toks': written twice in one "
                                                "object (JSON would keep only the last); write it once")

    def test_what_is_allowed_reads_as_json_loads_reads_it(self):
        self.assertEqual(strict_json('{"a": [1, 2.5, null, "x"], "b": {"c": true}}', "f"),
                         {"a": [1, 2.5, None, "x"], "b": {"c": True}})
        self.assertEqual(strict_json('{"a": [{"k": 1}, {"k": 2}]}', "f"), {"a": [{"k": 1}, {"k": 2}]})  # one per object

    def test_nan_as_null_still_refuses_a_key_twice(self):
        self.assertEqual(strict_json('{"a": NaN, "b": 1e999, "c": -Infinity}', "f", nan_as_null=True),
                         {"a": None, "b": None, "c": None})
        with self.assertRaises(InputError):
            strict_json('{"a": NaN, "a": 1}', "f", nan_as_null=True)

    def test_whole_number(self):
        self.assertEqual(whole_number(2588, "w"), 2588)
        table = [(2588.0, "written without a decimal point, got 2588.0"), (3.7, "must be a whole number, got 3.7"),
                 ("2588", "must be a finite number"), (True, "must be a finite number"), (-1, "between 0 and"),
                 (None, "missing or not a finite number")]
        for value, words in table:
            with self.subTest(value=value):
                with self.assertRaises(InputError) as caught:
                    whole_number(value, "w")
                self.assertIn(words, str(caught.exception))

    def test_printable_text(self):
        self.assertEqual(printable_text("Llama 3.1 8B", "p"), "Llama 3.1 8B")
        for value, words in (("a\nb", "control character \\n"), ("\x1b[31m", "control character \\x1b"),
                             (["a"], "must be a string"), ("x" * 201, "longer than 200")):
            with self.subTest(value=value):
                with self.assertRaises(InputError) as caught:
                    printable_text(value, "p")
                self.assertIn(words, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
