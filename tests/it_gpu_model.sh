#!/usr/bin/env bash
# The performance model's pipeline (bench/gpu_model.sh, docs/DEVICES.md "The performance model"),
# in seconds, not its full run:
#  1. bench/gpu_model.py on synthetic counts built from known coefficients of its scaling form
#     (a0 + a1 L + aV V + B T (b0 + b1 L + bV V) + c1 L B T^2): the values it extrapolates to
#     config G are the form's own, the coalescing and the roofline bound follow from them (the
#     tensor-core FLOPs at the bf16 tensor peak, the CUDA-core FLOPs at the fp32 one; the bound
#     with a sector read and written moved twice from footprint_rw), the step
#     time is the sum of the rows, shared memory's wavefronts are charged at 132 x 1.83e9 a second (their
#     conflicts reported), the special-function units' operations at 132 x 16 x 1.83e9 (added to the
#     prediction, a term of the bound), counts without tensor_flops or sfu are refused, and the results file gets "gpu_model" labelled a prediction, the rest kept;
#  2. build/emu/bench/train_step counting one real emulated step (config S's shapes, 1 layer,
#     B=1, T=16, bf16, blocks sampled): the step is marked, every kernel the CPU profile of a
#     step has is there with FLOPs and bytes, the products are bf16 on tensor cores, attention's
#     bf16 kernels count their mma.sync products as tensor FLOPs and their shared-memory wavefronts,
#     and their exponentials (ex2) as special-function operations, at least one per score.
set -u
cd "$(dirname "$0")/.."
. tests/lib/pipeline.sh
it_init it_gpu_model 1
# 1. synthetic runs: kernel "k" with known coefficients per field; a product kind; host waits
/usr/bin/python3 - "$W" <<'PY'
import json, sys
W = sys.argv[1]
def f(c, L, T, V):   # a0 + a1 L + aV V + T (b0 + b1 L + bV V) + c1 L T^2 at B = 1
    return c[0] + c[1] * L + c[2] * V + T * (c[3] + c[4] * L + c[5] * V) + c[6] * L * T * T
# tensor_flops large enough that its time at the bf16 tensor peak is the bound: charged at the fp32
# peak (the model before tensor FLOPs were counted apart) the bound would be 15x too large
K = {"launches": (3, 5, 0, 0, 0, 0, 0), "threads": (0, 0, 0, 10, 20, 0, 0), "flops": (100, 7, 1, 3, 11, 2, 2),
     "tensor_flops": (0, 0, 0, 0, 0, 0, 4e5), "sfu": (0, 0, 0, 0, 0, 0, 1.2e3),
     "bytes_ld": (64, 32, 4, 8, 16, 4, 4), "bytes_st": (32, 0, 4, 4, 4, 0, 0), "sectors": (4, 2, 1, 1, 1, 1, 1),
     "footprint_sectors": (2, 1, 1, 1, 1, 0, 0), "footprint_rw_sectors": (3, 1, 1, 2, 1, 1, 0), "shared_bytes": (0,) * 7, "local_bytes": (0,) * 7,
     "shared_wavefronts": (0, 0, 0, 0, 0, 0, 30), "shared_wavefronts_ideal": (0, 0, 0, 0, 0, 0, 10)}
for L, T, V in [(1, 64, 1024), (2, 64, 1024), (1, 128, 1024), (2, 128, 1024), (1, 256, 1024), (1, 64, 2048),
                (1, 128, 2048), (2, 256, 2048)]:
    d = {"host_waits": f((4, 2, 0, 0, 0, 0, 0), L, T, V), "stepped": 1,
         "kernels": {"k": {k: f(c, L, T, V) for k, c in K.items()}},
         "gemms": {"cublasGemmEx NN bf16": {"calls": f((1, 7, 0, 0, 0, 0, 0), L, T, V), "tensor": 0,
                                            "flops": f((0, 0, 0, 2e6, 3e7, 1e3, 0), L, T, V),
                                            "bytes": f((1e6, 1e5, 10, 10, 10, 0, 0), L, T, V)}},
         "copies": {"cudaMemsetAsync": {"calls": f((1, 3, 0, 0, 0, 0, 0), L, T, V),
                                        "bytes": f((1e6, 0, 4, 0, 4e3, 0, 0), L, T, V)},
                    "cudaMemcpyAsync DeviceToDevice": {"calls": f((2, 0, 0, 0, 0, 0, 0), L, T, V),
                                                       "bytes": f((0, 0, 0, 1e3, 0, 0, 0), L, T, V)}}}
    json.dump(d, open(f"{W}/bf16-L{L}-T{T}-V{V}.json", "w"))
json.dump({"other": {"kept": 1}}, open(f"{W}/results.json", "w"))
PY
/usr/bin/python3 bench/gpu_model.py --results "$W/results.json" "$W"/bf16-L*-T*-V*.json > "$W/table.txt" 2>&1
ok "gpu_model.py runs on eight synthetic runs" '[ $? = 0 ] && grep -q "predicted MFU" "$W/table.txt"'
/usr/bin/python3 - "$W" > "$W/check.txt" 2>&1 <<'PY'
import json, sys
W = sys.argv[1]
r = json.load(open(f"{W}/results.json"))
assert r["other"] == {"kept": 1}, "the other results are kept"
g = r["gpu_model"]
assert "PREDICTION" in g["kind"] and "not a measurement" in g["kind"], g["kind"]
L, B, T, V = 12, 8, 1024, 50257
def f(c): return c[0] + c[1] * L + c[2] * V + B * T * (c[3] + c[4] * L + c[5] * V) + c[6] * L * B * T * T
k = g["kernels"][0]
for field, c in [("flops", (100, 7, 1, 3, 11, 2, 2)), ("sectors_fitted", (4, 2, 1, 1, 1, 1, 1)), ("threads", (0, 0, 0, 10, 20, 0, 0))]:
    assert abs(k[field] - f(c)) <= 1e-6 * f(c), (field, k[field], f(c))
assert k["launches"] == 3 + 5 * 12, k["launches"]
byt = f((64, 32, 4, 8, 16, 4, 4)) + f((32, 0, 4, 4, 4, 0, 0))
# sectors at G: the bytes at G x the sectors per byte of the counted run that requested the most
import glob
runs = [json.load(open(p))["kernels"]["k"] for p in glob.glob(f"{W}/bf16-L*-T*-V*.json")]
big = max(runs, key=lambda c: c["bytes_ld"] + c["bytes_st"])
sec = byt * big["sectors"] / (big["bytes_ld"] + big["bytes_st"])
assert abs(k["sectors"] - sec) <= 1e-6 * sec, ("sectors", k["sectors"], sec)
assert abs(k["coalescing"] - byt / (32 * sec)) < 1e-9
tc = f((0, 0, 0, 0, 0, 0, 4e5))
assert abs(k["tensor_flops"] - tc) <= 1e-6 * tc, ("tensor_flops", k["tensor_flops"], tc)
assert tc / 989e12 > max(k["flops"] / 66.9e12, f((2, 1, 1, 1, 1, 0, 0)) * 32 / 3.35e12), "the synthetic tensor FLOPs bound the kernel"
assert abs(k["bound_s"] - max(k["flops"] / 66.9e12, tc / 989e12, f((2, 1, 1, 1, 1, 0, 0)) * 32 / 3.35e12)) < 1e-15, \
    ("bound: tensor FLOPs at 989 TFLOP/s", k["bound_s"], tc / 989e12, tc / 66.9e12)
# the bound with in-place sectors moved twice: the same maximum over the read + written sectors
rw = f((3, 1, 1, 2, 1, 1, 0))
assert abs(k["bound_rw_s"] - max(k["bound_s"], rw * 32 / 3.35e12)) < 1e-15, ("bound_rw", k["bound_rw_s"])
assert abs(k["pred_over_bound_rw"] - k["pred_s"] / k["bound_rw_s"]) < 1e-9
par = min(1.0, k["threads_per_launch"] / (132 * 2048))
# shared memory: one 128-byte wavefront per clock per SM, 132 SMs at 1.83 GHz; 3x conflicted
wf = f((0, 0, 0, 0, 0, 0, 30))
assert abs(k["bank_conflict"] - 3.0) < 1e-9 and abs(k["smem_s"] - wf / (132 * 1.83e9)) < 1e-15, (k["bank_conflict"], k["smem_s"])
# special-function units: 16 a clock per SM, 132 SMs at 1.83 GHz
sf = f((0, 0, 0, 0, 0, 0, 1.2e3))
assert abs(k["sfu"] - sf) <= 1e-6 * sf and abs(k["sfu_s"] - sf / (132 * 16 * 1.83e9)) < 1e-15, (k["sfu"], k["sfu_s"])
# below the tensor time (which stays the bound) yet a fifth of the compute-bound prediction
assert tc / 989e12 > k["sfu_s"] > 0.2 * k["pred_s"] * par, ("the synthetic SFU time is a visible part of the prediction", k["sfu_s"], k["pred_s"])
assert abs(k["pred_s"] - max(63 * 2e-6, max(k["flops"] / 66.9e12 + tc / 989e12 + k["sfu_s"] + k["smem_s"], k["sectors"] * 32 / 3.35e12) / par)) < 1e-12, \
    ("predicted: CUDA-core, tensor, special-function and shared-memory time added", k["pred_s"])
assert abs(g["executed_flops_per_step"] - (k["flops"] + tc + g["products"][0]["flops"])) < 1e-6 * g["executed_flops_per_step"]
p = g["products"][0]
assert p["calls"] == 1 + 7 * 12 and abs(p["flops"] - f((0, 0, 0, 2e6, 3e7, 1e3, 0))) < 1e-6 * p["flops"]
assert g["host_waits"] == 4 + 2 * 12
cm = {c["copy"]: c for c in g["copies"]}
ms, cp = cm["cudaMemsetAsync"], cm["cudaMemcpyAsync DeviceToDevice"]
assert ms["calls"] == 1 + 3 * 12 and abs(ms["pred_s"] - max(37 * 2e-6, f((1e6, 0, 4, 0, 4e3, 0, 0)) / 3.35e12)) < 1e-12, \
    ("a memset: its bytes written at HBM speed", ms)
assert cp["calls"] == 2 and abs(cp["pred_s"] - max(2 * 2e-6, 2 * f((0, 0, 0, 1e3, 0, 0, 0)) / 3.35e12)) < 1e-12, \
    ("a device copy: its bytes read and written", cp)
assert abs(g["step_s"] - (k["pred_s"] + p["pred_s"] + ms["pred_s"] + cp["pred_s"] + g["host_waits"] * 10e-6)) < 1e-12, \
    ("the step: kernels, products, memsets and copies, host waits", g["step_s"])
assert g["mfu"] > 0 and g["targets"]["mfu_met"] == (g["mfu"] >= 0.4)
pm = max(p["calls"] * 2e-6, p["flops"] / (989e12 * 0.506), p["bytes"] / 3.35e12)
assert abs(g["step_s_at_measured_gemm"] - (g["step_s"] - p["pred_s"] + pm)) < 1e-12, \
    ("the step with cuBLAS at the H100's measured share", g["step_s_at_measured_gemm"])
print("checked")
PY
ok "synthetic counts extrapolated by the form's own coefficients; results labelled a prediction ($(tail -1 "$W/check.txt"))" \
   'grep -q "^checked" "$W/check.txt"'
# counts taken before a field was counted (tensor_flops: mma.sync apart; sfu: the special-function
# units) are refused, not read as 0. without FIELD: the synthetic runs with FIELD dropped from every
# kernel, through gpu_model.py (its status is the function's)
without() {
    mkdir -p "$W/no-$1"
    for f in "$W"/bf16-L*-T*-V*.json; do
        /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [k.pop(sys.argv[3]) for k in d["kernels"].values()]; json.dump(d, open(sys.argv[2], "w"))' \
            "$f" "$W/no-$1/$(basename "$f")" "$1"
    done
    /usr/bin/python3 bench/gpu_model.py "$W/no-$1"/bf16-L*-T*-V*.json > "$W/no-$1.txt" 2>&1
}
without tensor_flops
ok "counts without tensor_flops are refused (rc $?)" '[ $? != 0 ] && grep -q "without tensor_flops" "$W/no-tensor_flops.txt"'
without sfu
ok "counts without sfu are refused (rc $?)" '[ $? != 0 ] && grep -q "without sfu" "$W/no-sfu.txt"'
# 2. one emulated step counted
BIN=build/emu/bench/train_step
if [ -x $BIN ]; then
    FT_EMU_SAMPLE_BLOCKS=16 FT_EMU_CHECKS=0 FT_EMU_PERF="$W/step.json" $BIN --config S --layers 1 --batch 1 --seq 16 \
        --steps 1 --device cuda --precision bf16 > "$W/step.log" 2>&1
    ok "the emulated step runs (rc $?)" 'grep -q "tokens/s" "$W/step.log"'
    /usr/bin/python3 - "$W/step.json" > "$W/step_check.txt" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["stepped"] == 1, "the step was marked"
k = d["kernels"]
for name in ["g_embedding_fwd", "g_rmsnorm_fwd", "g_att_fwd", "g_swiglu_fwd", "g_classifier_fwd", "g_adamw"]:
    hit = [n for n in k if name.split("_", 1)[1].split("_")[0] in n]
    assert hit, f"no kernel like {name}: {sorted(k)}"
for n, c in k.items():
    assert c["launches"] > 0 and c["bytes_ld"] + c["bytes_st"] > 0 and c["sectors"] > 0, n
assert sum(c["flops"] for c in k.values()) > 0, "FLOPs counted"
assert d["copies"].get("cudaMemsetAsync", {}).get("calls", 0) > 0, ("the step's memsets counted", d["copies"])
# attention's bf16 kernels multiply on tensor cores (mma.sync): counted apart, and nothing else does
att = [n for n in k if n.startswith("k_att_") and "bf16" in n and n != "k_att_rowdot"]
assert att and all(k[n]["tensor_flops"] > 0 for n in att), {n: k[n]["tensor_flops"] for n in att}
assert all(c["tensor_flops"] == 0 for n, c in k.items() if n not in att), "tensor FLOPs outside attention"
# their tiles live in shared memory: its wavefronts counted, never fewer than the conflict-free ones
assert all(k[n]["shared_wavefronts"] >= k[n]["shared_wavefronts_ideal"] > 0 for n in att), \
    {n: (k[n]["shared_wavefronts"], k[n]["shared_wavefronts_ideal"]) for n in att}
# their softmax's exponentials on the special-function units: at least one per score of the causal
# T x T (T = 16) the forward computes, for every head; a copy has none
H, T = 4, 16   # config S: 4 heads
fw = [n for n in att if n.startswith("k_att_fwd")]
assert fw and k[fw[0]]["sfu"] >= H * T * (T + 1) // 2, ("ex2 counted per score", {n: k[n]["sfu"] for n in att})
assert all(c["sfu"] == 0 for n, c in k.items() if n.startswith("k_copy") or n.startswith("g_to_bf16")), \
    {n: c["sfu"] for n, c in k.items()}
assert any(n.endswith("bf16") and v["tensor"] == v["calls"] for n, v in d["gemms"].items()), d["gemms"]
assert d["host_waits"] > 0
# distinct sectors read + written: at least the distinct sectors, at most twice; AdamW's update in
# place reads and writes the same sectors
for n, c in k.items():
    assert c["footprint_sectors"] <= c["footprint_rw_sectors"] <= 2 * c["footprint_sectors"], (n, c)
ad = [c for n, c in k.items() if "adamw" in n]
assert ad and ad[0]["footprint_rw_sectors"] >= 1.5 * ad[0]["footprint_sectors"], ad
print("checked", len(k), "kernels")
PY
    ok "the step's counts: every kernel family, FLOPs, bytes, sectors, bf16 products ($(tail -1 "$W/step_check.txt"))" \
       'grep -q "^checked" "$W/step_check.txt"'
else
    ok "$BIN is built (clang++ and llvm-dev)" false
fi
it_done
