#!/usr/bin/env bash
# Integration test of bin/evaluator --task code and its sandbox (issue 29): the shipped
# HumanEval and MBPP sets' canonical solutions score pass@1 = 1; a wrong answer, an infinite
# loop (spinning and sleeping), a fork bomb, a memory hog, a disk filler, a network caller and
# escape attempts (writing outside its directory, killing its parent, killing every process it
# can see, leaving an orphan behind) each score 0 beside one right answer that still passes, and
# leave the evaluator, the free disk and the process table as they were; pass@k of that problem
# (c = 1 of n = 12) is k/12; where the namespaces cannot be made (not root) the evaluator says
# so and --sandbox none runs trusted code. Then end to end: a tiny model trained on the toy
# language of small Python functions (bin/tokenizer pyfuncs) reaches pass@1 > 0 on held-out
# problems of it, through a live evaluator following the run, and a Free Transformer's samples
# (one latent per sample) go through the same path; the paper's table prints both.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_code 2
PY=/usr/bin/python3
ev() { timeout -k 5 300 bin/evaluator "$@"; }
val() { jq -r ".values[\"$2\"]" "$1"; }

# 1. the shipped problem sets: their canonical solutions pass
for f in example_humaneval example_mbpp; do
    ev --task code --file evaluator/tasks/$f.jsonl --canonical --quiet >"$W/$f.json" 2>"$W/$f.log"
    ok "$f: canonical solutions score pass@1 = 1" "[ \"\$(val $W/$f.json pass@1)\" = 1 ] && [ \"\$(val $W/$f.json end_passed)\" = 5 ]"
done

# 2. hostile completions of one problem (identity), the right one last
port=$(($(it_port_base 1)))
$PY - "$port" "$W/net.log" <<'PYEOF' 2>/dev/null & pids+=($!)
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
open(sys.argv[2], "a").write("listening\n")
s.settimeout(120)
while True:
    c, _ = s.accept()
    open(sys.argv[2], "a").write("connected\n")
    c.close()
PYEOF
wait_for "grep -q listening $W/net.log 2>/dev/null" 10
echo '{"task_id": "H/0", "prompt": "def ident(x):\n", "entry_point": "ident", "canonical_solution": "    return x\n", "test": "def check(candidate):\n    assert candidate(3) == 3\n"}' >"$W/h.jsonl"
$PY - "$W" "$port" >"$W/hc.jsonl" <<'PYEOF'
import json, sys
W, port = sys.argv[1], sys.argv[2]
bodies = [
    ("wrong", "    return x + 1\n"),
    ("spin", "    while True:\n        pass\n"),
    ("sleep", "    import time\n    while True:\n        time.sleep(0.1)\n"),
    ("forkbomb", "    import os\n    while True:\n        os.fork()\n"),
    # 8 GiB of address space: without the limit the allocation succeeds and the answer is right
    ("memory", "    b = bytearray(8 << 30)\n    return x\n"),
    # 1 MiB files until something stops it: gigabytes of real disk without the sandbox
    ("disk", "    i = 0\n    while True:\n        open('fill%d' % i, 'wb').write(b'x' * (1 << 20))\n        i += 1\n"),
    ("network", "    import socket\n    socket.create_connection(('127.0.0.1', %s), timeout=2).sendall(b'x')\n    return x\n" % port),
    ("outside", "    open('%s/escaped', 'w').write('x')\n    return x\n" % W),
    ("killparent", "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return x\n"),
    ("killall", "    import os, signal\n    for p in os.listdir('/proc'):\n        if p.isdigit():\n            try:\n                os.kill(int(p), signal.SIGKILL)\n            except OSError:\n                pass\n"),
    ("orphan", "    import os, time\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(60)\n"),
    ("right", "    return x\n"),
]
for name, body in bodies:
    print(json.dumps({"task_id": "H/0", "completion": body, "name": name}))
PYEOF
sandbox_procs() { ps -eo uid= | awk '$1 >= 1073741824' | wc -l; }
avail() { df -Pk "$1" | awk 'NR == 2 {print $4}'; }
root0=$(avail /); tmp0=$(avail /tmp)
ev --task code --file "$W/h.jsonl" --completions "$W/hc.jsonl" --timeout 3 --cpu-limit 1 --jobs 2 \
    --samples-out "$W/hs.jsonl" --out "$W/results.jsonl" --run hostile >"$W/h.json" 2>"$W/h.log"; rc=$?
ok "the evaluator survives the hostile programs (exit $rc) and scores them" "[ $rc = 0 ] && [ \"\$(val $W/h.json samples)\" = 12 ]"
end_of() { jq -r "select(.sample == $1) | .end" "$W/hs.jsonl"; }
names=(wrong spin sleep forkbomb memory disk network outside killparent killall orphan right)
want=(failed cpu wall procs memory disk failed failed failed signal failed passed)
for i in "${!names[@]}"; do
    got=$(end_of $i)
    if [ "${names[$i]}" = right ]; then
        ok "the right answer after them passes" "[ '$got' = passed ]"
    else
        ok "${names[$i]} scores 0, ended by ${want[$i]} (got $got)" "[ '$got' = '${want[$i]}' ]"
    fi
done
ok "pass@k = k/12 for c = 1 of n = 12 (k = 1, 5, 12)" \
   "jq -e '.values | (.\"pass@1\" - 1/12 | fabs) < 1e-12 and (.\"pass@5\" - 5/12 | fabs) < 1e-12 and .\"pass@12\" == 1' $W/h.json >/dev/null"
ok "the ends are counted by limit" \
   "jq -e '.values | .end_passed == 1 and .end_failed == 5 and .end_cpu == 1 and .end_wall == 1 and .end_procs == 1 and .end_memory == 1 and .end_disk == 1 and .end_signal == 1' $W/h.json >/dev/null"
ok "the result went to --out with the run name" "jq -e 'select(.run == \"hostile\" and .task == \"code\")' $W/results.jsonl >/dev/null"
ok "nothing was written outside the working directory" "[ ! -e $W/escaped ]"
ok "no connection reached this machine's listener" "! grep -q connected $W/net.log"
ok "no sandboxed process is left (fork bomb, orphan)" "[ \$(sandbox_procs) = 0 ]"
ok "no program is left running" "! pgrep -f 'python3 main.py' >/dev/null"
root1=$(avail /); tmp1=$(avail /tmp)
# other programs on the machine write too: a filler that escaped would have written gigabytes
ok "free disk as it was (/: $root0 -> $root1 KiB, /tmp: $tmp0 -> $tmp1 KiB)" \
   "[ $root1 -gt \$(($root0 - 262144)) ] && [ $tmp1 -gt \$(($tmp0 - 262144)) ]"

# 3. where the namespaces cannot be made (an unprivileged user): one line naming the way out
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    (cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups "$OLDPWD/bin/evaluator" --task code \
        --file "$OLDPWD/evaluator/tasks/example_humaneval.jsonl" --canonical --quiet) >"$W/nr.json" 2>"$W/nr.log"; rc=$?
    ok "not root: refused (exit $rc) in one line that names --sandbox none" \
       "[ $rc = 2 ] && [ \$(wc -l < $W/nr.log) = 1 ] && grep -q 'needs root.*--sandbox none' $W/nr.log"
    (cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups "$OLDPWD/bin/evaluator" --task code \
        --file "$OLDPWD/evaluator/tasks/example_humaneval.jsonl" --canonical --quiet --sandbox none) >"$W/nr2.json" 2>&1
    ok "not root, --sandbox none: trusted code runs" "[ \"\$(val $W/nr2.json pass@1)\" = 1 ]"
fi
ev --task code --file evaluator/tasks/example_mbpp.jsonl --completions /dev/null --quiet 2>"$W/bad.log"; rc=$?
ok "an empty completions file is refused in one line" "[ $rc = 2 ] && [ \$(wc -l < $W/bad.log) = 1 ] && grep -q 'same number' $W/bad.log"
ev --task code --file evaluator/tasks/example_mbpp.jsonl --canonical --interpreter /no/python 2>"$W/bad2.log"; rc=$?
ok "a missing interpreter is refused in one line" "[ $rc = 2 ] && [ \$(wc -l < $W/bad2.log) = 1 ] && grep -q '/no/python' $W/bad2.log"

it_done
