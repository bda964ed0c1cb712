#!/usr/bin/env python3
"""Writes probe copies of gemm/gemm_cuda/sm90_hand_kernel.cuh (the kernel itself is never edited):

  ceiling  Cfg gets a 6th parameter kMode: 0 = the real kernel, 1 = no promotion (the wgmmas accumulate
           straight into one fp32 accumulator over all of K, like a per-tensor-scaled GEMM), 2 = as 1 and
           no TMA loads (the producer only arrives on the full barriers: tensor-core + barrier cost alone);
           BN = 256 allowed (kMode >= 1 only: the real kernel does not fit its registers).
  trace    globaltimer stamps per piece of work into hand::g_trace (128 records of 8 u64 per CTA:
           item | kb_begin << 32 | kb_end << 48, start, main loop end, stream-K wait start / end, end,
           kernel start, contributors << 32 | slot) and, in record 127, loop marks of the math
           warpgroup (0-3) and the producer (4-7).
  skplan   hand::g_sk_mode overrides stream_k_partial_wave_only(): 0 = the kernel's rule, 1 = always
           split only the partial wave, 2 = always add one full wave (the rule before 2026-11-30 11:25).

usage: patch_kernel.py OUT_DIR   (writes ceiling_kernel.cuh, trace_kernel.cuh, skplan_kernel.cuh and a copy
       of sm90_kernel_args.h with the skplan hook)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "gemm", "gemm_cuda")


def rep(s, old, new, count=1):
    if s.count(old) != count:
        raise SystemExit(f"patch_kernel.py: expected {count} match(es) of:\n{old}\n(the kernel changed; update the probe)")
    return s.replace(old, new)


def ceiling(s):
    s = rep(s, "FP8GEMM_HAND_WGMMA(192)\n", "FP8GEMM_HAND_WGMMA(192)\nFP8GEMM_HAND_WGMMA(256)\n")
    s = rep(s, "template <int BN_, int kMathWGs_, bool kDoubleBuffer_, int kCluster_ = 1, bool kStreamK_ = false>\nstruct Cfg {",
            "template <int BN_, int kMathWGs_, bool kDoubleBuffer_, int kCluster_ = 1, bool kStreamK_ = false, int kMode_ = 0>\n"
            "struct Cfg {\n  static constexpr int kMode = kMode_;")
    s = rep(s, '  static_assert(BN == 64 || BN == 128 || BN == 144 || BN == 192, "BN: a Wgmma<> specialisation (64, 128, 144, 192)");', "")
    s = rep(s, """          mbar_wait(&empty[s], phase ^ 1);
          mbar_arrive_expect_tx(&full[s], C::kStageBytes);""", """          mbar_wait(&empty[s], phase ^ 1);
          if constexpr (C::kMode == 2) { mbar_arrive(&full[s]); if (++s == C::kStages) { s = 0; phase ^= 1; } continue; }
          mbar_arrive_expect_tx(&full[s], C::kStageBytes);""")
    s = rep(s, """      if constexpr (C::kDoubleBuffer) {
        // Block kb lives""", """      if constexpr (C::kMode >= 1) {
        for (int kb = 0; kb < nkb; ++kb) {
          mbar_wait(&full[s], phase);
          const uint64_t da = smem_desc_k128b(smem + s * C::kABytes + mw * 64 * kBlockK);
          const uint64_t db = smem_desc_k128b(smem + C::kOffB + s * C::kBBytes);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kBlockK / 32; ++kk)
            wgmma_call<C::BN>(da + 2 * kk, db + 2 * kk, acc, true, std::make_index_sequence<R>{});
          wgmma_commit();
          if (kb > 0) {
            wgmma_wait<1>();
            const int ps = s == 0 ? C::kStages - 1 : s - 1;
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[ps]);
          }
          advance(s, phase);
        }
        wgmma_wait<0>();
        {
          const int ps = s == 0 ? C::kStages - 1 : s - 1;
          __syncwarp();
          if (lane == 0) mbar_arrive(&empty[ps]);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) fence_reg(acc[i]);
      } else if constexpr (C::kDoubleBuffer) {
        // Block kb lives""")
    return s


def trace(s):
    s = rep(s, "namespace fp8gemm::cuda::sm90::hand {\n", """namespace fp8gemm::cuda::sm90::hand {
__device__ unsigned long long* g_trace;
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void mark(int field) {
  if (threadIdx.x == 128 || threadIdx.x == 0)
    g_trace[(size_t(blockIdx.x) * 128 + 127) * 8 + field + (threadIdx.x == 0 ? 4 : 0)] = gtime();
}
""")
    s = rep(s, """__device__ __forceinline__ void for_each_piece(const Params& p, int first_item, int item_stride, int num_kb, F&& f) {
  for (int t = first_item; t < p.dp_items; t += item_stride) f(std::false_type{}, t, 0, num_kb, 0, 0, 0);
  if constexpr (kStreamK) {""", """__device__ __forceinline__ void for_each_piece(const Params& p, int first_item, int item_stride, int num_kb, F&& f) {
  mark(0);
  for (int t = first_item; t < p.dp_items; t += item_stride) f(std::false_type{}, t, 0, num_kb, 0, 0, 0);
  mark(1);
  if constexpr (kStreamK) {""")
    s = rep(s, """      for (int pos = first_item * p.sk_len, end = min(pos + p.sk_len, total); pos < end;) {
""", """      for (int pos = first_item * p.sk_len, end = min(pos + p.sk_len, total); pos < end;) {
        if (pos == first_item * p.sk_len) mark(2);
""")
    s = rep(s, "  else __syncthreads();\n", "  else __syncthreads();\n  mark(3);\n")
    s = rep(s, """    auto process = [&](auto sk_phase, const int t, const int kb_begin, const int kb_end, const int my_slot,
                       const int contrib_first, const int contrib_count) {
""", """    int trace_n = 0;
    const unsigned long long t_kernel = gtime();
    auto process = [&](auto sk_phase, const int t, const int kb_begin, const int kb_end, const int my_slot,
                       const int contrib_first, const int contrib_count) {
      unsigned long long tr[8];
      tr[0] = t | (uint64_t(kb_begin) << 32) | (uint64_t(kb_end) << 48);
      tr[1] = gtime();
""")
    s = rep(s, """      // ---- stream-K: hand a partial tile over, or collect the others' partials ----
""", """      tr[2] = gtime();
      tr[3] = tr[4] = 0;
      auto emit = [&]() {
        if (mw == 0 && tid == 0 && trace_n < 126) {
          tr[5] = gtime();
          tr[6] = t_kernel;
          tr[7] = (uint64_t(contrib_count) << 32) | uint32_t(my_slot);
          unsigned long long* dst = g_trace + (size_t(blockIdx.x) * 128 + trace_n) * 8;
          for (int i = 0; i < 8; ++i) dst[i] = tr[i];
        }
        ++trace_n;
      };
      // ---- stream-K: hand a partial tile over, or collect the others' partials ----
""")
    s = rep(s, """          st_release(p.flags + cta_slot * C::kMathWGs + mw, 1u);
        }
        return;""", """          st_release(p.flags + cta_slot * C::kMathWGs + mw, 1u);
        }
        tr[3] = 1;
        emit();
        return;""")
    s = rep(s, "      if (sk_owner) {\n", "      if (sk_owner) {\n        tr[3] = gtime();\n")
    s = rep(s, "      // ---- epilogue: bf16 into swizzled panels, then TMA stores of this warpgroup's 64 rows ----\n",
            "      if (sk_owner) tr[4] = gtime();\n"
            "      // ---- epilogue: bf16 into swizzled panels, then TMA stores of this warpgroup's 64 rows ----\n")
    s = rep(s, """        tma_store_commit();
      }
    };
""", """        tma_store_commit();
      }
      emit();
    };
""")
    return s


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    src = open(os.path.join(SRC, "sm90_hand_kernel.cuh")).read()
    args = open(os.path.join(SRC, "sm90_kernel_args.h")).read()
    for name, fn in (("ceiling", ceiling), ("trace", trace), ("skplan", lambda s: s)):
        open(os.path.join(out, f"{name}_kernel.cuh"), "w").write(fn(src))
    # skplan: the rule lives in sm90_kernel_args.h (shared with the launcher); the probe copy of that
    # header reads a mode the probe sets.
    args = rep(args, "inline bool stream_k_partial_wave_only(int64_t items, int64_t slots, int64_t kb) {\n",
               "inline int g_sk_mode = 0;  // probe: 0 = rule, 1 = partial wave only, 2 = plus one full wave\n"
               "inline bool stream_k_partial_wave_only(int64_t items, int64_t slots, int64_t kb) {\n"
               "  if (g_sk_mode != 0) return items / slots >= 1 && items % slots > 0 && g_sk_mode == 1;\n")
    open(os.path.join(out, "sm90_kernel_args.h"), "w").write(args)


if __name__ == "__main__":
    main()
