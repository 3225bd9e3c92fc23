// tests/emu/flops_pass.cc: an LLVM pass plugin (clang -fpass-plugin=build/emu/libemu_flops.so)
// that makes the code it compiles count its floating-point operations, for the emulator's
// performance model (bench/gpu_model.sh, docs/DEVICES.md "The performance model").
//
// At the start of every basic block that holds floating-point arithmetic it inserts one call
// __emu_flops(n), n the block's operations counted as a roofline counts them: fadd, fsub, fmul,
// fdiv, frem, fneg 1 each per vector element; fma and fmuladd (what a*b+c contracts to) 2;
// sqrt, exp, exp2, log, log2, pow, sin, cos, floor/ceil/round/trunc, fabs, minnum/maxnum and the
// libm calls of the same names (expf, logf, ...) 1 (a GPU's special-function unit or a short
// sequence: counted once, as a FLOP count does). Comparisons and conversions are not counted.
// The emulator (emu_sched.cc) adds n to the running launch when a kernel thread executes the
// block and ignores it on the host.
//
// Of those, the operations a GPU runs on its special-function units (MUFU: ex2, lg2, rcp, rsq,
// sin, cos) are counted apart as well, by a second call __emu_sfu(m) in the same blocks: exp,
// exp2, log, log2, log10, sqrt, sin, cos (intrinsics, and expf, exp2f, logf, log2f, sqrtf, sinf,
// cosf, ... of libm) 1 each per element; pow and tanh 2 (a logarithm and an exponential; an
// exponential and a reciprocal); fdiv 1 (the reciprocal that nvcc's division sequence starts
// from). An estimate of the MUFU instructions nvcc emits, documented in docs/DEVICES.md ("The
// performance model"): device libm's exact sequences are not seen here. It runs at the start of the optimisation pipeline's end
// (after inlining and contraction), so what it counts is the optimised code, not the source.
#include "llvm/IR/Function.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Passes/PassPlugin.h"

using namespace llvm;

namespace {
unsigned lanes(Type *t) {
    if (auto *v = dyn_cast<FixedVectorType>(t)) return v->getNumElements();
    return 1;
}
bool is_fp(Type *t) { return t->getScalarType()->isFloatingPointTy(); }

unsigned call_flops(CallBase *c) {
    if (auto *ii = dyn_cast<IntrinsicInst>(c)) {
        if (!is_fp(ii->getType())) return 0;
        switch (ii->getIntrinsicID()) {
        case Intrinsic::fma:
        case Intrinsic::fmuladd: return 2 * lanes(ii->getType());
        case Intrinsic::sqrt: case Intrinsic::exp: case Intrinsic::exp2: case Intrinsic::log:
        case Intrinsic::log2: case Intrinsic::log10: case Intrinsic::pow: case Intrinsic::powi:
        case Intrinsic::sin: case Intrinsic::cos: case Intrinsic::floor: case Intrinsic::ceil:
        case Intrinsic::round: case Intrinsic::rint: case Intrinsic::nearbyint: case Intrinsic::trunc:
        case Intrinsic::fabs: case Intrinsic::minnum: case Intrinsic::maxnum: case Intrinsic::copysign:
            return lanes(ii->getType());
        default: return 0;
        }
    }
    Function *f = c->getCalledFunction();
    if (!f || !is_fp(c->getType())) return 0;
    StringRef n = f->getName();
    static const char *libm[] = {"expf", "exp", "exp2f", "expm1f", "logf", "log", "log2f", "log1pf", "powf",
                                 "sqrtf", "sqrt", "tanhf", "sinf", "cosf", "erff", "fmaxf", "fminf", "fabsf"};
    for (const char *m : libm)
        if (n == m) return 1;
    return 0;
}

/* the special-function unit's operations of a call (see the head of the file) */
unsigned call_sfu(CallBase *c) {
    if (auto *ii = dyn_cast<IntrinsicInst>(c)) {
        if (!is_fp(ii->getType())) return 0;
        switch (ii->getIntrinsicID()) {
        case Intrinsic::exp: case Intrinsic::exp2: case Intrinsic::log: case Intrinsic::log2: case Intrinsic::log10:
        case Intrinsic::sqrt: case Intrinsic::sin: case Intrinsic::cos:
            return lanes(ii->getType());
        case Intrinsic::pow: case Intrinsic::powi: return 2 * lanes(ii->getType());
        default: return 0;
        }
    }
    Function *f = c->getCalledFunction();
    if (!f || !is_fp(c->getType())) return 0;
    StringRef n = f->getName();
    static const char *one[] = {"expf", "exp", "exp2f", "expm1f", "logf", "log", "log2f", "log1pf",
                                "sqrtf", "sqrt", "sinf", "cosf"};
    for (const char *m : one)
        if (n == m) return 1;
    if (n == "powf" || n == "tanhf") return 2;
    return 0;
}

unsigned inst_sfu(Instruction &i) {
    switch (i.getOpcode()) {
    case Instruction::FDiv: return lanes(i.getType());
    case Instruction::Call: return call_sfu(cast<CallBase>(&i));
    default: return 0;
    }
}

unsigned inst_flops(Instruction &i) {
    switch (i.getOpcode()) {
    case Instruction::FAdd: case Instruction::FSub: case Instruction::FMul: case Instruction::FDiv:
    case Instruction::FRem: case Instruction::FNeg:
        return lanes(i.getType());
    case Instruction::Call: return call_flops(cast<CallBase>(&i));
    default: return 0;
    }
}

struct FlopsPass : PassInfoMixin<FlopsPass> {
    PreservedAnalyses run(Module &m, ModuleAnalysisManager &) {
        LLVMContext &ctx = m.getContext();
        FunctionCallee hook = m.getOrInsertFunction("__emu_flops", Type::getVoidTy(ctx), Type::getInt64Ty(ctx));
        FunctionCallee sfu_hook = m.getOrInsertFunction("__emu_sfu", Type::getVoidTy(ctx), Type::getInt64Ty(ctx));
        bool changed = false;
        for (Function &f : m) {
            if (f.isDeclaration() || f.getName() == "__emu_flops" || f.getName() == "__emu_sfu") continue;
            for (BasicBlock &bb : f) {
                uint64_t n = 0, sfu = 0;
                for (Instruction &i : bb) n += inst_flops(i), sfu += inst_sfu(i);
                if (!n) continue;
                IRBuilder<> b(&*bb.getFirstInsertionPt());
                b.CreateCall(hook, {b.getInt64(n)});
                if (sfu) b.CreateCall(sfu_hook, {b.getInt64(sfu)});
                changed = true;
            }
        }
        return changed ? PreservedAnalyses::none() : PreservedAnalyses::all();
    }
};
} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK PassPluginLibraryInfo llvmGetPassPluginInfo() {
    return {LLVM_PLUGIN_API_VERSION, "emu-flops", "1", [](PassBuilder &pb) {
                pb.registerOptimizerLastEPCallback(
                    [](ModulePassManager &mpm, OptimizationLevel) { mpm.addPass(FlopsPass()); });
            }};
}
