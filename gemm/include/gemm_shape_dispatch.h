// Shape-keyed dispatch shared by the GPU backends: an exact, non-aliasing key for (M, N, K) and a
// lookup into a table of tuned configurations. Shapes outside the table take the generic path.
//
// The Hub's RadeonFlow-derived kernel packed (m/32, n/32, k/32) into 8-bit fields, so M = 1040
// silently ran the M = 1024 kernel and N >= 8192 overflowed into the M field. Here every dimension
// keeps all of its bits (21 each); a shape that does not fit is "unpackable" and can match nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8gemm {

constexpr int kShapeFieldBits = 21;
constexpr int64_t kShapeFieldMax = (int64_t{1} << kShapeFieldBits) - 1;  // 2,097,151
constexpr uint64_t kUnpackableShape = ~uint64_t{0};

constexpr bool shape_packable(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && n >= 1 && k >= 1 && m <= kShapeFieldMax && n <= kShapeFieldMax && k <= kShapeFieldMax;
}

// Injective on packable shapes; kUnpackableShape (all ones, which no packable shape can produce
// because the top bit is always clear) otherwise.
constexpr uint64_t pack_shape(int64_t m, int64_t n, int64_t k) {
  return shape_packable(m, n, k)
             ? (static_cast<uint64_t>(m) << (2 * kShapeFieldBits)) |
                   (static_cast<uint64_t>(n) << kShapeFieldBits) | static_cast<uint64_t>(k)
             : kUnpackableShape;
}

constexpr int64_t unpack_m(uint64_t key) { return static_cast<int64_t>(key >> (2 * kShapeFieldBits)); }
constexpr int64_t unpack_n(uint64_t key) { return static_cast<int64_t>((key >> kShapeFieldBits) & kShapeFieldMax); }
constexpr int64_t unpack_k(uint64_t key) { return static_cast<int64_t>(key & kShapeFieldMax); }

template <class Config>
struct TunedShape {
  uint64_t key;  // pack_shape(M, N, K)
  Config config;
};

// Linear scan: tables hold a few dozen entries and the lookup runs once per call on the host.
// Returns nullptr for any shape not in the table (the caller then uses its generic path).
template <class Config, size_t N>
constexpr const Config* find_tuned(const TunedShape<Config> (&table)[N], int64_t m, int64_t n, int64_t k) {
  const uint64_t key = pack_shape(m, n, k);
  if (key == kUnpackableShape) return nullptr;
  for (size_t i = 0; i < N; ++i)
    if (table[i].key == key) return &table[i].config;
  return nullptr;
}

// True when no two entries share a key (use in a static_assert next to each table).
template <class Config, size_t N>
constexpr bool tuned_keys_unique(const TunedShape<Config> (&table)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (table[i].key == kUnpackableShape) return false;
    for (size_t j = i + 1; j < N; ++j)
      if (table[i].key == table[j].key) return false;
  }
  return true;
}

}  // namespace fp8gemm
