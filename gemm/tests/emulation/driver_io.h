// What the emulation drivers share: reading DIR/problem.txt (`key value` lines), reading and writing
// the binary files, and one main() wrapper that maps an emulated kernel fault to exit 2 and any other error to exit 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "simt_runtime.h"

namespace fp8gemm::simt::driver {

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_file(const std::string& path, const void* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::map<std::string, int64_t> read_problem(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::map<std::string, int64_t> kv;
  std::string key;
  int64_t value;
  while (f >> key >> value) kv[key] = value;
  return kv;
}

inline int64_t need(const std::map<std::string, int64_t>& kv, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end()) throw std::runtime_error("problem.txt lacks key '" + key + "'");
  return it->second;
}

// Runs a driver's body; exit 0 ok, 2 emulated kernel fault, 1 bad input or any other error.
template <class Body>
int run_main(Body&& body) {
  try {
    return body();
  } catch (const KernelError& e) {
    std::fprintf(stderr, "SIMT KERNEL ERROR: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// main() of a driver that takes one argument, the problem's directory: run(dir) under run_main.
template <class Run>
int dir_main(int argc, char** argv, Run&& run) {
  return run_main([&] {
    if (argc != 2) {
      std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
      return 1;
    }
    return run(argv[1]);
  });
}

}  // namespace fp8gemm::simt::driver
