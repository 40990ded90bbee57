// tests/fuzz/damage_probe_test.cpp: the damage probe as a seeded test. Every
// file of the tiny container gets random bit flips and truncations; each case
// must end in an Error naming the damaged file (or, for a bank, the record)
// or in logits bit-identical to the undamaged run. SLUICE_PROBE_SEED and
// SLUICE_PROBE_CASES change the seed and the flips per file.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compute/model/engine.h"
#include "proto/error.h"
#include "tests/ctl/tiny_container.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

uint64_t env_number(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

uint32_t zlib_crc(const std::string& bytes, uint32_t running = 0) {
  return static_cast<uint32_t>(::crc32(running, reinterpret_cast<const Bytef*>(bytes.data()),
                                       static_cast<uInt>(bytes.size())));
}

// A private copy of the tiny container, removed at the end.
struct ContainerCopy {
  explicit ContainerCopy(const std::string& name) : dir(testing::scratch_dir() + "/" + name) {
    fs::remove_all(dir);
    fs::copy(testing::tiny_container(), dir, fs::copy_options::recursive);
  }
  ~ContainerCopy() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::string dir;
};

// Every logit row a short greedy run sees: after the prompt, then after each
// generated token. Records are checked (verify on), as with `run --verify`.
std::vector<float> run_logits(const std::string& dir) {
  EngineOptions options;
  options.threads = 1;
  options.verify_records = true;
  Engine engine(dir, options);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  std::vector<float> rows;
  SamplingParams greedy;
  greedy.temperature = 0;
  engine.generate(prompt, 3, greedy, {}, true, [&](int32_t, std::span<const float> logits) {
    rows.insert(rows.end(), logits.begin(), logits.end());
    return true;
  });
  return rows;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What a refusal of damage in `file` must name.
bool names_damage(const std::string& message, const std::string& file) {
  if (message.find(file) != std::string::npos) return true;
  if (file.starts_with("experts-L")) {
    const int layer = std::stoi(file.substr(9, 3));
    return message.find("layer " + std::to_string(layer) + " expert ") != std::string::npos;
  }
  return false;
}

TEST_CASE("damage anywhere in a container is refused naming the file, or changes nothing") {
  ContainerCopy copy("damage-probe");
  const std::vector<float> sound = run_logits(copy.dir);
  REQUIRE(!sound.empty());
  const uint64_t seed = env_number("SLUICE_PROBE_SEED", 20261201);
  const uint64_t flips_per_file = env_number("SLUICE_PROBE_CASES", 40);
  std::mt19937_64 rng(seed);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(copy.dir))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  uint64_t cases = 0, refused = 0, identical = 0;
  for (const std::string& file : files) {
    const std::string path = copy.dir + "/" + file;
    const std::string original = slurp(path);
    REQUIRE(!original.empty());
    for (uint64_t i = 0; i < flips_per_file + 2; ++i) {
      std::string damaged = original;
      std::string what;
      if (i < flips_per_file) {
        const uint64_t offset = rng() % original.size();
        const int bit = static_cast<int>(rng() % 8);
        damaged[offset] = static_cast<char>(damaged[offset] ^ (1 << bit));
        what = "bit " + std::to_string(bit) + " of byte " + std::to_string(offset) + " flipped";
      } else {
        const uint64_t size = i == flips_per_file ? rng() % original.size() : original.size() - 1;
        damaged.resize(size);
        what = "truncated to " + std::to_string(size) + " bytes";
      }
      spit(path, damaged);
      ++cases;
      INFO("seed ", seed, ": ", file, " ", what);
      try {
        const std::vector<float> logits = run_logits(copy.dir);
        CHECK_MESSAGE(same_bits(logits, sound), "accepted, with different logits");
        ++identical;
      } catch (const Error& e) {
        CHECK_MESSAGE(names_damage(e.what(), file), "refused without naming the file: ", e.what());
        ++refused;
      }
      spit(path, original);
    }
  }
  MESSAGE("damage probe: ", cases, " cases over ", files.size(), " files: ", refused, " refused, ",
          identical, " identical");
  CHECK(refused > 0);
}

// Rewrites tensor `name` of the copy's trunk with `fill` in every f32 value
// and seals the crc32s again, as a converter bug (not damage) would leave it.
void fill_f32_tensor_and_reseal(const std::string& dir, const std::string& name, float fill) {
  json manifest = json::parse(slurp(dir + "/manifest.json"));
  std::string trunk = slurp(dir + "/trunk.bin");
  bool found = false;
  for (json& t : manifest["trunk"]["tensors"]) {
    if (t["name"] != name) continue;
    REQUIRE(t["format"] == "f32");
    const uint64_t offset = t["offset"], bytes = t["bytes"];
    for (uint64_t at = offset; at < offset + bytes; at += 4) std::memcpy(&trunk[at], &fill, 4);
    t["crc32"] = zlib_crc(trunk.substr(offset, bytes));
    found = true;
  }
  REQUIRE(found);
  spit(dir + "/trunk.bin", trunk);
  manifest.erase("manifest_crc32");
  manifest["manifest_crc32"] = zlib_crc(manifest.dump());
  spit(dir + "/manifest.json", manifest.dump(2));
}

TEST_CASE("logits that are not finite stop the run naming the step, never reach the sampler") {
  ContainerCopy copy("nan-logits");
  // Finite, so the loader accepts it; the final norm then scales the hidden
  // state past what f32 holds and the output projection overflows.
  fill_f32_tensor_and_reseal(copy.dir, "model.norm.weight", 3e38f);
  try {
    run_logits(copy.dir);
    FAIL("the run went on with non-finite logits");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.starts_with(
        "prefill of prompt tokens 0..3: the forward pass produced a non-finite logit"));
  }
}

}  // namespace
}  // namespace sluice
