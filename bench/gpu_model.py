#!/usr/bin/python3
"""bench/gpu_model.py: the performance model of bench/gpu_model.sh (docs/DEVICES.md, "The
performance model"). Reads the emulator's counts of reduced config-G steps (tests/emu/emu_perf.cc,
one JSON per run, named PREC-L<layers>-T<seq>-V<vocab>.json, B=1), fits every count of every
kernel and cuBLAS product kind as

    f(L, B, T, V) = a0 + a1 L + aV V + B T (b0 + b1 L + bV V) + c1 L B T^2

(least squares over the runs: exact with seven), evaluates it at config G (L=12, B=8, T=1024,
V=50257)
and predicts each kernel's time on an H100 SXM from its published peaks. PREDICTION, not a
measurement. The assumptions are the constants below, written into the results too.

usage: gpu_model.py [--precision P] [--results bench/results.json] RUN.json...
       gpu_model.py --batch-of N RUN.json   (attention's kernels of one B=1 run at batch N)
"""
import json, os, re, subprocess, sys, time

import numpy as np

# H100 SXM5, dense (no sparsity): NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper,
# 2022), its table of peaks for the H100 SXM5: "Peak BF16 Tensor TFLOPS with FP32 Accumulate"
# 989.4 (1978.9 with sparsity; the issue's 989), "Peak TF32 Tensor TFLOPS" 494.7, "Peak FP32
# TFLOPS (non-Tensor)" 66.9; HBM3 3.35 TB/s from the H100 SXM data sheet.
PEAK = {"bf16": 989e12, "tf32": 494.7e12, "fp32": 66.9e12}   # tensor-core bf16 / tf32; CUDA-core fp32
HBM = 3.35e12                       # bytes/s
# The kernels' own arithmetic: CUDA-core FLOPs (the LLVM pass's count) at the fp32 peak, the
# warp-wide products mma.sync runs (tests/emu's tensor_flops: attention's bf16 kernels) at the
# tensor cores' bf16 peak.
# Shared memory: 32 banks x 4 bytes per clock per SM, one 128-byte wavefront a clock (CUDA C
# Programming Guide, "Shared Memory", compute capability 9.0; bank conflicts add wavefronts,
# tests/emu/emu_banks.cc counts them) on 132 SMs at 1.83 GHz -- the clock at which 132 SMs x 4096
# dense bf16 FLOP per clock give the whitepaper's 989.4 TFLOP/s.
SMEM_WAVEFRONTS_PER_S = 132 * 1.83e9
# Special-function units (MUFU: ex2, lg2, rcp, rsq, sin, cos): 16 results per clock per SM on
# compute capability 9.0 (CUDA C Programming Guide, "Arithmetic Instructions", the throughput
# table's row "32-bit floating-point reciprocal, reciprocal square root, base-2 logarithm
# (__log2f), base 2 exponential (exp2f), sine (__sinf), cosine (__cosf)"), on 132 SMs at the same
# 1.83 GHz: 3.87e12 a second -- the "3.9 TFLOPS of special functions" FlashAttention-3 (Shah et
# al. 2024, section 3) gives the H100 SXM5. The emulator counts them (tests/emu/flops_pass.cc's
# __emu_sfu: exponentials, logarithms, square roots, divisions' reciprocals; emu_perf.cc "sfu").
SFU_PER_S = 132 * 16 * 1.83e9
GEMM_FRACTION = 0.70                # assumed share of the tensor peak cuBLAS reaches at these shapes
# ... and the share it reached on the H100 (bench/h100/ncu_G_1layer_bf16_final.csv, one layer of
# config G and the head, bf16, three passes): the layer's six products 348 GFLOP in 0.707 ms
# (492 TFLOP/s), the head's three 1899 GFLOP in 3.66 ms (519 TFLOP/s); composed for 12 layers,
# 500 TFLOP/s = 50.6% of 989. ncu locks the SM clock to its base by default, so in a normal run
# the products may be faster: the step is also predicted with this share, beside the assumed one.
GEMM_FRACTION_MEASURED = 0.506
RESIDENT_THREADS = 132 * 2048       # 132 SMs x 2048 resident threads
LAUNCH_MIN_S = 2e-6                 # assumed least time of one kernel launch (launch and tail)
HOST_WAIT_S = 10e-6                 # assumed GPU idle per host wait (drain, then the next launch)
# memsets and copies (tests/emu counts them: emu_api.h's copy hook): on a GPU a memset writes its
# bytes and a device-to-device copy reads and writes them, at HBM speed, each at least a launch;
# a copy to or from the host crosses the host link, assumed at 25 GB/s (PCIe 5 x16 peaks at 64,
# pageable host memory is staged through a pinned buffer)
HOST_LINK = 25e9                    # bytes/s
G = {"layers": 12, "batch": 8, "seq": 1024, "d_model": 768, "heads": 12, "kv_heads": 12, "d_ff": 2048,
     "vocab": 50257}
TARGETS = {"mfu": 0.40, "coalescing": 0.80, "pred_over_bound": 2.0}


NCOEF = 7


def basis(L, B, T, V):
    return [1.0, L, V, B * T, B * T * L, B * T * V, L * B * T * T]


def fit(points, values):
    """least-squares coefficients of basis() through (L, T, V, B=1) -> value"""
    A = np.array([basis(L, 1, T, V) for L, T, V in points])
    y = np.array(values, dtype=float)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = float(np.max(np.abs(A @ coef - y) / np.maximum(np.abs(y), 1.0))) if len(y) > NCOEF else None
    return coef, resid


def at_g(coef):
    return max(0.0, float(np.dot(coef, basis(G["layers"], G["batch"], G["seq"], G["vocab"]))))


def params_g():
    d, hd = G["d_model"], G["d_model"] // G["heads"]
    layer = d * G["heads"] * hd + 2 * d * G["kv_heads"] * hd + G["heads"] * hd * d + 3 * d * G["d_ff"] + 2 * d
    return G["vocab"] * d + G["layers"] * layer + d   # tied classifier, final norm


def kernel_time(r, launches, par):
    """r's bound_s, pred_s, smem_s, bank_conflict and pred_over_bound from its counts (launches,
    parallelism par: the share of the resident threads its launches keep busy)"""
    # arithmetic and shared memory: the CUDA cores', the tensor cores' and shared memory's
    # wavefronts' time; the bound takes the larger (they may overlap; shared memory without bank
    # conflicts), the prediction their sum (a kernel's staging, mma and softmax alternate between
    # barriers)
    # the special-function units' operations (exp2, rsqrt, ...) likewise: their own pipe, added
    # to the prediction, their own term of the bound
    cuda_s, tc_s = r["flops"] / PEAK["fp32"], r["tensor_flops"] / PEAK["bf16"]
    r["sfu_s"] = r.get("sfu", 0) / SFU_PER_S
    r["smem_s"] = r["shared_wavefronts"] / SMEM_WAVEFRONTS_PER_S
    r["bank_conflict"] = r["shared_wavefronts"] / r["shared_wavefronts_ideal"] if r["shared_wavefronts_ideal"] else None
    r["bound_s"] = max(cuda_s, tc_s, r["sfu_s"], r["shared_wavefronts_ideal"] / SMEM_WAVEFRONTS_PER_S,
                       r["footprint_sectors"] * 32 / HBM)
    r["pred_s"] = max(launches * LAUNCH_MIN_S,
                      max(cuda_s + tc_s + r["sfu_s"] + r["smem_s"], r["sectors"] * 32 / HBM) / par)
    r["pred_over_bound"] = r["pred_s"] / r["bound_s"] if r["bound_s"] else None
    # the same bound with a sector read and written by one launch (an in-place update: AdamW, dlogits
    # over the logits) moved twice, in and out: distinct sectors read + distinct sectors written
    # (counted since 2026-11-26 23:00; absent from older counts)
    rw = r.get("footprint_rw_sectors")
    r["bound_rw_s"] = max(r["bound_s"], rw * 32 / HBM) if rw else None
    r["pred_over_bound_rw"] = r["pred_s"] / r["bound_rw_s"] if r["bound_rw_s"] else None


def one_run(path, batch, prefix):
    """--batch-of N RUN.json: the kernels named prefix... of one counted run (B=1) as N times its
    counts -- right for kernels whose every count grows with B (attention's: its grid has a
    dimension of B) -- with the same kernel time; a PREDICTION"""
    with open(path) as fh: d = json.load(fh)
    print(f"PREDICTION (no GPU ran): {path} x {batch} (batch), H100 SXM")
    print(f"{'kernel':26s} {'TC GFLOP':>8s} {'GFLOP':>7s} {'MB req':>8s} {'coal':>5s} {'wavefr M':>8s} {'bank':>5s} "
          f"{'par':>6s} {'smem us':>8s} {'sfu us':>7s} {'bound us':>8s} {'pred us':>8s}")
    for n, k in sorted(d["kernels"].items()):
        if not n.startswith(prefix): continue
        r = {f: k.get(f, 0) * batch for f in ["flops", "tensor_flops", "sfu", "bytes_ld", "bytes_st", "sectors", "threads",
                                              "footprint_sectors", "shared_wavefronts", "shared_wavefronts_ideal"]}
        launches = k["launches"]
        par = min(1.0, r["threads"] / launches / RESIDENT_THREADS)
        kernel_time(r, launches, par)
        byt = r["bytes_ld"] + r["bytes_st"]
        print(f"{n:26s} {r['tensor_flops']/1e9:8.2f} {r['flops']/1e9:7.2f} {byt/1e6:8.1f} {byt/(32*r['sectors']):5.0%} "
              f"{r['shared_wavefronts']/1e6:8.2f} {r['bank_conflict'] or 0:5.2f} {par:6.1%} {r['smem_s']*1e6:8.1f} {r['sfu_s']*1e6:7.1f} "
              f"{r['bound_s']*1e6:8.1f} {r['pred_s']*1e6:8.1f}")


def main(argv):
    prec, results, files = "bf16", None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--precision": prec = argv[i + 1]; i += 2
        elif argv[i] == "--results": results = argv[i + 1]; i += 2
        elif argv[i] == "--batch-of": return one_run(argv[i + 2], int(argv[i + 1]), "k_att_")
        else: files.append(argv[i]); i += 1
    runs = []
    for f in files:
        m = re.search(r"-L(\d+)-T(\d+)-V(\d+)\.json$", f)
        if not m: sys.exit(f"gpu_model.py: {f}: not named PREC-L<layers>-T<seq>-V<vocab>.json")
        with open(f) as fh: d = json.load(fh)
        if not d.get("stepped"): sys.exit(f"gpu_model.py: {f}: no counted step")
        runs.append(((int(m.group(1)), int(m.group(2)), int(m.group(3))), d))
    if len(runs) < NCOEF: sys.exit(f"gpu_model.py: {NCOEF} runs at least (the fit has {NCOEF} coefficients)")
    if np.linalg.matrix_rank(np.array([basis(L, 1, T, V) for L, T, V in [p for p, _ in runs]])) < NCOEF:
        sys.exit("gpu_model.py: the runs do not determine the fit (vary L, T and V as bench/gpu_model.sh does)")
    pts = [p for p, _ in runs]

    def fitted(getter):
        coef, resid = fit(pts, [getter(d) for _, d in runs])
        return at_g(coef), resid

    names = sorted({k for _, d in runs for k in d["kernels"]})
    for (L, T, V), d in runs:
        if any("tensor_flops" not in k for k in d["kernels"].values()):
            sys.exit(f"gpu_model.py: L={L} T={T} V={V}: counts without tensor_flops (taken before the emulator "
                     "counted mma.sync apart): count the runs again (not GPU_MODEL_REUSE)")
        if any("sfu" not in k for k in d["kernels"].values()):
            sys.exit(f"gpu_model.py: L={L} T={T} V={V}: counts without sfu (taken before the emulator counted "
                     "the special-function units' operations): count the runs again (not GPU_MODEL_REUSE)")
    kfields = ["launches", "threads", "flops", "tensor_flops", "sfu", "bytes_ld", "bytes_st", "sectors", "footprint_sectors",
               "shared_bytes", "local_bytes", "shared_wavefronts", "shared_wavefronts_ideal"]
    have_rw = all("footprint_rw_sectors" in k for _, d in runs for k in d["kernels"].values())
    if have_rw: kfields.append("footprint_rw_sectors")
    rows, worst_resid = [], 0.0
    for n in names:
        r = {"kernel": n}
        for f in kfields:
            r[f], res = fitted(lambda d: d["kernels"].get(n, {}).get(f, 0))
            if res is not None: worst_resid = max(worst_resid, res)
        launches = max(r["launches"], 1.0)
        r["launches"] = round(r["launches"])
        byt = r["bytes_ld"] + r["bytes_st"]
        r["bytes"] = byt
        # sectors at G: the bytes at G times the sectors per byte of the run that requested the
        # most. The sectors themselves are not fitted: a count whose sectors per access change
        # with the size (a thread's contiguous run of elements puts a warp's lanes in 1, 2, then
        # 32 sectors) is not of the fitted form, and its least-squares fit took spurious per-token
        # terms (k_sumsq_finish, a once-per-step kernel, was extrapolated to 2.4M sectors for
        # 0.24 MB requested); the bytes are of the form, the ratio is the access pattern's
        big = max((d["kernels"][n] for _, d in runs if d["kernels"].get(n, {}).get("launches")),
                  key=lambda k: k["bytes_ld"] + k["bytes_st"], default=None)
        kb = big["bytes_ld"] + big["bytes_st"] if big else 0
        r["sectors_fitted"] = r["sectors"]
        if kb: r["sectors"] = byt * big["sectors"] / kb
        r["coalescing"] = byt / (r["sectors"] * 32) if r["sectors"] else None
        # threads per launch: a launch capped at the resident threads in a counted run (the
        # grid-stride cap, FT_EMU_MAX_GRID=1056) is saturated at G too; otherwise the fit, but no
        # fewer than any counted run had (config G is larger than every run)
        obs = max((d["kernels"][n]["threads"] / d["kernels"][n]["launches"] for _, d in runs
                   if d["kernels"].get(n, {}).get("launches")), default=0.0)
        tpl = RESIDENT_THREADS if obs >= 0.99 * RESIDENT_THREADS else max(r["threads"] / launches, obs)
        r["threads_per_launch"] = tpl
        r["parallelism"] = min(1.0, tpl / RESIDENT_THREADS)
        par = max(r["parallelism"], 1.0 / RESIDENT_THREADS)
        kernel_time(r, launches, par)
        rows.append(r)
    gnames = sorted({k for _, d in runs for k in d["gemms"]})
    grows = []
    for n in gnames:
        r = {"product": n}
        for f in ["calls", "flops", "bytes"]:
            r[f], _ = fitted(lambda d: d["gemms"].get(n, {}).get(f, 0))
        r["calls"] = round(r["calls"])
        kind = "bf16" if n.endswith("bf16") else ("tf32" if "tf32" in n else "fp32")
        r["peak_flops"] = PEAK[kind]
        r["bound_s"] = max(r["flops"] / PEAK[kind], r["bytes"] / HBM)
        r["pred_s"] = max(r["calls"] * LAUNCH_MIN_S, r["flops"] / (PEAK[kind] * GEMM_FRACTION), r["bytes"] / HBM)
        grows.append(r)
    cnames = sorted({k for _, d in runs for k in d.get("copies", {})})
    crows = []
    for n in cnames:
        r = {"copy": n}
        for f in ["calls", "bytes"]:
            r[f], _ = fitted(lambda d: d.get("copies", {}).get(n, {}).get(f, 0))
        r["calls"] = round(r["calls"])
        host = "Host" in n
        moved = r["bytes"] * (2 if n.endswith("DeviceToDevice") else 1)
        r["bound_s"] = moved / (HOST_LINK if host else HBM)
        r["pred_s"] = max(r["calls"] * LAUNCH_MIN_S, r["bound_s"]) if r["calls"] else 0.0
        crows.append(r)
    copy_s = sum(r["pred_s"] for r in crows)
    # the products again at the share the H100 measured (GEMM_FRACTION_MEASURED)
    gemm_meas_s = sum(max(r["calls"] * LAUNCH_MIN_S, r["flops"] / (r["peak_flops"] * GEMM_FRACTION_MEASURED),
                          r["bytes"] / HBM) for r in grows)
    waits, _ = fitted(lambda d: d["host_waits"])
    waits = round(waits)
    kern_s = sum(r["pred_s"] for r in rows)
    gemm_s = sum(r["pred_s"] for r in grows)
    step_s = kern_s + gemm_s + copy_s + waits * HOST_WAIT_S
    P = params_g()
    tokens = G["batch"] * G["seq"]
    model_flops = tokens * (6.0 * P + 12.0 * G["layers"] * G["d_model"] * G["seq"])
    mfu = model_flops / (step_s * PEAK["bf16"])
    step_meas_s = step_s - gemm_s + gemm_meas_s
    mfu_meas = model_flops / (step_meas_s * PEAK["bf16"])
    bound_step = sum(r["bound_s"] for r in rows) + sum(r["bound_s"] for r in grows) + sum(r["bound_s"] for r in crows)
    executed = sum(r["flops"] + r["tensor_flops"] for r in rows) + sum(r["flops"] for r in grows)

    # the table
    print(f"PREDICTION (no GPU ran): config G {prec}, B={G['batch']} T={G['seq']}, H100 SXM "
          f"({PEAK['bf16']/1e12:.0f} TFLOP/s bf16, {PEAK['fp32']/1e12:.1f} fp32, {HBM/1e12:.2f} TB/s); "
          f"cuBLAS at {GEMM_FRACTION:.0%} of its peak")
    hdr = f"{'kernel':24s} {'launch':>6s} {'GFLOP':>8s} {'TC GFLOP':>8s} {'GB req':>8s} {'coal':>5s} {'bank':>5s} {'smem ms':>8s} {'sfu ms':>7s} {'par':>6s} {'bound ms':>9s} {'pred ms':>9s} {'x bound':>8s} {'x rw':>5s} {'share':>6s}"
    print(hdr)
    for r in sorted(rows, key=lambda r: -r["pred_s"]):
        co = f"{r['coalescing']:.0%}" if r["coalescing"] is not None else "-"
        xb = f"{r['pred_over_bound']:.1f}" if r["pred_over_bound"] else "-"
        bk = f"{r['bank_conflict']:.1f}" if r["bank_conflict"] else "-"
        xr = f"{r['pred_over_bound_rw']:.2f}" if r.get("pred_over_bound_rw") else "-"
        print(f"{r['kernel']:24s} {r['launches']:6d} {r['flops']/1e9:8.2f} {r['tensor_flops']/1e9:8.2f} {r['bytes']/1e9:8.2f} {co:>5s} "
              f"{bk:>5s} {r['smem_s']*1e3:8.3f} {r['sfu_s']*1e3:7.3f} "
              f"{r['parallelism']:6.1%} {r['bound_s']*1e3:9.3f} {r['pred_s']*1e3:9.2f} {xb:>8s} {xr:>5s} {r['pred_s']/step_s:6.1%}")
    for r in sorted(grows, key=lambda r: -r["pred_s"]):
        print(f"{r['product']:24.24s} {r['calls']:6d} {'':>8s} {r['flops']/1e9:8.1f} {r['bytes']/1e9:8.2f} {'':>5s} {'':>5s} {'':>8s} {'':>6s} "
              f"{r['bound_s']*1e3:9.3f} {r['pred_s']*1e3:9.2f} {r['pred_s']/r['bound_s']:8.1f} {'':>5s} {r['pred_s']/step_s:6.1%}")
    for r in sorted(crows, key=lambda r: -r["pred_s"]):
        print(f"{r['copy']:32.32s} {r['calls']:6d} {r['bytes']/1e9:8.2f} GB {'':>36s} {r['bound_s']*1e3:9.3f} {r['pred_s']*1e3:9.2f} "
              f"{'':>8s} {'':>5s} {r['pred_s']/step_s:6.1%}")
    print(f"host waits per step: {waits} (x {HOST_WAIT_S*1e6:.0f} us = {waits*HOST_WAIT_S*1e3:.2f} ms)")
    print(f"predicted step {step_s*1e3:.1f} ms (kernels {kern_s*1e3:.1f}, cuBLAS {gemm_s*1e3:.1f}, memsets and copies {copy_s*1e3:.2f}); "
          f"sum of roofline bounds {bound_step*1e3:.1f} ms; {tokens/step_s:,.0f} tokens/s; "
          f"model FLOPs {model_flops/1e12:.2f} T/step (6 x {P/1e6:.1f}M params + attention), executed {executed/1e12:.2f} T; "
          f"predicted MFU {mfu:.1%}")
    print(f"with cuBLAS at the {GEMM_FRACTION_MEASURED:.1%} of peak it reached on the H100 (ncu, base clocks): "
          f"step {step_meas_s*1e3:.1f} ms, predicted MFU {mfu_meas:.1%}")
    bad_co = [r["kernel"] for r in rows if r["coalescing"] is not None and r["coalescing"] < TARGETS["coalescing"]]
    bad_x = [r["kernel"] for r in rows if r["pred_over_bound"] and r["pred_over_bound"] > TARGETS["pred_over_bound"]]
    print(f"targets (issue 25): MFU >= {TARGETS['mfu']:.0%}: {'met' if mfu >= TARGETS['mfu'] else 'NOT met'}; "
          f"coalescing >= {TARGETS['coalescing']:.0%}: {len(rows)-len(bad_co)}/{len(rows)} kernels; "
          f"predicted <= {TARGETS['pred_over_bound']:.0f}x bound: {len(rows)-len(bad_x)}/{len(rows)} kernels")
    bad_rw = [r["kernel"] for r in rows if r.get("pred_over_bound_rw") and r["pred_over_bound_rw"] > TARGETS["pred_over_bound"]]
    if have_rw:
        print(f"x rw: the prediction over the bound with a sector both read and written by a launch moved twice "
              f"(in-place updates); <= {TARGETS['pred_over_bound']:.0f}x that bound: {len(rows)-len(bad_rw)}/{len(rows)} kernels")
    if worst_resid: print(f"fit: largest relative residual over the runs {worst_resid:.2%}")

    if results:
        try: commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError: commit = ""
        out = {
            "kind": "PREDICTION from the execution-model emulator's counts (tests/emu), not a measurement: no GPU ran",
            "command": "make bench-gpu-model (bench/gpu_model.sh)", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit, "precision": prec, "config": dict(G, name="G"), "params": P,
            "counted_runs": [{"layers": L, "batch": 1, "seq": T, "vocab": V} for L, T, V in pts],
            "scaling": "every count fitted as a0 + a1 L + aV V + B T (b0 + b1 L + bV V) + c1 L B T^2 over the counted runs, "
                       "evaluated at L=12 B=8 T=1024 V=50257",
            "assumptions": {"device": "H100 SXM", "peak_flops": PEAK, "hbm_bytes_per_s": HBM,
                            "gemm_fraction_of_peak": GEMM_FRACTION,
                            "gemm_fraction_measured_h100": GEMM_FRACTION_MEASURED,
                            "gemm_fraction_measured_from": "bench/h100/ncu_G_1layer_bf16_final.csv: cuBLAS's kernels of one layer of G and the head, composed for 12 layers; ncu's default base clocks",
                            "resident_threads": RESIDENT_THREADS,
                            "launch_min_s": LAUNCH_MIN_S, "host_wait_s": HOST_WAIT_S, "host_link_bytes_per_s": HOST_LINK,
                            "copies": "a memset writes its bytes, a device-to-device copy reads and writes them, at HBM speed; a host copy at host_link_bytes_per_s; each call at least launch_min_s",
                            "smem_wavefronts_per_s": SMEM_WAVEFRONTS_PER_S,
                            "sfu_ops_per_s": SFU_PER_S,
                            "sfu": "special-function unit operations counted by the LLVM pass (exp, exp2, log, log2, sqrt, sin, cos 1 per element; pow, tanh 2; a division's reciprocal 1) at 16 per clock per SM (CUDA C Programming Guide's throughput table, cc 9.0), 132 SMs, 1.83 GHz",
                            "kernel_time": "max(FLOPs / fp32 peak + tensor_flops / bf16 peak + sfu / sfu_ops_per_s + shared wavefronts / smem_wavefronts_per_s, sectors x 32 B / HBM) / parallelism, at least launch_min_s per launch; "
                                           "parallelism = min(1, threads that touched global memory per launch / resident_threads; "
                                           "1 where a counted run already filled the resident threads); no cache reuse credited",
                            "sectors": "bytes requested at G x sectors per byte of the counted run that requested the most (sectors_fitted: the plain fit, not used)",
                            "coalescing": "bytes requested / (sectors x 32); above 1 where lanes read the same address (a broadcast)",
                            "flops": "flops: CUDA-core operations (the LLVM pass), charged at the fp32 peak; tensor_flops: mma.sync's (2 per product term), at the bf16 tensor peak",
                            "bank_conflict": "shared wavefronts / the wavefronts of the same accesses without bank conflicts",
                            "bound": "max(FLOPs / fp32 peak, tensor_flops / bf16 peak, sfu / sfu_ops_per_s, conflict-free shared wavefronts / smem_wavefronts_per_s, distinct sectors of each launch x 32 B / HBM); products: max(2mnk / peak, operand bytes / HBM)",
                            "bound_rw": "the bound with (distinct sectors read + distinct sectors written) of each launch in place of its distinct sectors: an in-place update's sectors move in and out"},
            "kernels": rows, "products": grows, "copies": crows, "host_waits": waits,
            "step_s": step_s, "kernels_s": kern_s, "products_s": gemm_s, "copies_s": copy_s, "bound_step_s": bound_step,
            "tokens_per_s": tokens / step_s, "model_flops_per_step": model_flops, "executed_flops_per_step": executed,
            "mfu": mfu,
            "step_s_at_measured_gemm": step_meas_s, "mfu_at_measured_gemm": mfu_meas,
            "targets": dict(TARGETS, mfu_met=mfu >= TARGETS["mfu"], coalescing_below=bad_co, slower_than_2x_bound=bad_x,
                            slower_than_2x_bound_rw=bad_rw if have_rw else None),
        }
        # merged by jq, as bench/run.sh and gpu.sh write the file (its layout kept)
        frag, tmp = results + ".gpu_model.tmp", results + ".tmp"
        with open(frag, "w") as fh: json.dump(out, fh)
        with open(tmp, "w") as fh:
            rc = subprocess.run(["jq", "--slurpfile", "g", frag, ".gpu_model = $g[0]", results], stdout=fh).returncode
        os.unlink(frag)
        if rc: sys.exit(f"gpu_model.py: jq could not merge into {results}")
        os.replace(tmp, results)
        print(f"gpu_model: gpu_model written to {results} (a prediction)")


if __name__ == "__main__":
    main(sys.argv[1:])
