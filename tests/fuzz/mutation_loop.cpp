// tests/fuzz/mutation_loop.cpp: a seeded mutation fuzzer for the targets of
// fuzz_targets.h, for builds without libFuzzer: the same seed gives the same
// cases, so a finding reproduces. Prints one JSON line of counts; exits 1 on
// any finding (an exception other than a clean refusal). A crash or a
// sanitizer report ends the process on its own.
//   fuzz_loop TARGET [--cases N] [--seed S] [--write-seeds DIR]
//   fuzz_loop --canary address|undefined   (a deliberate fault, see below)
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.h"

namespace {

using Rng = std::mt19937_64;

const std::vector<std::string> kJsonNumbers = {"0",
                                               "-1",
                                               "1",
                                               "255",
                                               "256",
                                               "4095",
                                               "4096",
                                               "65536",
                                               "4294967295",
                                               "4294967296",
                                               "18446744073709551615",
                                               "18446744073709551616",
                                               "-9223372036854775808",
                                               "1e309",
                                               "0.5",
                                               "1e-320",
                                               "true",
                                               "null",
                                               "\"x\"",
                                               "[]",
                                               "{}"};
const std::vector<uint8_t> kBytes = {0x00, 0xff, 0x7f, 0x80, 0x01, '"', '{',
                                     '}',  '[',  ']',  ',',  ':',  '-', '9'};

// Replaces one run of digits with an interesting JSON value.
void swap_number(std::string& s, Rng& rng) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i])) &&
        (i == 0 || !std::isdigit(static_cast<unsigned char>(s[i - 1]))))
      starts.push_back(i);
  }
  if (starts.empty()) return;
  const size_t begin = starts[rng() % starts.size()];
  size_t end = begin;
  while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) || s[end] == '.'))
    ++end;
  s.replace(begin, end - begin, kJsonNumbers[rng() % kJsonNumbers.size()]);
}

void mutate(std::string& s, Rng& rng, bool json) {
  const int kind = static_cast<int>(rng() % (json ? 8 : 7));
  const size_t at = s.empty() ? 0 : rng() % s.size();
  switch (kind) {
    case 0:  // flip one bit
      if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
      break;
    case 1:  // an interesting byte
      if (!s.empty()) s[at] = static_cast<char>(kBytes[rng() % kBytes.size()]);
      break;
    case 2:  // truncate
      s.resize(at);
      break;
    case 3: {  // delete a range
      const size_t n = std::min<size_t>(s.size() - at, 1 + rng() % 16);
      s.erase(at, n);
      break;
    }
    case 4: {  // duplicate a range
      const size_t n = std::min<size_t>(s.size() - at, 1 + rng() % 64);
      s.insert(at, s.substr(at, n));
      break;
    }
    case 5:  // random bytes
      for (int i = 0, n = 1 + static_cast<int>(rng() % 8); i < n; ++i)
        s.insert(s.begin() + static_cast<long>(at), static_cast<char>(rng()));
      break;
    case 6:  // a little-endian word set to an extreme
      if (s.size() >= 4) {
        const size_t w = rng() % (s.size() - 3);
        const uint32_t value = (rng() % 2) ? 0xffffffffu : static_cast<uint32_t>(rng() % 0x10000);
        for (int i = 0; i < 4; ++i) s[w + i] = static_cast<char>(value >> (8 * i));
      }
      break;
    default:
      swap_number(s, rng);
      break;
  }
}

// One fault of the kind a sanitizer exists to catch, so a test can show that
// in this build a report ends the run with a failure instead of a warning.
int canary(const std::string& kind) {
  if (kind == "address") {
    std::vector<uint8_t> bytes(8);
    const volatile uint8_t* start = bytes.data();
    return start[bytes.size()];
  }
  if (kind == "undefined") {
    volatile int largest = std::numeric_limits<int>::max();
    return largest + 1;
  }
  std::fprintf(stderr, "fuzz_loop: --canary takes address or undefined, not %s\n", kind.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_loop TARGET [--cases N] [--seed S] [--write-seeds DIR]\n");
    return 2;
  }
  if (std::string(argv[1]) == "--canary" && argc == 3) {
    // The value is printed so that no optimizer may drop the faulty access.
    const int value = canary(argv[2]);
    std::fprintf(stderr, "fuzz_loop: the %s canary ran without a sanitizer report (%d)\n", argv[2],
                 value);
    return 0;
  }
  const sluice::fuzz::Target* target = sluice::fuzz::find_target(argv[1]);
  if (target == nullptr) {
    std::fprintf(
        stderr,
        "fuzz_loop: unknown target %s (manifest, record_header, safetensors, tokenizer, capnp)\n",
        argv[1]);
    return 2;
  }
  uint64_t cases = 2000, seed = 1;
  std::string seeds_dir;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cases")
      cases = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--write-seeds")
      seeds_dir = argv[i + 1];
    else {
      std::fprintf(stderr, "fuzz_loop: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const std::vector<std::string> seeds = target->seeds();
  if (!seeds_dir.empty()) {
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream out(seeds_dir + "/seed-" + std::to_string(i), std::ios::binary);
      out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
    }
    return 0;
  }
  for (const std::string& s : seeds) {
    if (!target->run(reinterpret_cast<const uint8_t*>(s.data()), s.size())) {
      std::fprintf(stderr,
                   "fuzz_loop %s: a seed input is refused; the target or its seeds are wrong\n",
                   target->name);
      return 1;
    }
  }
  Rng rng(seed);
  uint64_t accepted = 0, refused = 0, findings = 0;
  for (uint64_t c = 0; c < cases; ++c) {
    std::string input = seeds[rng() % seeds.size()];
    for (int m = 0, n = 1 + static_cast<int>(rng() % 4); m < n; ++m)
      mutate(input, rng, target->json);
    try {
      (target->run(reinterpret_cast<const uint8_t*>(input.data()), input.size()) ? accepted
                                                                                 : refused) += 1;
    } catch (const std::exception& e) {
      ++findings;
      std::fprintf(stderr, "fuzz_loop %s seed %llu case %llu: escaped %s\n", target->name,
                   static_cast<unsigned long long>(seed), static_cast<unsigned long long>(c),
                   e.what());
    }
  }
  std::printf(
      "{\"target\": \"%s\", \"seed\": %llu, \"cases\": %llu, \"accepted\": %llu, \"refused\": "
      "%llu, "
      "\"findings\": %llu}\n",
      target->name, static_cast<unsigned long long>(seed), static_cast<unsigned long long>(cases),
      static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(refused),
      static_cast<unsigned long long>(findings));
  return findings == 0 ? 0 : 1;
}
