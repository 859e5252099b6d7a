// Helpers shared by our attention kernels: PTX wrappers for asynchronous copies, 16-bit packing,
// exp2, ldmatrix and mma.sync. Included by every kernel source (NVRTC gets the headers of
// gpu/include/ by name; nvcc with -I gpu/include). Needs DTYPE_BF16 (1: bfloat16, 0: float16).

#pragma once

namespace {

struct alignas(16) Int4 {
  int x, y, z, w;
};
struct alignas(16) Bits128 {
  unsigned x, y, z, w;
};

// ------------------------------------------------------------------ look-up table entries
// An entry is (k_tile, flags, mask bits 0-31, mask bits 32-63) (gpu/forward/lut.py), or for a
// token tile (k_tile, kFlagTokens, token tile, 0) (token_mask.cuh).
constexpr unsigned kFlagPartial = 1u;   // apply the entry's mask bits
constexpr unsigned kFlagDiagonal = 2u;  // apply k_idx <= q_idx + causal_offset
constexpr unsigned kFlagKeyBound = 4u;  // apply k_idx < seq_k
constexpr unsigned kFlagTokens = 8u;    // apply the token tile's mask, and nothing else

// A table row read through the read-only data path (ld.global.nc): the tables stay unchanged
// while a kernel runs. (What a const __restrict__ kernel parameter gives; a pointer that comes
// in a parameter struct does not carry the qualifier.)
__device__ __forceinline__ Int4 load_entry(const Int4* row) {
  const int4 value = __ldg(reinterpret_cast<const int4*>(row));
  return Int4{value.x, value.y, value.z, value.w};
}

// The entry's 64 mask bits, one per cell of the tile.
__device__ __forceinline__ unsigned long long mask_word(const Int4& entry) {
  return (static_cast<unsigned long long>(static_cast<unsigned>(entry.w)) << 32) |
         static_cast<unsigned>(entry.z);
}

// ------------------------------------------------------------------ PTX wrappers
__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
      : "=r"(address)
      : "l"(pointer));
  return address;
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills (rows past the sequence end).
__device__ __forceinline__ void copy_async_16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// 16-byte global -> shared copy of a row that always exists (no zero fill). Passing src_bytes =
// 16 above is equivalent, but its extra PTX operand changes how ptxas schedules the SDD pipeline's
// V staging (BLOCK = 64, D = 64: 8 more registers and a spill on sm_80, nvcc 13.0).
__device__ __forceinline__ void copy_async_16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int Pending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// Two floats -> one register of two 16-bit floats, `low` in the low half.
__device__ __forceinline__ unsigned pack_pair(float low, float high) {
  unsigned packed;
#if DTYPE_BF16
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(high), "f"(low));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(high), "f"(low));
#endif
  return packed;
}

// The low and high 16-bit floats of a packed pair, as fp32.
__device__ __forceinline__ float unpack_low(unsigned pair) {
#if DTYPE_BF16
  return __uint_as_float(pair << 16);
#else
  float value;
  asm("{ .reg .b16 low, high; mov.b32 {low, high}, %1; cvt.f32.f16 %0, low; }"
      : "=f"(value)
      : "r"(pair));
  return value;
#endif
}

__device__ __forceinline__ float unpack_high(unsigned pair) {
#if DTYPE_BF16
  return __uint_as_float(pair & 0xffff0000u);
#else
  float value;
  asm("{ .reg .b16 low, high; mov.b32 {low, high}, %1; cvt.f32.f16 %0, high; }"
      : "=f"(value)
      : "r"(pair));
  return value;
#endif
}

__device__ __forceinline__ float exp2_approx(float x) {  // 2^-inf = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float max_of(float a, float b) { return a > b ? a : b; }

__device__ __forceinline__ float negative_infinity() { return -__int_as_float(0x7f800000); }

// −inf from a mov the compiler cannot fold. With the constant above, nvcc 13.0 reshapes the SDD
// pipeline's gather loop and epilogue: 10 to 28 more instructions in sdd_matmul_t16 / t32.
__device__ __forceinline__ float opaque_negative_infinity() {
  float value;
  asm("mov.b32 %0, 0xff800000;\n" : "=f"(value));
  return value;
}

// The lane and thread index read afresh: per-lane address arithmetic derived from these is
// recomputed where it is used instead of being hoisted out of the main loop, where it held ~25
// registers and spilled (ptxas, D = 128).
__device__ __forceinline__ int fresh_lane() {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  return lane;
}

__device__ __forceinline__ int fresh_thread() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

// The block index read afresh, for what a kernel derives from it again after its main loop
// rather than keeping it live through the loop.
__device__ __forceinline__ int fresh_block() {
  int block;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(block));
  return block;
}

// ------------------------------------------------------------------ mma.sync (sm_80 and newer)
__device__ __forceinline__ void ldmatrix_x4(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned address, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// d += a · b for one m16n8k16 atom, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
#if DTYPE_BF16
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#endif
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
}  // namespace
