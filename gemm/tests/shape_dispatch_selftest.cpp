// Unit tests of include/gemm_shape_dispatch.h, compiled with g++ and run by test_shape_dispatch.py.
// Prints "ok <check>" for every check that passes and "FAIL <check>: <details>" otherwise; the
// exit status is the number of failed checks. Compile-time properties are static_asserts.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "gemm_shape_dispatch.h"

using fp8gemm::find_tuned;
using fp8gemm::kShapeFieldMax;
using fp8gemm::kUnpackableShape;
using fp8gemm::pack_shape;
using fp8gemm::shape_packable;
using fp8gemm::tuned_keys_unique;
using fp8gemm::TunedShape;

namespace {

struct Config {
  int id;
};

constexpr TunedShape<Config> kTable[] = {
    {pack_shape(1024, 1536, 7168), {1}},
    {pack_shape(6144, 7168, 256), {2}},
    {pack_shape(64, 576, 7168), {3}},
    {pack_shape(kShapeFieldMax, kShapeFieldMax, kShapeFieldMax), {4}},
    {pack_shape(1, 1, 1), {5}},
};
constexpr TunedShape<Config> kDuplicate[] = {{pack_shape(1024, 1536, 7168), {1}}, {pack_shape(1024, 1536, 7168), {2}}};
constexpr TunedShape<Config> kWithUnpackable[] = {{pack_shape(64, 64, 128), {1}}, {kUnpackableShape, {2}}};

// Everything must also work at compile time (tables are checked with static_assert).
static_assert(tuned_keys_unique(kTable), "distinct shapes give distinct keys");
static_assert(!tuned_keys_unique(kDuplicate), "a repeated shape is detected");
static_assert(!tuned_keys_unique(kWithUnpackable), "an unpackable key in a table is rejected");
static_assert(find_tuned(kTable, 6144, 7168, 256)->id == 2, "constexpr lookup");
static_assert(find_tuned(kTable, 1040, 1536, 7168) == nullptr, "M = 1040 must not run the M = 1024 entry");
static_assert(pack_shape(0, 1, 1) == kUnpackableShape, "zero is unpackable");
static_assert(pack_shape(1024, 1536, 7168) != pack_shape(1040, 1536, 7168), "no truncation to multiples of 32");

int failures = 0;

void report(bool ok, const char* check, const char* details = "") {
  if (ok)
    std::printf("ok %s\n", check);
  else {
    std::printf("FAIL %s: %s\n", check, details);
    ++failures;
  }
}

std::vector<int64_t> edge_values() {
  return {1,    2,    3,    31,   32,   33,   63,   64,   65,   96,    127,   128,   129,     255,
          256,  257,  511,  512,  513,  576,  1023, 1024, 1040, 1536,  2047,  2048,  2304,    4095,
          4096, 4608, 6144, 7040, 7167, 7168, 7169, 7295, 7296, 8191,  8192,  8193,  65535,   65536,
          65537, int64_t{1} << 20, (int64_t{1} << 20) + 1, kShapeFieldMax - 1, kShapeFieldMax};
}

void check_injective_on_edges() {
  const auto values = edge_values();
  std::vector<uint64_t> keys;
  keys.reserve(values.size() * values.size() * values.size());
  char details[256] = "";
  bool ok = true;
  for (int64_t m : values)
    for (int64_t n : values)
      for (int64_t k : values) {
        const uint64_t key = pack_shape(m, n, k);
        if (key == kUnpackableShape || fp8gemm::unpack_m(key) != m || fp8gemm::unpack_n(key) != n ||
            fp8gemm::unpack_k(key) != k) {
          if (ok)
            std::snprintf(details, sizeof(details), "(%" PRId64 ", %" PRId64 ", %" PRId64 ") does not round-trip", m,
                          n, k);
          ok = false;
        }
        keys.push_back(key);
      }
  std::sort(keys.begin(), keys.end());
  const bool unique = std::adjacent_find(keys.begin(), keys.end()) == keys.end();
  if (!unique && ok) std::snprintf(details, sizeof(details), "two edge shapes share a key");
  report(ok && unique, "injective_on_edge_values", details);
}

void check_hub_aliasing_cases() {
  // The cases the Hub's 8-bit (x/32) packing got wrong.
  const bool ok = pack_shape(1024, 1536, 7168) != pack_shape(1040, 1536, 7168) &&
                  pack_shape(1024, 1536, 7168) != pack_shape(1055, 1536, 7168) &&
                  pack_shape(64, 8191, 256) != pack_shape(64, 8192, 256) &&
                  pack_shape(64, 8192, 256) != pack_shape(64, 0 + 8192 + 1, 256) &&
                  pack_shape(1, 8192, 1) != pack_shape(2, 0 + 1, 1) &&
                  pack_shape(1, kShapeFieldMax, 1) != pack_shape(2, 1, 1) &&
                  pack_shape(1, 1, kShapeFieldMax) != pack_shape(1, 2, 1) &&
                  pack_shape(64, 576, 7168) != pack_shape(64, 576, 7169) &&
                  pack_shape(64, 576, 7168) != pack_shape(64, 576, 7168 + 127) &&
                  pack_shape(64, 576, 7168) != pack_shape(64, 576, 7168 - 127);
  report(ok, "hub_aliasing_cases");
}

void check_unpackable_never_match() {
  const int64_t bad[] = {0,
                         -1,
                         -128,
                         -(int64_t{1} << 21),
                         std::numeric_limits<int64_t>::min(),
                         kShapeFieldMax + 1,
                         int64_t{1} << 22,
                         int64_t{1} << 42,
                         std::numeric_limits<int64_t>::max()};
  const int64_t good[] = {1, 64, 7168, kShapeFieldMax};
  bool ok = true;
  char details[256] = "";
  auto check = [&](int64_t m, int64_t n, int64_t k) {
    const bool fails = shape_packable(m, n, k) || pack_shape(m, n, k) != kUnpackableShape ||
                       find_tuned(kTable, m, n, k) != nullptr || find_tuned(kWithUnpackable, m, n, k) != nullptr;
    if (fails && ok)
      std::snprintf(details, sizeof(details), "(%" PRId64 ", %" PRId64 ", %" PRId64 ") was accepted", m, n, k);
    ok = ok && !fails;
  };
  for (int64_t x : bad)
    for (int64_t g : good) {
      check(x, g, g);
      check(g, x, g);
      check(g, g, x);
    }
  for (int64_t x : bad) check(x, x, x);
  report(ok, "unpackable_shapes_never_match", details);
}

void check_lookup() {
  const Config* hit1 = find_tuned(kTable, 1024, 1536, 7168);
  const Config* hit3 = find_tuned(kTable, 64, 576, 7168);
  const Config* hit4 = find_tuned(kTable, kShapeFieldMax, kShapeFieldMax, kShapeFieldMax);
  const Config* hit5 = find_tuned(kTable, 1, 1, 1);
  report(hit1 && hit1->id == 1 && hit3 && hit3->id == 3 && hit4 && hit4->id == 4 && hit5 && hit5->id == 5,
         "lookup_hits");
  const int64_t misses[][3] = {{1040, 1536, 7168}, {1023, 1536, 7168}, {1024, 1537, 7168}, {1024, 1536, 7169},
                               {1024, 1536, 7040}, {1536, 1024, 7168}, {7168, 1536, 1024}, {64, 576, 7167},
                               {64, 640, 7168},    {6144, 7168, 257},  {2, 1, 1},          {1, 1, 2}};
  bool none = true;
  for (const auto& s : misses) none = none && find_tuned(kTable, s[0], s[1], s[2]) == nullptr;
  report(none, "lookup_misses");
}

void check_tuned_keys_unique() {
  constexpr TunedShape<Config> permuted[] = {
      {pack_shape(1024, 1536, 7168), {1}}, {pack_shape(1536, 1024, 7168), {2}}, {pack_shape(7168, 1536, 1024), {3}}};
  constexpr TunedShape<Config> late_dup[] = {
      {pack_shape(1, 2, 3), {1}}, {pack_shape(4, 5, 6), {2}}, {pack_shape(7, 8, 9), {3}}, {pack_shape(4, 5, 6), {4}}};
  report(tuned_keys_unique(kTable) && tuned_keys_unique(permuted) && !tuned_keys_unique(kDuplicate) &&
             !tuned_keys_unique(late_dup) && !tuned_keys_unique(kWithUnpackable),
         "tuned_keys_unique");
}

}  // namespace

int main() {
  check_injective_on_edges();
  check_hub_aliasing_cases();
  check_unpackable_never_match();
  check_lookup();
  check_tuned_keys_unique();
  return failures;
}
