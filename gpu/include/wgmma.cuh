// Hopper wgmma helpers shared by our attention kernels (sm_90a): fences, register pins,
// shared-memory descriptors and the m64nNk16 instructions, generated per shape by one macro.
// Needs DTYPE_BF16.

#pragma once

namespace {

#if DTYPE_BF16
#define WGMMA_TYPES ".f32.bf16.bf16"
#else
#define WGMMA_TYPES ".f32.f16.f16"
#endif

__device__ __forceinline__ void fence_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Wait until at most `Pending` committed groups are still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void wgmma_wait_all() { wgmma_wait<0>(); }

// Register barriers: writes before and reads after stay on their side of the async wgmma.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
  }
}

template <int N>
__device__ __forceinline__ void pin(unsigned (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
  }
}

// Shared-memory matrix descriptor, 128-byte swizzle, 8-row groups 1024 bytes apart (the stride
// offset). Every operand we describe lies within one 64-element column block, so the leading
// offset is never needed (K-major: unused; N-major: we set it to 1024 as well).
__device__ __forceinline__ unsigned long long descriptor(unsigned address, unsigned leading_bytes) {
  return static_cast<unsigned long long>((address & 0x3FFFFu) >> 4) |
         (static_cast<unsigned long long>(leading_bytes >> 4) << 16) |
         (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}

// `desc` moved `bytes` on in shared memory (a multiple of 16). Its address field (bits 0-13,
// address / 16) never carries into the next field, since no operand lies past 256 KB; so one
// 64-bit add of a constant moves it (one uniform instruction), where a descriptor built afresh
// takes a chain of uniform shifts and masks before each wgmma.
__device__ __forceinline__ unsigned long long advance(unsigned long long desc, unsigned bytes) {
  return desc + (bytes >> 4);
}

// Accumulator operands: 8 atoms of 4 floats (n64) or 16 (n128), read and written ("+f": ACC) or
// only written ("=f": OUT), and their placeholders.
#define WGMMA_ATOM(c, d, i) c(d[i][0]), c(d[i][1]), c(d[i][2]), c(d[i][3])
#define WGMMA_ATOMS8(c, d)                                                                   \
  WGMMA_ATOM(c, d, 0), WGMMA_ATOM(c, d, 1), WGMMA_ATOM(c, d, 2), WGMMA_ATOM(c, d, 3),         \
      WGMMA_ATOM(c, d, 4), WGMMA_ATOM(c, d, 5), WGMMA_ATOM(c, d, 6), WGMMA_ATOM(c, d, 7)
#define WGMMA_ATOMS16(c, d)                                                                  \
  WGMMA_ATOMS8(c, d), WGMMA_ATOM(c, d, 8), WGMMA_ATOM(c, d, 9), WGMMA_ATOM(c, d, 10),        \
      WGMMA_ATOM(c, d, 11), WGMMA_ATOM(c, d, 12), WGMMA_ATOM(c, d, 13), WGMMA_ATOM(c, d, 14), \
      WGMMA_ATOM(c, d, 15)
#define WGMMA_ACC8(d) WGMMA_ATOMS8("+f", d)
#define WGMMA_ACC16(d) WGMMA_ATOMS16("+f", d)
#define WGMMA_OUT8(d) WGMMA_ATOMS8("=f", d)
#define WGMMA_OUT16(d) WGMMA_ATOMS16("=f", d)
#define WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A · B for a 64 x 64 tile, A and B from shared memory; TransA / TransB = 1 reads that
// operand MN-major (its rows run along K), 0 K-major. A template, so an unused shape stays
// silent.
template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], unsigned long long desc_a,
                                         unsigned long long desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16" WGMMA_TYPES " " WGMMA_D32
               ", %32, %33, p, 1, 1, %35, %36;\n}\n"
               : WGMMA_ACC8(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA), "n"(TransB));
}

// The same for a 64 x 128 tile.
template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss(float (&d)[16][4], unsigned long long desc_a,
                                         unsigned long long desc_b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16" WGMMA_TYPES " " WGMMA_D64
               ", %64, %65, p, 1, 1, %67, %68;\n}\n"
               : WGMMA_ACC16(d)
               : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TransA), "n"(TransB));
}

// d = A · B, the first k-step of a product that overwrites d: d's old values are not read, so
// its registers are free until the product is issued. 64 x 64 and 64 x 128 tiles, operands as
// wgmma_ss.
template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss_fresh(float (&d)[8][4], unsigned long long desc_a,
                                               unsigned long long desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16" WGMMA_TYPES " " WGMMA_D32
               ", %32, %33, p, 1, 1, %34, %35;\n}\n"
               : WGMMA_OUT8(d)
               : "l"(desc_a), "l"(desc_b), "n"(TransA), "n"(TransB));
}

template <int TransA = 0, int TransB = 0>
__device__ __forceinline__ void wgmma_ss_fresh(float (&d)[16][4], unsigned long long desc_a,
                                               unsigned long long desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16" WGMMA_TYPES " " WGMMA_D64
               ", %64, %65, p, 1, 1, %66, %67;\n}\n"
               : WGMMA_OUT16(d)
               : "l"(desc_a), "l"(desc_b), "n"(TransA), "n"(TransB));
}

// d += A · B for a 64 x 64 tile, A from registers (the accumulator layout of a 64 x 16 slice),
// B from shared memory N-major.
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const unsigned (&a)[4],
                                         unsigned long long desc_b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16" WGMMA_TYPES " " WGMMA_D32
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : WGMMA_ACC8(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}


// Issue acc (+)= A · Bᵀ over HeadDim for one warpgroup (no commit): A = its 64 rows at `a`, B =
// the tile of N rows at `b`, both K-major in 64-element column blocks `a_pitch` / `b_pitch`
// bytes apart; the first k-step overwrites acc (Fresh: without reading it, wgmma_ss_fresh).
// (S = Q Kᵀ in the forward; Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, S and dP in the backward.)
template <int HeadDim, int NAtoms, bool Fresh = false>
__device__ __forceinline__ void issue_rows_times_rows(float (&acc)[NAtoms][4], unsigned a,
                                                      unsigned a_pitch, unsigned b,
                                                      unsigned b_pitch) {
  const unsigned long long a0 = descriptor(a, 16), b0 = descriptor(b, 16);
#pragma unroll
  for (int kk = 0; kk < HeadDim / 16; ++kk) {  // 16 head dims = 32 bytes of a 128-byte row
    const unsigned column = (kk & 3) * 32;
    const unsigned long long desc_a = advance(a0, (kk >> 2) * a_pitch + column);
    const unsigned long long desc_b = advance(b0, (kk >> 2) * b_pitch + column);
    if (Fresh && kk == 0) {
      wgmma_ss_fresh(acc, desc_a, desc_b);
    } else {
      wgmma_ss(acc, desc_a, desc_b, kk > 0);
    }
  }
}

// Issue acc += A · B (no commit): A from registers, KSteps slices of 16 along K (the
// accumulator layout of a 64 x 16·KSteps tile), B the tile of 16·KSteps rows at `b`, N-major in
// 64-element column blocks `b_pitch` bytes apart; one 64-wide instruction per block and k-step.
// (P V in the forward; Pᵀ dO, dSᵀ Q and dS K in the backward.)
template <int KSteps, int NAtoms>
__device__ __forceinline__ void issue_fragments_times_rows(float (&acc)[NAtoms][4],
                                                           const unsigned (&a)[KSteps][4],
                                                           unsigned b, unsigned b_pitch) {
  static_assert(NAtoms % 8 == 0, "acc holds whole 64-column blocks");
  const unsigned long long b0 = descriptor(b, 1024);
#pragma unroll
  for (int ks = 0; ks < KSteps; ++ks) {
#pragma unroll
    for (int block = 0; block < NAtoms / 8; ++block) {
      float(&acc_block)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[8 * block]);
      wgmma_rs(acc_block, a[ks], advance(b0, block * b_pitch + ks * 16 * 128));
    }
  }
}

}  // namespace
