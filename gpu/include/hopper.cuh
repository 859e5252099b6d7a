// Hopper (sm_90) helpers: mbarriers, TMA tile loads and bulk copies, named barriers and register
// reallocation. Used by the warp-specialised kernels (gpu/forward/sm90.cu, gpu/backward/sm90.cu,
// gpu/backward/sm90_dq.cu); setmaxnreg needs sm_90a.

#pragma once

#include "attention_common.cuh"  // Int4
#include "params.cuh"          // TensorMap

namespace {

// ------------------------------------------------------------------ mbarriers
__device__ __forceinline__ void barrier_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Make the initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void barrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrive and announce `bytes` of copies that will complete on this barrier's current phase.
__device__ __forceinline__ void barrier_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

// Wait until the phase of parity `parity` has completed (a fresh barrier counts parity 1 as
// completed, so producers start waiting on "empty" barriers with parity 1).
__device__ __forceinline__ void barrier_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ------------------------------------------------------------------ entries in shared memory
// A table entry handed from the producer to the consumers beside the tile it names: stored
// before the arrive on the tile's "full" barrier (its release orders the store), loaded after the
// wait (acquire), so a consumer never waits on global memory for it.
__device__ __forceinline__ void store_entry_shared(unsigned address, const Int4& entry) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(entry.x),
               "r"(entry.y), "r"(entry.z), "r"(entry.w)
               : "memory");
}

__device__ __forceinline__ Int4 load_entry_shared(unsigned address) {
  Int4 entry;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(entry.x), "=r"(entry.y), "=r"(entry.z), "=r"(entry.w)
               : "r"(address)
               : "memory");
  return entry;
}

// ------------------------------------------------------------------ TMA
// Copy the box at (c0, c1, c2, c3) (innermost first) of `map` into shared memory at `dst`;
// completion adds the box's bytes to `bar`'s transaction count. Out-of-bounds rows read zeros.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TensorMap& map, unsigned bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(bar)
      : "memory");
}

// The box at (c0, c1) / (c0, c1, c2) of an unswizzled map of 32-bit words (the lse2 and Δ rows,
// the token tiles: `words_map` in gpu/forward/tensor_maps.py) into shared memory at `dst`
// (128-byte aligned). These, not raw bulk copies (`cp.async.bulk`), carry what threads then read
// with plain loads: compute-sanitizer's racecheck pairs a raw bulk copy's write with the issuing
// thread and does not see the mbarrier that orders it before the readers, so it reports a race.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap& map, unsigned bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap& map, unsigned bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `Rows` rows as TMA writes it
// with the 128-byte swizzle: 64-element column blocks of 128-byte rows, chunk c of row r at
// chunk c ^ (r & 7) (the layout wgmma reads).
template <int Rows>
__device__ __forceinline__ unsigned tile_offset(int row, int chunk) {
  return (chunk >> 3) * (Rows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// Load `Rows` rows from `row0` of one (head, batch) slice as HeadDim / 64 boxes of 64 columns.
template <int Rows, int HeadDim>
__device__ __forceinline__ void load_rows(unsigned dst, const TensorMap& map, unsigned bar,
                                          int row0, int head, int b) {
#pragma unroll
  for (int block = 0; block < HeadDim / 64; ++block) {
    tma_load_4d(dst + block * Rows * 128, map, bar, block * 64, row0, head, b);
  }
}

// dst[i] += src[i] for `bytes` / 4 floats, global += shared, by the copy engine (one bulk
// group of the issuing thread; commit with bulk_commit).
__device__ __forceinline__ void bulk_reduce_add(float* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(src), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Wait until at most `Pending` of this thread's bulk groups still read their shared memory.
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
}

// Wait until at most `Pending` of this thread's bulk groups are still running.
template <int Pending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// ------------------------------------------------------------------ warpgroup scheduling
// Named barriers 1..15 (0 is __syncthreads): `threads` must arrive for `sync` to return.
__device__ __forceinline__ void named_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Move registers between warpgroups (the kernel needs __launch_bounds__(threads, 1)).
template <int Registers>
__device__ __forceinline__ void registers_release() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

template <int Registers>
__device__ __forceinline__ void registers_claim() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}

// The warp's index, uniform across its lanes (the compiler can then branch without divergence).
__device__ __forceinline__ int warp_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
}

}  // namespace
