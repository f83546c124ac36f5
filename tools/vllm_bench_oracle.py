"""vLLM's own benchmark code as an oracle for the lab's bench metrics and re-timed arrivals.

A developer tool: it imports vLLM 0.33.0 (``vllm.benchmarks.serve``) from its own venv and is never
run by the tests (the project never imports vLLM). It writes two JSON fixtures that
``tests/test_core_bench_metrics_vllm.py`` and ``tests/test_workload_bench_arrivals_vllm.py`` read:

- ``metrics.json``: ``calculate_metrics`` of vLLM on the same requests the lab reads, for
  (a) the imported RTX 4090 run (``tests/data/llmservingsim-vllm-rtx4090-run/requests.jsonl``),
  (b) ``--step-model`` runs of the lab (the tool runs the lab's command line with this interpreter and
  reads the run's ``requests.jsonl``), (c) hand-made edge cases, each under several
  ``--metric-percentiles``/``--goodput`` variants. Every input is named with its sha256.
- ``arrivals.json``: the send times of vLLM's ``get_request`` for several (rate, burstiness, seed).

Usage (from the repository root, vLLM installed in ``venv``)::

    venv/bin/python tools/vllm_bench_oracle.py [--out-dir tests/data/vllm-bench-oracle]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_4090 = "tests/data/llmservingsim-vllm-rtx4090-run/requests.jsonl"
AZURE_1000 = "tests/data/azure_conv_2023_1000.csv"
STEP_MODEL = "tests/data/vllm-bench-oracle/step-model-rtx4090.json"

#: The lab's step-model runs: name -> the run's extra flags (the workload is the first 120 Azure rows).
LAB_RUNS = {
    "step-overload": ["--request-rate", "6", "--burstiness", "0.5", "--seed", "3"],
    "step-timeouts": ["--no-async-scheduling", "--request-rate", "40", "--seed", "11", "--max-concurrency", "24",
                      "--timeout-ms", "6000"],
}

#: (num_requests, request_rate, burstiness, seed) fed to get_request.
ARRIVALS = [(120, 6.0, 0.5, 3), (120, 40.0, 1.0, 11), (50, 1.0, 1.0, 0), (200, 10.0, 0.3, 42), (100, 2.5, 4.0, 7),
            (40, 7.0, 0.05, 1), (30, 0.5, 1.0, 4294967295), (1000, 1000.0, 1.0, 12345), (10, 3.0, math.inf, 0),
            (5, math.inf, 1.0, 0), (1, 2.0, 1.0, 5), (64, 16.0, 2.0, 2026)]


def sha256_of(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


class NoTokenizer:
    """Stands in for a tokenizer: every request carries its usage count, so calling it is an error."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError("calculate_metrics asked for a tokenizer: a request lacks its output count")


# --- (a) the imported RTX 4090 run -------------------------------------------------------------

def outputs_of_request_jsonl(path: str, rfo) -> tuple[list, float]:
    """One RequestFuncOutput per line: seconds from ``queued_ts``; no per-token times, so no ITL."""
    outputs, starts, ends = [], [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            raw = json.loads(line)
            first, last, queued = raw.get("first_token_ts"), raw.get("last_token_ts"), raw["queued_ts"]
            starts.append(queued)
            if last is not None:
                ends.append(last)
            if first is None or last is None or not raw["output_toks"]:
                outputs.append(rfo(success=False, error="no output", prompt_len=raw["input_toks"], start_time=queued))
                continue
            outputs.append(rfo(success=True, prompt_len=raw["input_toks"], output_tokens=raw["output_toks"],
                               ttft=first - queued, itl=[], latency=last - queued, start_time=queued))
    return outputs, max(ends) - min(starts)


# --- (b) the lab's step-model runs -------------------------------------------------------------

def run_lab(python: str, work: str) -> dict:
    """Run the lab's import and step-model runs; returns name -> (command, requests.jsonl path)."""
    workload = os.path.join(work, "azure120.json")
    importing = ["infer_sched_lab.py", "import", "azure", AZURE_1000, "--limit", "120", "-o", workload]
    subprocess.run([python, *importing], cwd=ROOT, check=True, capture_output=True)
    runs = {}
    for name, flags in LAB_RUNS.items():
        target = os.path.join(work, name)
        command = ["infer_sched_lab.py", "--engine", "vllm", "--workload", workload, "--step-model", STEP_MODEL,
                   *flags, "--artifacts", target]
        subprocess.run([python, *command], cwd=ROOT, check=True, capture_output=True)
        shown = [part.replace(work + os.sep, "") for part in command]
        runs[name] = {"import_command": [part.replace(work + os.sep, "") for part in importing],
                      "run_command": shown, "requests_jsonl": os.path.join(target, "requests.jsonl")}
    return runs


def outputs_of_lab_run(path: str, rfo) -> tuple[list, float]:
    """One RequestFuncOutput per line of a lab run's ``requests.jsonl`` (µs ticks on a step-model run):
    the request was sent at ``arrival``; each output token is one streamed chunk at its stamp; a
    request that did not finish (``status`` other than ``ok``) failed after what it had received.
    Duration: from the clock's origin (dispatch start) to the latest ``done_at`` of any request."""
    outputs, latest = [], 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            raw = json.loads(line)
            arrival = raw["arrival"]
            times = [t for t, count in raw["token_runs"] for _ in range(count)]
            if raw["done_at"] is not None:
                latest = max(latest, raw["done_at"])
            ttft = (times[0] - arrival) / 1e6 if times else 0.0
            itl = [(b - a) / 1e6 for a, b in zip(times, times[1:])]
            if raw["status"] != "ok":
                outputs.append(rfo(success=False, error=f"lab status {raw['status']}", prompt_len=raw["prompt_tokens"],
                                   ttft=ttft, itl=itl, start_time=arrival / 1e6))
                continue
            assert len(times) == raw["output_tokens"], raw["name"]
            outputs.append(rfo(success=True, prompt_len=raw["prompt_tokens"], output_tokens=len(times), ttft=ttft,
                               itl=itl, latency=(raw["done_at"] - arrival) / 1e6, start_time=arrival / 1e6))
    return outputs, latest / 1e6


# --- (c) hand-made cases -----------------------------------------------------------------------

def hand_cases(rfo) -> dict:
    """name -> (outputs, duration s, tokenizer given?) for the edge cases."""
    ok = lambda prompt, out, ttft, itl, latency, start: rfo(  # noqa: E731
        success=True, prompt_len=prompt, output_tokens=out, ttft=ttft, itl=list(itl), latency=latency,
        start_time=start)
    cases = {
        "mixed": ([ok(10, 3, 0.1, [0.05, 0.05], 0.2, 100.0), ok(20, 1, 0.3, [], 0.3, 100.5),
                   rfo(success=False, prompt_len=5, ttft=0.05, itl=[0.01], error="boom", start_time=101.0),
                   ok(30, 5, 0.2, [0.3], 0.5, 101.5)], 2.0, True),
        "one-token-outputs": ([ok(8 + i, 1, 0.05 * (i + 1), [], 0.05 * (i + 1), float(i)) for i in range(5)],
                              5.5, True),
        "zero-itl-gaps": ([ok(12, 6, 0.2, [0.0, 0.0, 0.02, 0.0], 0.22, 0.0), ok(7, 4, 0.1, [0.0, 0.0, 0.0], 0.1, 0.1),
                           ok(9, 3, 0.15, [0.0, 0.04], 0.19, 0.2)], 0.5, True),
        "single-request": ([ok(100, 17, 0.0421, [0.011] * 16, 0.0421 + 0.176, 3.0)], 0.25, True),
        "all-failed": ([rfo(success=False, prompt_len=10, ttft=0.3, itl=[0.02, 0.03], error="Traceback: timeout",
                            start_time=0.0),
                        rfo(success=False, prompt_len=11, error="", start_time=0.1),
                        rfo(success=False, prompt_len=12, error="Never received a valid chunk", start_time=0.2)],
                       3.0, True),
        "on-the-limit": ([ok(10, 5, 0.25, [0.25] * 4, 1.25, 0.0), ok(10, 4, 0.1234567, [0.2] * 3, 0.7, 0.1),
                          ok(10, 1, 0.3, [], 0.3, 0.2), ok(10, 3, 0.3000001, [0.1, 0.1], 0.5000001, 0.3),
                          ok(10, 2, 0.0, [0.0], 0.0, 0.4)], 1.5, True),
        "missing-usage": ([rfo(success=True, prompt_len=50, output_tokens=0, ttft=0.08, itl=[0.03, 0.04], latency=0.15,
                               start_time=0.0, generated_text="three chunks"),
                           ok(60, 4, 0.09, [0.02, 0.02, 0.02], 0.15, 0.05)], 0.4, False),
        "identical-values": ([ok(16, 5, 0.1, [0.025] * 4, 0.2, 0.1 * i) for i in range(7)], 1.0, True),
    }
    rng = random.Random(19)
    many, end = [], 0.0
    for i in range(200):
        start = i * 0.05 + rng.random() * 0.01
        prompt = rng.randint(1, 4000)
        if rng.random() < 0.1:
            many.append(rfo(success=False, prompt_len=prompt, ttft=rng.random(), itl=[rng.random() * 0.1],
                            error="HTTP 500" if i % 2 else "", start_time=start))
            continue
        out = rng.choice([1, 1, 2, 3, rng.randint(4, 60)])
        chunks = max(1, out - rng.randint(0, out // 3))
        ttft = rng.expovariate(5)
        itl = [0.0 if rng.random() < 0.05 else rng.expovariate(40) for _ in range(chunks - 1)]
        latency = ttft + sum(itl)
        end = max(end, start + latency)
        many.append(ok(prompt, out, ttft, itl, latency, start))
    cases["random-200"] = (many, end + 0.5, True)
    return cases


def saved_result(outputs, output_lens, duration) -> dict:
    """What ``vllm bench serve --save-detailed`` keeps per request (its result file's lists)."""
    return {"duration": duration, "input_lens": [o.prompt_len for o in outputs], "output_lens": output_lens,
            "ttfts": [o.ttft for o in outputs], "itls": [list(o.itl) for o in outputs],
            "latencies": [o.latency for o in outputs], "start_times": [o.start_time for o in outputs],
            "errors": [o.error for o in outputs]}


# --- vLLM's numbers ----------------------------------------------------------------------------

def limit_on(value_s: float) -> float:
    """A limit in ms that lands exactly on ``value_s`` after vLLM's division by 1000."""
    ms = value_s * 1000
    for _ in range(64):
        if ms / 1000 == value_s:
            return ms
        ms = math.nextafter(ms, math.inf if ms / 1000 < value_s else -math.inf)
    raise RuntimeError(f"no ms limit lands on {value_s!r}")


def limits_on_values(outputs) -> dict:
    """ttft/tpot/e2el limits exactly on the median successful request's own values."""
    ok = sorted((o for o in outputs if o.success and o.output_tokens > 1), key=lambda o: o.ttft)
    pick = ok[len(ok) // 2]
    tpot = (pick.latency - pick.ttft) / (pick.output_tokens - 1)
    return {"ttft": limit_on(pick.ttft), "tpot": limit_on(tpot), "e2el": limit_on(pick.latency)}


def vllm_row(serve, outputs, duration, percentiles, goodput, tokenizer) -> tuple[dict, list]:
    """vLLM's calculate_metrics, laid out under the result-file keys of every percentile metric."""
    metrics, output_lens = serve.calculate_metrics(input_requests=[], outputs=outputs, dur_s=duration,
                                                   tokenizer=tokenizer, selected_percentiles=list(percentiles),
                                                   goodput_config_dict=dict(goodput or {}))
    row = {"duration": duration, "completed": metrics.completed, "failed": metrics.failed,
           "total_input_tokens": metrics.total_input, "total_output_tokens": metrics.total_output,
           "request_throughput": metrics.request_throughput,
           "request_goodput": metrics.request_goodput if goodput else None,
           "output_throughput": metrics.output_throughput, "total_token_throughput": metrics.total_token_throughput}
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std"):
            row[f"{stat}_{name}_ms"] = float(getattr(metrics, f"{stat}_{name}_ms"))
        for p, value in getattr(metrics, f"percentiles_{name}_ms"):
            word = str(int(p)) if float(p).is_integer() else str(p)   # vLLM's pNN key word
            row[f"p{word}_{name}_ms"] = float(value)
    row["max_output_tokens_per_s"] = float(metrics.max_output_tokens_per_s)
    row["max_concurrent_requests"] = int(metrics.max_concurrent_requests)
    return row, [int(n) for n in output_lens]


def send_times(serve, np, n, rate, burstiness, seed) -> list[float]:
    """The delays ``get_request`` sleeps before each request, read off a stubbed clock (time 0, so a
    sleep's argument is the request's send time); seeded as the client does (``np.random.seed``)."""
    slept = []

    async def fake_sleep(seconds):
        slept.append(seconds)

    serve.time = types.SimpleNamespace(time=lambda: 0.0)
    serve.asyncio = types.SimpleNamespace(sleep=fake_sleep)
    np.random.seed(seed)

    async def collect():
        times = []
        async for _ in serve.get_request([object()] * n, rate, burstiness):
            times.append(slept.pop() if slept else 0.0)
        return times

    return asyncio.run(collect())


def number(x):
    return "inf" if x == math.inf else x


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=os.path.join(ROOT, "tests/data/vllm-bench-oracle"))
    parser.add_argument("--lab-python", default=sys.executable, help="interpreter for the lab's runs")
    args = parser.parse_args(argv)
    import numpy as np
    import vllm
    from vllm.benchmarks import serve
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput as rfo

    header = {"generated_by": "tools/vllm_bench_oracle.py", "command": "venv/bin/python tools/vllm_bench_oracle.py",
              "vllm_version": vllm.__version__, "numpy_version": np.__version__,
              "python_version": sys.version.split()[0]}
    sources, cases = {}, []

    def add_cases(name, outputs, duration, variants, tokenizer):
        for percentiles, goodput in variants:
            row, _ = vllm_row(serve, outputs, duration, percentiles, goodput, tokenizer)
            cases.append({"source": name, "metric_percentiles": list(percentiles), "goodput": goodput, "vllm": row})

    wide = (0.0, 1.0, 33.3, 50.0, 99.9, 100.0)
    outputs, duration = outputs_of_request_jsonl(os.path.join(ROOT, RUN_4090), rfo)
    sources["rtx4090-run"] = {"kind": "request-jsonl", "path": RUN_4090,
                              "sha256": sha256_of(os.path.join(ROOT, RUN_4090)), "duration": duration,
                              "read_as": "TTFT first_token_ts - queued_ts, E2EL last_token_ts - queued_ts, no ITL "
                                         "samples; duration latest last_token_ts - earliest queued_ts"}
    add_cases("rtx4090-run", outputs, duration, [((99.0,), None), ((50.0, 90.0, 95.0, 99.0), {"ttft": 2000.0}),
                                                 (wide, limits_on_values(outputs))], NoTokenizer())
    with tempfile.TemporaryDirectory() as work:
        for name, run in run_lab(args.lab_python, work).items():
            outputs, duration = outputs_of_lab_run(run["requests_jsonl"], rfo)
            sources[name] = {"kind": "lab-step-model-run", "import_command": run["import_command"],
                             "run_command": run["run_command"],
                             "step_model_sha256": sha256_of(os.path.join(ROOT, STEP_MODEL)),
                             "requests_jsonl_sha256": sha256_of(run["requests_jsonl"]), "duration": duration}
            variants = [((99.0,), None), ((50.0, 90.0, 95.0, 99.0), {"ttft": 2000.0, "tpot": 50.0}),
                        (wide, limits_on_values(outputs))]
            add_cases(name, outputs, duration, variants, NoTokenizer())
    for name, (outputs, duration, with_tokenizer) in hand_cases(rfo).items():
        tokenizer = NoTokenizer() if with_tokenizer else None
        _, output_lens = vllm_row(serve, outputs, duration, (99.0,), None, tokenizer)
        sources["hand/" + name] = {"kind": "vllm-bench-result", "result": saved_result(outputs, output_lens, duration)}
        variants = [((99.0,), None), ((50.0, 90.0, 95.0, 99.0), {"ttft": 250.0}),
                    (wide, {"ttft": 250.0, "tpot": 250.0, "e2el": 1250.0}), ((99.9, 25.0), {"tpot": 0.0}),
                    ((10.0,), {"e2el": 0.0, "ttft": 123.4567})]
        add_cases("hand/" + name, outputs, duration, variants, tokenizer)

    arrivals = [{"num_requests": n, "request_rate": number(rate), "burstiness": number(b), "seed": seed,
                 "send_times": send_times(serve, np, n, rate, b, seed)} for n, rate, b, seed in ARRIVALS]
    os.makedirs(args.out_dir, exist_ok=True)
    metrics_doc = dict(header, functions=["vllm.benchmarks.serve.calculate_metrics"], sources=sources, cases=cases)
    arrivals_doc = dict(header, functions=["vllm.benchmarks.serve.get_request"],
                        seeding="np.random.seed(seed) immediately before get_request (no dataset draws between)",
                        cases=arrivals)
    for name, doc in (("metrics.json", metrics_doc), ("arrivals.json", arrivals_doc)):
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=1, allow_nan=False)
            out.write("\n")
    print(f"vLLM {vllm.__version__}: {len(cases)} metric cases, {len(arrivals)} arrival cases -> {args.out_dir}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
