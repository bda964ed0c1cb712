"""transformers' fine-grained FP8 mixture-of-experts model running its experts through this kernel.

A tiny Qwen3-MoE (2 layers, 8 experts, top-6, hidden 256: every projection a whole number of 128x128 blocks) is
built from transformers' own config class with random weights (nothing is downloaded), saved, and loaded back
with ``FineGrainedFP8Config`` (float32 or UE8M0 weight scales), which quantizes every linear layer and the
experts to fp8. transformers' loader of the ``kernels-community/finegrained-fp8`` Hub kernel is pointed at
this kernel (its module cache gets ours when the ``kernels`` package is usable, else the bundle of entry points
it builds from that module), so ``FP8Linear`` runs ``matmul_2d`` and ``FP8Experts`` runs ``matmul_grouped``
(``experts_implementation="grouped_mm"``, transformers' default) or ``matmul_batched`` ("batched_mm").

Checks, on fresh token ids:
* the logits match the same model run by transformers in bf16 with the dequantized weights (fp8 value x
  scale, rounded to bf16): relative L2 error <= 0.2 (the activations' fp8 quantization costs about 0.1 here),
  while the same model with its experts' weights rolled by one expert is > 0.2 away (the check can fail);
* grouped_mm, batched_mm and transformers' eager loop over the experts (``matmul_2d`` per expert) agree
  within 0.05 (bit for bit on the CPU, where every entry point has the same arithmetic);
* each entry point was really called.

Runs on an sm_90 GPU; on the CPU as well where transformers and accelerate are installed (transformers refuses
to quantize without a GPU, a check this test skips there: the kernel's CPU backend computes the same thing).
"""
import random
import tempfile
import types

import pytest
import torch

import gemm

transformers = pytest.importorskip("transformers", reason="needs transformers (5.x)")
pytest.importorskip("accelerate", reason="transformers' FP8 quantization needs accelerate")
finegrained_fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8",
                                      reason="needs transformers 5.x (fine-grained FP8 experts)")
if not all(hasattr(finegrained_fp8, name) for name in ("FP8Experts", "FineGrainedFP8", "_FINEGRAINED_FP8")):
    pytest.skip("this transformers has no fine-grained FP8 experts", allow_module_level=True)

_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _SM90, reason="needs a CUDA device of compute capability 9.0"))]
HIDDEN, EXPERTS, TOP_K, LAYERS, VOCAB = 256, 8, 6, 2, 512
REFERENCE_RTOL = 0.2  # relative L2 error of the logits against the bf16 model with dequantized weights
IMPLEMENTATIONS_RTOL = 0.05  # grouped_mm / batched_mm / eager against each other


def _config():
    return transformers.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=512, moe_intermediate_size=128,
        num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_experts=EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=True, max_position_embeddings=128)


def _roll_experts(t):
    # torch.roll has no CUDA kernel for the fp8 dtypes: roll the bytes.
    return t.contiguous().view(torch.uint8).roll(1, 0).view(t.dtype)


class _Calls:
    """This kernel's three entry points as transformers looks them up, counting calls."""

    def __init__(self, roll_experts=False):
        self.count = {"matmul_2d": 0, "matmul_batched": 0, "matmul_grouped": 0}
        self.module = types.ModuleType("finegrained_fp8_from_gemm")
        for name in self.count:
            setattr(self.module, name, self._counted(name, roll_experts))

    def _counted(self, name, roll_experts):
        function = getattr(gemm, name)

        def call(A, B, Bs, *args, **kwargs):
            self.count[name] += 1
            if roll_experts and B.dim() == 3:  # the negative control: every row gets the next expert's weights
                B, Bs = _roll_experts(B), _roll_experts(Bs)
            return function(A, B, Bs, *args, **kwargs)

        return call

    def install(self, monkeypatch):
        # transformers caches the loaded kernel bundle in _FINEGRAINED_FP8 and the Hub module in its kernel
        # mapping; reset both so that the next forward resolves the entry points from our module.
        from transformers.integrations import hub_kernels
        from transformers.utils.import_utils import is_kernels_available

        if is_kernels_available():  # transformers' own loader: getattr of the three names on the module
            monkeypatch.setattr(finegrained_fp8, "_FINEGRAINED_FP8", None)
            monkeypatch.setitem(hub_kernels._KERNEL_MODULE_MAPPING, "finegrained-fp8", self.module)
        else:  # no usable `kernels` package: hand transformers the bundle its loader would have built
            monkeypatch.setattr(finegrained_fp8, "_FINEGRAINED_FP8", finegrained_fp8.FineGrainedFP8(
                matmul=self.module.matmul_2d, batched_matmul=self.module.matmul_batched,
                grouped_matmul=self.module.matmul_grouped))


def _dequantized_state_dict(model):
    """The fp8 model's parameters with every fp8 weight multiplied out by its 128x128 block scales, in bf16."""
    params = dict(model.named_parameters())
    state = {}
    for name, p in params.items():
        if name.endswith("_scale_inv"):
            continue
        scale = params.get(name + "_scale_inv")  # experts: gate_up_proj / gate_up_proj_scale_inv
        if scale is None and name.endswith(".weight"):  # FP8Linear: weight / weight_scale_inv
            scale = params.get(name[: -len("weight")] + "weight_scale_inv")
        if p.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz):
            assert scale is not None, name
            full = scale.float().repeat_interleave(128, -2).repeat_interleave(128, -1)
            state[name] = (p.float() * full[..., : p.shape[-2], : p.shape[-1]]).to(torch.bfloat16)
        else:
            state[name] = p.detach()
    return state


def _relative(got, ref):
    return float((got.float() - ref.float()).norm() / ref.float().norm())


@pytest.fixture(scope="module")
def bf16_checkpoint():
    """A random tiny Qwen3-MoE saved in bf16; the experts' weights doubled so that they dominate the output."""
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(_config(), dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.experts.gate_up_proj.mul_(2)
            layer.mlp.experts.down_proj.mul_(2)
    with tempfile.TemporaryDirectory(prefix="gemm_qwen3_moe_") as directory:
        model.save_pretrained(directory)
        yield directory


@pytest.mark.parametrize("scale_fmt", ["float", "ue8m0"])
def test_qwen3_moe_fp8_experts_run_through_this_kernel(device, scale_fmt, bf16_checkpoint, monkeypatch):
    # DeepGEMM (tried first for FP8Linear on Hopper) would be fetched from the Hub: keep every layer on this kernel.
    monkeypatch.setenv("TRANSFORMERS_DISABLE_DEEPGEMM_LINEAR", "1")
    monkeypatch.setattr(finegrained_fp8, "is_deepgemm_loadable", lambda *args, **kwargs: False, raising=False)
    if device == "cpu":
        from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

        monkeypatch.setattr(FineGrainedFP8HfQuantizer, "validate_environment", lambda self, *args, **kwargs: None)
    calls = _Calls()
    calls.install(monkeypatch)

    model = transformers.AutoModelForCausalLM.from_pretrained(
        bf16_checkpoint, quantization_config=transformers.FineGrainedFP8Config(scale_fmt=scale_fmt),
        device_map=device, dtype=torch.bfloat16, use_kernels=False)
    experts = model.model.layers[0].mlp.experts
    assert isinstance(experts, finegrained_fp8.FP8Experts)
    assert experts.gate_up_proj.dtype == torch.float8_e4m3fn
    assert experts.gate_up_proj_scale_inv.dtype == (torch.float8_e8m0fnu if scale_fmt == "ue8m0" else torch.float32)
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.float8_e4m3fn

    reference = transformers.AutoModelForCausalLM.from_config(_config(), dtype=torch.bfloat16)
    reference.load_state_dict(_dequantized_state_dict(model), strict=True)
    reference.to(device)

    seed = random.SystemRandom().randrange(2**31)  # fresh token ids on every run
    token_ids = torch.randint(0, VOCAB, (3, 24), generator=torch.Generator().manual_seed(seed)).to(device)
    logits = {}
    with torch.no_grad():
        expected = reference(token_ids).logits
        for implementation in ("grouped_mm", "batched_mm", "eager"):
            model.set_experts_implementation(implementation)
            logits[implementation] = model(token_ids).logits
    for implementation, got in logits.items():
        error = _relative(got, expected)
        assert error <= REFERENCE_RTOL, (
            f"{implementation}: relative L2 error {error:.3f} against the bf16 model (token seed {seed})")
    for implementation in ("batched_mm", "eager"):
        error = _relative(logits[implementation], logits["grouped_mm"])
        assert error <= IMPLEMENTATIONS_RTOL, (
            f"{implementation} vs grouped_mm: relative L2 error {error:.3f} (token seed {seed})")
        if device == "cpu":
            assert torch.equal(logits[implementation], logits["grouped_mm"]), implementation
    # 2 layers x 2 GEMMs per experts call, per implementation; the attention projections go through matmul_2d.
    assert calls.count["matmul_grouped"] == 2 * LAYERS and calls.count["matmul_batched"] == 2 * LAYERS
    assert calls.count["matmul_2d"] >= 3 * 4 * LAYERS

    # The check can fail: the same model with every row sent to the wrong expert's weights is far off.
    wrong = _Calls(roll_experts=True)
    wrong.install(monkeypatch)
    model.set_experts_implementation("grouped_mm")
    with torch.no_grad():
        error = _relative(model(token_ids).logits, expected)
    assert wrong.count["matmul_grouped"] == 2 * LAYERS
    assert error > REFERENCE_RTOL, (
        f"rolled experts: relative L2 error {error:.3f} is within the tolerance (token seed {seed})")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
