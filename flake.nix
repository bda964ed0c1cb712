{
  # The monorepo's flake: every kernel directory is also a flake of its own (that is what is uploaded
  # and what kernels-community's CI builds: `nix build ./img2gray -L`). This one gathers their bundles,
  # e.g. `nix build .#gemm -L`, with the same pinned kernel-builder.
  description = "GPU kernels (img2gray, gemm) in the kernel-builder layout";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  outputs =
    { self, kernel-builder, ... }:
    let
      kernel = path: kernel-builder.lib.genKernelFlakeOutputs { inherit self path; };
      kernels = {
        img2gray = kernel ./img2gray;
        gemm = kernel ./gemm;
      };
    in
    {
      packages = builtins.mapAttrs (
        system: _: builtins.mapAttrs (_: outputs: outputs.packages.${system}.default) kernels
      ) kernels.img2gray.packages;
    };
}
