#!/usr/bin/python3
"""Writes the example task files built from the synthetic data (seed 000, section 4.1).

    make eval-tasks   (= bin/tokenizer synth --n 400 --seed 99 | make_synth.py evaluator/tasks)

synth_mc.jsonl  multiple choice: the context is a line up to the start of its target run;
                the choices are the 8 characters of the run as written (noise included), and
                three copies with another letter. Only the prompt letter ("F>") tells them
                apart, so a model that learnt the task picks the right one. Rows stay under
                68 tokens with the bytes vocabulary, so small test models (max_seq 80) fit.
synth_em.jsonl  exact match: the prompt is a line up to and including the first letter of its
                run (lines whose run starts with noise are left out); the answer is the other
                7 letters, the run's most likely continuation.
Seed 99 is not a training seed of the tests or the demo (they use 7), so the lines are new.
"""
import json
import random
import sys

RUN = 8


def main():
    out = sys.argv[1]
    rnd = random.Random(99)
    mc, em = [], []
    for line in sys.stdin:
        line = line.rstrip("\n")
        letter, body = line[0], line[2:]
        # the run: the 8-long window holding only the letter and noise with the most letters
        start = max(range(len(body) - RUN + 1),
                    key=lambda s: sum(c == letter for c in body[s:s + RUN])
                    if all(c in (letter, "!") for c in body[s:s + RUN]) else -1)
        ctx, rest = line[:2 + start], line[2 + start:]
        if len(mc) < 40:
            others = rnd.sample([c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c != letter], 3)
            run = rest[:RUN]  # the run itself: short rows fit small test models
            choices = [run] + [run.replace(letter, o) for o in others]
            order = list(range(4))
            rnd.shuffle(order)
            mc.append({"context": ctx, "choices": [choices[i] for i in order],
                       "label": order.index(0)})
        if len(em) < 40 and body[start] == letter:
            em.append({"prompt": line[:2 + start + 1], "answer": letter * (RUN - 1)})
    with open(f"{out}/synth_mc.jsonl", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in mc)
    with open(f"{out}/synth_em.jsonl", "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in em)


if __name__ == "__main__":
    main()
