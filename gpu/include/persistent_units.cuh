// The work order of the persistent Hopper forward (gpu/forward/sm90.cu): which work units each
// CTA runs, in which order, and what a unit is (the backward's dQ kernel, gpu/backward/sm90_dq.cu,
// runs one unit per CTA).
//
// The n_work = n_items · P work units (P = B · heads_per_item (batch, head) pairs per item) run
// in groups of `head_group` pairs, whose K and V fit in L2 (the host sizes them): group g is
// units [g·U, g·U + U), U = n_items · head_group (the last may be smaller), item-major inside
// (the item, then the pair). Each group is dealt in rounds of G = gridDim.x units, round r
// giving CTA x the group's next unit x (even r) or G - 1 - x (odd r); a group's last round may
// leave CTAs idle. Items are sorted heaviest first (within groups of layout heads when the host
// orders them so), so a round deals units of about one weight and the snake evens out the
// CTAs' totals (rounds that ran on into the next group would deal its heaviest units beside
// this one's lightest). Pair p is batch element p % B, head item.head · heads_per_item + p / B.

#pragma once

#include "attention_common.cuh"

namespace {

// One unit of work: a work item (a query tile's key-tile list) for one batch element and head.
struct Work {
  int b, head, kv_head, q_row0, first, count;
};

// Work unit w (see above): group w / (n_items · head_group) of (batch, head) pairs, inside
// it the item, then the pair; a layout of one head serves heads_per_item query heads.
__device__ __forceinline__ Work work_unit(const Int4* items, int w, int n_items, int batch,
                                          int heads_per_item, int kv_group, int head_group,
                                          int block_m) {
  const int pairs = batch * heads_per_item;
  const int group = w / (n_items * head_group);
  const int first_pair = group * head_group;
  const int group_size = min(head_group, pairs - first_pair);
  const int rest = w - group * n_items * head_group;
  const int pair = first_pair + rest % group_size;
  const Int4 item = load_entry(items + rest / group_size);
  Work work;
  work.b = pair % batch;
  work.head = item.x * heads_per_item + pair / batch;
  work.kv_head = work.head / kv_group;
  work.q_row0 = item.y * block_m;
  work.first = item.z;
  work.count = item.w;
  return work;
}

// Rounds per group: ceil(group_units / G).
__device__ __forceinline__ int group_rounds(int group_units) {
  return (group_units + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
}

// The unit CTA blockIdx.x runs in round `round` (see above), or -1 for none (a group's last
// round); rounds run to group_rounds() times the number of groups.
__device__ __forceinline__ int unit_of_round(int round, int n_work, int group_units) {
  const int ctas = static_cast<int>(gridDim.x);
  const int rounds = group_rounds(group_units);
  const int group = round / rounds;
  const int first = group * group_units;
  const int unit = (round - group * rounds) * ctas +
                   ((round & 1) ? ctas - 1 - static_cast<int>(blockIdx.x)
                                : static_cast<int>(blockIdx.x));
  return unit < min(group_units, n_work - first) ? first + unit : -1;
}

}  // namespace
