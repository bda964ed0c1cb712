// Unit tests of the fast fp32 quotient of include/act_quant.h (aq_quotient_fast_ok, aq_quotient,
// aq_fnuz_from_fn_x4), which the CUDA activation quantization uses in place of the IEEE division
// x / scale. Compiled with -O2 -ffp-contract=off and run by test_act_quant_quotient.py; prints "ok <check>"
// (and on stderr what it covered) or "FAIL <check>: <details>" per check; the exit status is the number of
// failed checks.
//
// For an element x of a group with largest magnitude amax, the kernel computes
//   aq_quotient_fast_ok(scale, amax) ? code(aq_quotient(x, scale, 1 / scale)) : code(x / scale)
// with e4m3fn codes from the hardware conversion (aq_encode's function for finite values) and e4m3fnuz
// codes from aq_fnuz_from_fn_x4 on the e4m3fn codes of 2q. The predicate only gets weaker as amax
// shrinks, so taking amax = |x| covers every group that takes the fast path. Each check compares the
// kernel's codes with aq_encode of the fp32 IEEE quotient and its sign rule; where the quotient is at
// least 2^-12 it also wants the same fp32 bits (the exactness argument of aq_quotient).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "act_quant.h"

using fp8gemm::aq_bf16_to_f32;
using fp8gemm::aq_bits;
using fp8gemm::aq_encode;
using fp8gemm::aq_f16_to_f32;
using fp8gemm::aq_float;
using fp8gemm::aq_fnuz_from_fn_x4;
using fp8gemm::aq_fp8_max;
using fp8gemm::aq_quotient;
using fp8gemm::aq_quotient_fast_ok;
using fp8gemm::aq_quotient_sign;
using fp8gemm::aq_scale_from_quotient;
using fp8gemm::kAqFnuzOverBits;

namespace {

// The hot loop is compiled twice: for x86 CPUs with AVX2 and FMA (vectorized; libm's fmaf is correctly
// rounded too, only far slower), and portably.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__clang__)
#define AQ_FAST_TARGET 1
#define AQ_FAST_ATTRIBUTES __attribute__((target("avx2,fma")))
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define AQ_FAST_TARGET 1
#define AQ_FAST_ATTRIBUTES __attribute__((target("avx2,fma"), optimize("vect-cost-model=dynamic")))
#else
#define AQ_FAST_TARGET 0
#define AQ_FAST_ATTRIBUTES
#endif
#if defined(__GNUC__) || defined(__clang__)
#define AQ_INLINE inline __attribute__((always_inline))
#else
#define AQ_INLINE inline
#endif

bool use_fast_target() {
#if AQ_FAST_TARGET
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

int failures = 0;

// "ok <check>" on stdout and what it covered on stderr, or "FAIL <check>: <details>".
void report(bool ok, const char* check, const std::string& details) {
  if (ok) {
    std::printf("ok %s\n", check);
    std::fprintf(stderr, "%s %s\n", check, details.c_str());
  } else {
    std::printf("FAIL %s: %s\n", check, details.c_str());
    ++failures;
  }
  std::fflush(stdout);
}

// The kernel's code of x / scale on the fast path, and the code of the IEEE quotient.
AQ_INLINE uint32_t fast_code(float q, bool fnuz) {
  const uint32_t neg = aq_bits(q) >> 31;
  if (!fnuz) return aq_encode(q, neg, false);
  const uint32_t over = (aq_bits(q) & 0x7FFFFFFFu) > kAqFnuzOverBits ? 1u : 0u;
  return aq_fnuz_from_fn_x4(aq_encode(2.0f * q, neg, false), over) & 0xFFu;
}

AQ_INLINE uint32_t ieee_code(float x, float scale, bool fnuz) {
  return aq_encode(x / scale, aq_quotient_sign(x, scale), fnuz);
}

std::string describe(const char* what, float x, float scale) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s: x = %a, scale = %a, IEEE %a, fast %a", what, x, scale, x / scale,
                aq_quotient(x, scale, 1.0f / scale));
  return buf;
}

// What a pair loop found; merged over threads.
struct Tally {
  uint64_t fast = 0, exact = 0, bits_differ = 0;
  std::string failure;
  void fail(const std::string& what) {
    if (failure.empty()) failure = what;
  }
  void add(const Tally& o) {
    fast += o.fast, exact += o.exact, bits_differ += o.bits_differ;
    if (failure.empty()) failure = o.failure;
  }
};

// A pair whose fp32 quotients differ: the codes must not, and the quotient must be below 2^-12.
void check_differing_pair(float x, float scale, Tally& t) {
  ++t.bits_differ;
  const float ieee = x / scale, fast = aq_quotient(x, scale, 1.0f / scale);
  if (!(ieee < 0x1p-12f && ieee > -0x1p-12f)) t.fail(describe("fp32 bits differ at |quotient| >= 2^-12", x, scale));
  for (const bool fnuz : {false, true})
    if (fast_code(fast, fnuz) != ieee_code(x, scale, fnuz))
      t.fail(describe(fnuz ? "e4m3fnuz codes differ" : "e4m3fn codes differ", x, scale));
}

// One (x, scale) pair as the kernel sees it, for a group whose amax is |x|.
void check_pair(float x, float scale, Tally& t) {
  if (!aq_quotient_fast_ok(scale, aq_bits(x) & 0x7FFFFFFFu)) {
    ++t.exact;  // the kernel divides
    return;
  }
  ++t.fast;
  if (aq_bits(x / scale) != aq_bits(aq_quotient(x, scale, 1.0f / scale))) check_differing_pair(x, scale, t);
}

// Splits [0, n) over the CPU's threads; body(begin, end, tally).
Tally parallel(uint64_t n, const std::function<void(uint64_t, uint64_t, Tally&)>& body) {
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> pool;
  std::atomic<uint64_t> next{0};
  const uint64_t chunk = std::max<uint64_t>(1, n / (threads * 64));
  for (unsigned i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      for (uint64_t b; (b = next.fetch_add(chunk)) < n;) body(b, std::min(n, b + chunk), tallies[i]);
    });
  for (auto& th : pool) th.join();
  Tally all;
  for (const Tally& t : tallies) all.add(t);
  return all;
}

// Flags the x of x[0, n) (n a multiple of 8) whose fp32 quotients x / scale and aq_quotient differ;
// returns how many. The hot loop: blocks of 8 so that it vectorizes.
AQ_INLINE uint32_t flag_differing(const float* x, size_t n, float scale, float recip, uint8_t* flags) {
  uint32_t count = 0;
  for (size_t i = 0; i < n; i += 8)
    for (size_t j = i; j < i + 8; ++j) {
      const uint8_t d = aq_bits(x[j] / scale) != aq_bits(aq_quotient(x[j], scale, recip)) ? 1 : 0;
      flags[j] = d;
      count += d;
    }
  return count;
}
AQ_FAST_ATTRIBUTES uint32_t flag_differing_fast(const float* x, size_t n, float scale, float recip, uint8_t* flags) {
  return flag_differing(x, n, scale, recip, flags);
}
uint32_t flag_differing_portable(const float* x, size_t n, float scale, float recip, uint8_t* flags) {
  return flag_differing(x, n, scale, recip, flags);
}

// The x of a quotient check: the finite ones ordered by magnitude, so that aq_quotient_fast_ok holds for
// a prefix, padded with zeros to a multiple of 8; NaNs and infinities (the kernel divides) only counted.
struct Xs {
  std::vector<float> x;
  size_t n = 0;
  uint64_t nonfinite = 0;
};

Xs make_xs(const std::vector<float>& v) {
  Xs xs;
  for (const float x : v) (aq_bits(x) & 0x7FFFFFFFu) < 0x7F800000u ? xs.x.push_back(x) : void(++xs.nonfinite);
  std::sort(xs.x.begin(), xs.x.end(), [](float a, float b) {
    return ((aq_bits(a) & 0x7FFFFFFFu) << 1 | aq_bits(a) >> 31) < ((aq_bits(b) & 0x7FFFFFFFu) << 1 | aq_bits(b) >> 31);
  });
  xs.n = xs.x.size();
  xs.x.resize((xs.n + 7) / 8 * 8, 0.0f);
  return xs;
}

// Every x against every scale of scales[b, e).
void check_rows(const Xs& xs, const float* scales, uint64_t b, uint64_t e, Tally& t) {
  const bool fast_target = use_fast_target();
  std::vector<uint8_t> flags(xs.x.size());
  for (uint64_t i = b; i < e; ++i) {
    const float scale = scales[i];
    const size_t fast = std::partition_point(xs.x.begin(), xs.x.begin() + xs.n, [&](float x) {
                          return aq_quotient_fast_ok(scale, aq_bits(x) & 0x7FFFFFFFu);
                        }) - xs.x.begin();
    t.fast += fast;
    t.exact += xs.n - fast + xs.nonfinite;
    if (fast == 0) continue;
    const size_t n8 = (fast + 7) / 8 * 8;
    const float recip = 1.0f / scale;
    if ((fast_target ? flag_differing_fast : flag_differing_portable)(xs.x.data(), n8, scale, recip, flags.data()) == 0)
      continue;
    for (size_t j = 0; j < fast; ++j)
      if (flags[j]) check_differing_pair(xs.x[j], scale, t);
  }
}

Tally all_pairs(const Xs& xs, const std::vector<float>& scales) {
  return parallel(scales.size(), [&](uint64_t b, uint64_t e, Tally& t) { check_rows(xs, scales.data(), b, e, t); });
}

std::vector<float> all_bf16() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x10000u; ++b) v.push_back(aq_bf16_to_f32(static_cast<uint16_t>(b)));
  return v;
}

std::vector<float> all_fp16() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x10000u; ++b) v.push_back(aq_f16_to_f32(static_cast<uint16_t>(b)));
  return v;
}

float dynamic_scale(float amax, bool fnuz) {
  return aq_scale_from_quotient(aq_bits(amax) & 0x7FFFFFFFu, (amax < 0 ? -amax : amax) / aq_fp8_max(fnuz));
}

// The scales the quotient checks use: every dynamic scale of a bf16 amax (both formats), those of every
// 8th fp16 amax, random fp32 scales over the fast path's range and all of fp32, powers of two, and the
// edges of the range, the special values and scales the kernel must divide by.
std::vector<float> scale_set() {
  std::vector<float> s;
  for (const bool fnuz : {false, true}) {
    for (uint32_t b = 0; b <= 0x7F80u; ++b) s.push_back(dynamic_scale(aq_bf16_to_f32(static_cast<uint16_t>(b)), fnuz));
    for (uint32_t b = 0; b <= 0x7C00u; b += 8) s.push_back(dynamic_scale(aq_f16_to_f32(static_cast<uint16_t>(b)), fnuz));
  }
  std::mt19937 rng(20240611u);
  for (int i = 0; i < 2048; ++i) s.push_back(aq_float(0x12800000u + rng() % (0x7E000000u - 0x12800000u)));
  for (int i = 0; i < 1024; ++i) {
    const float significand = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng);
    s.push_back(std::ldexp(significand, std::uniform_int_distribution<int>(-42, 20)(rng)));
  }
  for (int i = 0; i < 256; ++i) s.push_back(aq_float(static_cast<uint32_t>(rng())));
  for (int e = -149; e <= 127; ++e) s.push_back(std::ldexp(1.0f, e));
  const float inf = std::numeric_limits<float>::infinity();
  for (const float v : {1e-12f, 1e-30f, 1e30f, 3.7f, 0.5f, std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                        std::nextafter(0x1p-90f, 0.0f), 0x1p-90f, std::nextafter(0x1p-90f, inf),
                        std::nextafter(0x1p125f, 0.0f), 0x1p125f, 0x1.fffffep+0f, 0x1.000002p+0f, 0x1.fffffep-41f,
                        0.0f, -0.0f, -2.0f, -1e-12f, inf, -inf, std::numeric_limits<float>::quiet_NaN()})
    s.push_back(v);
  std::sort(s.begin(), s.end(), [](float a, float b) { return aq_bits(a) < aq_bits(b); });
  s.erase(std::unique(s.begin(), s.end(), [](float a, float b) { return aq_bits(a) == aq_bits(b); }), s.end());
  return s;
}

std::string counts(const Tally& t, const char* what) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "(%s: %" PRIu64 " pairs on the fast path, %" PRIu64
                " left to the division; fp32 bits differ in %" PRIu64 ", all below 2^-12)",
                what, t.fast, t.exact, t.bits_differ);
  return buf;
}

void check_fast_path_domain() {
  std::string bad;
  uint64_t n = 0;
  auto want = [&](bool ok, float scale, uint32_t amax_bits) {
    ++n;
    if (!ok && bad.empty()) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), "wrong for scale %a, amax bits 0x%08" PRIx32, scale, amax_bits);
      bad = buf;
    }
  };
  // Every dynamic scale of a finite amax passes (bf16 and fp16 amax, every 61st fp32 pattern).
  std::vector<float> amaxes;
  for (uint32_t b = 0; b < 0x7F80u; ++b) amaxes.push_back(aq_bf16_to_f32(static_cast<uint16_t>(b)));
  for (uint32_t b = 0; b < 0x7C00u; ++b) amaxes.push_back(aq_f16_to_f32(static_cast<uint16_t>(b)));
  for (uint32_t b = 0; b < 0x7F800000u; b += 61) amaxes.push_back(aq_float(b));
  amaxes.push_back(std::numeric_limits<float>::max());
  for (const float a : amaxes)
    for (const bool fnuz : {false, true}) want(aq_quotient_fast_ok(dynamic_scale(a, fnuz), aq_bits(a)), a, aq_bits(a));
  // Non-finite amax, and scales that are not positive normal numbers in [2^-90, 2^125), never pass.
  const float inf = std::numeric_limits<float>::infinity();
  for (const uint32_t amax : {0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu})
    for (const float scale : {1e-12f, 1.0f, 3.5e35f}) want(!aq_quotient_fast_ok(scale, amax), scale, amax);
  for (const float scale : {0.0f, -0.0f, -1.0f, -1e-12f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min(), 0x1p-91f, std::nextafter(0x1p-90f, 0.0f), 0x1p125f,
                            std::numeric_limits<float>::max()})
    want(!aq_quotient_fast_ok(scale, 0), scale, 0);
  want(aq_quotient_fast_ok(0x1p-90f, 0) && aq_quotient_fast_ok(std::nextafter(0x1p125f, 0.0f), 0), 0, 0);
  // The quotient bound: amax below 2^100 * scale passes, from 2^100 * scale on it does not.
  want(aq_quotient_fast_ok(1.0f, aq_bits(std::nextafter(0x1p100f, 0.0f))) && !aq_quotient_fast_ok(1.0f, aq_bits(0x1p100f)),
       1.0f, aq_bits(0x1p100f));
  report(bad.empty(), "fast_path_domain",
         bad.empty() ? "(" + std::to_string(n) + " scale and amax cases)" : bad);
}

// aq_fnuz_from_fn_x4 against aq_encode for e4m3fnuz: every fp32 value with 2^-17 <= |q| < 2^9 (each
// significand, both signs; the byte position and the neighbouring codes vary), and a sample of the other
// exponents.
void check_fnuz_from_fn() {
  Tally t = parallel(uint64_t{1} << 26, [](uint64_t b, uint64_t e, Tally& t) {
    for (uint64_t i = b; i < e; ++i) {
      // Exponent fields 110..135; index bits past 23 pick the first exponent and the sign.
      const uint32_t m = static_cast<uint32_t>(i) & 0x7FFFFFu, hi = static_cast<uint32_t>(i >> 23);
      for (uint32_t field = 110 + (hi & 3); field < 136; field += 4) {
        const float q = aq_float(((hi >> 2) << 31) | (field << 23) | m);
        ++t.fast;
        const uint32_t want = aq_encode(q, aq_bits(q) >> 31, true);
        const uint32_t fn = aq_encode(2.0f * q, aq_bits(q) >> 31, false);
        const uint32_t over = (aq_bits(q) & 0x7FFFFFFFu) > kAqFnuzOverBits ? 1u : 0u;
        const uint32_t pos = m % 4;  // byte position, the other bytes holding neighbours' codes
        const uint32_t got = aq_fnuz_from_fn_x4((fn << (8 * pos)) | (0x7E7E7E7Eu & ~(0xFFu << (8 * pos))),
                                                over << (8 * pos));
        if (((got >> (8 * pos)) & 0xFFu) != want || (got & ~(0xFFu << (8 * pos))) != (0x7E7E7E7Eu & ~(0xFFu << (8 * pos)))) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), "q = %a: got 0x%02" PRIx32 ", want 0x%02" PRIx32, q,
                        (got >> (8 * pos)) & 0xFFu, want);
          t.fail(buf);
        }
      }
    }
  });
  // Other exponents (zeros, subnormals, tiny and huge quotients up to the fast path's 2^100).
  for (uint32_t field = 0; field < 228; ++field) {
    if (field >= 110 && field < 136) continue;
    for (uint32_t m = 0; m < 0x800000u; m += (m < 16 || m > 0x7FFFF0u) ? 1u : 4099u)
      for (const uint32_t sign : {0u, 1u}) {
        const float q = aq_float((sign << 31) | (field << 23) | m);
        ++t.fast;
        const uint32_t over = (aq_bits(q) & 0x7FFFFFFFu) > kAqFnuzOverBits ? 1u : 0u;
        const uint32_t got = aq_fnuz_from_fn_x4(aq_encode(2.0f * q, sign, false), over) & 0xFFu;
        if (got != aq_encode(q, sign, true)) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), "q = %a: got 0x%02" PRIx32, q, got);
          t.fail(buf);
        }
      }
  }
  report(t.failure.empty(), "fnuz_from_fn",
         t.failure.empty() ? "(" + std::to_string(t.fast) + " quotients)" : t.failure);
}

void check_quotients(const char* check, const std::vector<float>& xs, const std::vector<float>& scales,
                     const char* what) {
  const Tally t = all_pairs(make_xs(xs), scales);
  report(t.failure.empty() && t.fast > 0, check, t.failure.empty() ? counts(t, what) : t.failure);
}

// x = every fp16 significand in [1, 2) (bf16's are among them) against scale = every fp32 significand in
// [1, 2). On the fast path nothing over- or underflows where |x / scale| >= 2^-12 (aq_quotient_fast_ok),
// so there the fp32 quotients only depend on the significands, and quotients in (1/2, 2) cover both
// orders of x and scale: every bf16 and fp16 x with every scale the fast path takes.
void check_significands(const std::vector<float>& bf16, const std::vector<float>& fp16) {
  std::vector<float> xs;
  for (const float x : fp16)
    if (x >= 1.0f && x < 2.0f) xs.push_back(x);
  const bool bf16_among = std::all_of(bf16.begin(), bf16.end(), [&](float x) {
    return !(x >= 1.0f && x < 2.0f) || std::find(xs.begin(), xs.end(), x) != xs.end();
  });
  const Tally t = parallel(uint64_t{1} << 23, [&](uint64_t b, uint64_t e, Tally& t) {
    const bool fast_target = use_fast_target();
    std::vector<uint8_t> flags(xs.size());
    for (uint64_t m = b; m < e; ++m) {
      const float scale = aq_float(0x3F800000u | static_cast<uint32_t>(m)), recip = 1.0f / scale;
      t.fast += xs.size();
      if ((fast_target ? flag_differing_fast : flag_differing_portable)(xs.data(), xs.size(), scale, recip,
                                                                        flags.data()) == 0)
        continue;
      for (size_t j = 0; j < xs.size(); ++j)
        if (flags[j]) {
          ++t.bits_differ;
          t.fail(describe("fp32 bits differ", xs[j], scale));
        }
    }
  });
  char buf[160];
  std::snprintf(buf, sizeof(buf), "(%zu x significands by 2^23 scale significands: %" PRIu64 " pairs)", xs.size(),
                t.fast);
  report(t.failure.empty() && bf16_among && xs.size() == 1024, "quotient_significands",
         t.failure.empty() ? buf : t.failure);
}

// fp32 x: every significand against the scale significands where q0 may miss the quotient by the most
// (largest and smallest), then random pairs over the whole fast path.
void check_fp32_x() {
  std::vector<float> xs;
  for (uint32_t m = 0; m < 0x800000u; ++m) xs.push_back(aq_float(0x3F800000u | m));
  std::vector<float> scales;
  for (uint32_t m = 0; m < 24; ++m) {
    scales.push_back(aq_float(0x3FFFFFFFu - m));
    scales.push_back(aq_float(0x3F800001u + m));
  }
  std::mt19937 rng(7u);
  for (int i = 0; i < 16; ++i) scales.push_back(aq_float(0x3F800000u | (rng() & 0x7FFFFFu)));
  Tally t = all_pairs(make_xs(xs), scales);
  const Tally random = parallel(1u << 12, [](uint64_t b, uint64_t e, Tally& t) {
    std::mt19937_64 rng(b * 0x9E3779B97F4A7C15ull + 1);
    std::vector<float> xs(4096);
    for (uint64_t i = b; i < e; ++i) {
      const float scale = aq_float(0x12800000u + static_cast<uint32_t>(rng() % (0x7E000000u - 0x12800000u)));
      for (float& x : xs) {
        // Quotients around the fp8 range and beyond: x = scale * 2^[-40, 12) * [1, 2), either sign.
        const int shift = static_cast<int>(rng() % 52) - 40;
        x = std::ldexp(scale * aq_float(0x3F800000u | static_cast<uint32_t>(rng() & 0x7FFFFFu)), shift);
        if (rng() & 1) x = -x;
      }
      for (const float x : xs) check_pair(x, scale, t);
    }
  });
  t.add(random);
  report(t.failure.empty(), "quotient_fp32_x", t.failure.empty() ? counts(t, "fp32 x") : t.failure);
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<float> bf16 = all_bf16(), fp16 = all_fp16(), scales = scale_set();
  check_fast_path_domain();
  check_fnuz_from_fn();
  check_quotients("quotient_bf16_x", bf16, scales, "every bf16 x");
  check_quotients("quotient_fp16_x", fp16, scales, "every fp16 x");
  check_significands(bf16, fp16);
  check_fp32_x();
  std::fprintf(stderr, "%zu scales, %.1f s, %s\n", scales.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               use_fast_target() ? "AVX2 and FMA" : "portable");
  return failures;
}
