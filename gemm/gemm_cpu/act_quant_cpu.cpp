// Exact CPU activation quantization (see act_quant.h for the arithmetic). Each worker claims a block
// of rows; for every row and 128-wide group it converts the group to fp32 once into a small buffer,
// takes its NaN-propagating amax, then writes the scale and the fp8 codes.
#include "act_quant_cpu.h"
#include "cpu_workers.h"

#include <algorithm>
#include <cstdint>

namespace fp8gemm {
namespace cpu {
namespace {

float load(const void* x, ActDtype dtype, int64_t index) {
  switch (dtype) {
    case ActDtype::kFloat32: return static_cast<const float*>(x)[index];
    case ActDtype::kBFloat16: return aq_bf16_to_f32(static_cast<const uint16_t*>(x)[index]);
    default: return aq_f16_to_f32(static_cast<const uint16_t*>(x)[index]);
  }
}

void quantize_row(const ActQuantProblem& p, int64_t r, float static_scale) {
  const bool fnuz = p.format == Fp8Format::kE4M3FNUZ;
  const int64_t row = aq_row_offset(p, static_cast<uint32_t>(r));
  uint8_t* q = p.q + r * p.k;
  float values[kQuantBlock];
  for (int64_t g = 0; g < p.groups(); ++g) {
    const int64_t k0 = g * kQuantBlock, width = std::min<int64_t>(kQuantBlock, p.k - k0);
    uint32_t amax_bits = 0;
    for (int64_t i = 0; i < width; ++i) {
      values[i] = load(p.x, p.x_dtype, row + (k0 + i) * p.x_stride_k);
      amax_bits = std::max(amax_bits, aq_bits(values[i]) & 0x7FFFFFFFu);
    }
    const float scale = p.mode == ActScaleMode::kDynamic
                            ? aq_scale_from_quotient(amax_bits, aq_float(amax_bits) / aq_fp8_max(fnuz))
                            : static_scale;
    p.scale[g * p.scale_ld + r] = scale;
    for (int64_t i = 0; i < width; ++i)
      q[k0 + i] = aq_encode(values[i] / scale, aq_quotient_sign(values[i], scale), fnuz);
  }
}

}  // namespace

void act_quant(const ActQuantProblem& p) {
  if (p.rows <= 0 || p.k <= 0) return;
  const float static_scale = p.mode == ActScaleMode::kStaticTensor  ? *p.static_scale
                             : p.mode == ActScaleMode::kStaticValue ? p.static_scale_value
                                                                    : 0.0f;
  // About 64 Ki elements per work item: enough to amortise a claim, small enough to balance.
  const int64_t rows_per_item = std::max<int64_t>(1, (int64_t{1} << 16) / p.k);
  const int64_t items = (p.rows + rows_per_item - 1) / rows_per_item;
  run_on_workers(items, [&](const auto& claim) {
    for (int64_t item; claim(item);) {
      const int64_t end = std::min(p.rows, (item + 1) * rows_per_item);
      for (int64_t r = item * rows_per_item; r < end; ++r) quantize_row(p, r, static_scale);
    }
  });
}

}  // namespace cpu
}  // namespace fp8gemm
