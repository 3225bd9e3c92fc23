/* tests/emu/include/cublasLt.h: cuBLASLt is not emulated yet. The place for it: the types and
 * calls here, their implementation beside cuBLAS's in tests/emu/emu_cublas.cc (the same operand
 * checks, the same CPU product, then the epilogue on the host). Until a kernel needs it, a .cu
 * file that includes this header stops the emulated build here, saying so. */
#ifndef EMU_CUBLASLT_H
#define EMU_CUBLASLT_H
#error "cuBLASLt is not emulated yet: add the calls you use to tests/emu/include/cublasLt.h and tests/emu/emu_cublas.cc"
#endif
