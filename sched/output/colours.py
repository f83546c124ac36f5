"""One colour vocabulary for the three time-line pictures (tick, vLLM steps, milliseconds).

Okabe–Ito colours (safe for colour-blind readers). The same phase has the same colour in every
picture, and the same marker the same shape: the lab engine's picture (:mod:`sched.output.picture`),
the vLLM engine's lanes in it (:mod:`sched.output.vllm_picture`) and the millisecond picture of a
step-model run (:mod:`sched.output.ms_picture`).

- waiting: grey; prefill: sky blue; prefill at the chunk cap: blue; decode: orange;
- preempted, back in the queue: pink; recompute after a preemption: reddish purple;
- admission: a black triangle (green on a cache hit); first token: a white circle; done: a black
  bar; timeout: a vermillion X; preemption: a vermillion triangle above the lane;
- the case's P95 TTFT request: a pale yellow band behind its lane.
"""

__all__ = ["GREY", "SKY", "BLUE", "ORANGE", "PINK", "PURPLE", "GREEN", "VERMILLION", "BLACK", "P95_FILL",
           "P95_STROKE", "PHASE_COLOURS"]

GREY, SKY, BLUE, ORANGE = "#d0d0d0", "#56b4e9", "#0072b2", "#e69f00"
PINK, PURPLE = "#f4c6dc", "#cc79a7"
GREEN, VERMILLION, BLACK = "#009e73", "#d55e00", "#000000"
P95_FILL, P95_STROKE = "#fff1b8", "#e6c300"

#: Phase -> fill, the same in every picture that draws the phase.
PHASE_COLOURS = {"waiting": GREY, "prefill": SKY, "chunked": BLUE, "decode": ORANGE,
                 "preempted": PINK, "recompute": PURPLE}
