// tests/compute/tokenizer/tiktoken_convert_test.cpp: a checkpoint that ships
// tiktoken.model instead of tokenizer.json (as Kimi's do) converts into a
// container whose manifest names it and whose tokenizer `sluice tokenize`
// loads. Runs make_tiny_checkpoint.py and the sluice binary.
#include <doctest/doctest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "compute/tokenizer/tokenizer.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

namespace fs = std::filesystem;
using sluice::tokenizer::Tokenizer;

namespace {

std::string env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// stdout and stderr of `command`, and whether it exited 0.
std::pair<bool, std::string> run(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  return {pclose(pipe) == 0, output};
}

struct Checkpoint {
  std::string dir;
  std::string src;
  const std::string sluice = env("SLUICE_BIN", "sluice");
  const std::string ranks = tiny::tiktoken_ranks({"hi"});  // "hi" is 256; specials are 257..512
  const std::string config =
      R"({"added_tokens_decoder": {"258": {"content": "<|im_end|>", "special": true}}, "eos_token": "<|im_end|>"})";

  Checkpoint() {
    char dir_template[] = "/tmp/sluice-tiktoken-convert-XXXXXX";
    dir = mkdtemp(dir_template);
    src = dir + "/src";
    const std::string make = env("PYTHON", "/usr/bin/python3") + " '" +
                             env("SLUICE_SOURCE_ROOT", ".") +
                             "/scripts/make_tiny_checkpoint.py' olmoe '" + src + "' > /dev/null";
    REQUIRE_MESSAGE(std::system(make.c_str()) == 0, make);
    std::ofstream(src + "/tiktoken.model", std::ios::binary) << ranks;
    std::ofstream(src + "/tokenizer_config.json", std::ios::binary) << config;
  }
  ~Checkpoint() { fs::remove_all(dir); }

  nlohmann::json convert(const std::string& out) const {
    const auto [ok, output] = run("'" + sluice + "' convert '" + src + "' '" + out +
                                  "' -q --kmeans-sample 4096 --kmeans-iters 4");
    REQUIRE_MESSAGE(ok, output);
    return nlohmann::json::parse(read_text(out + "/manifest.json"));
  }
};

}  // namespace

TEST_CASE_FIXTURE(Checkpoint, "without tokenizer.json, tiktoken.model is copied, named and used") {
  fs::remove(src + "/tokenizer.json");
  const std::string out = dir + "/out";
  const auto manifest = convert(out);
  CHECK(manifest["tokenizer"]["files"] ==
        nlohmann::json::array({"tiktoken.model", "tokenizer_config.json", "tokenizer.bin"}));
  CHECK(read_text(out + "/tiktoken.model") == ranks);
  CHECK(read_text(out + "/tokenizer_config.json") == config);
  CHECK(!fs::exists(out + "/tokenizer.json"));

  CHECK(Tokenizer::load_from_container(out).eos_id() == 258);
  CHECK(Tokenizer::load_from_container(out).loaded_from() == out + "/tokenizer.bin");
  const auto [ok, ids] = run("'" + sluice + "' tokenize '" + out + "' --specials 'hi<|im_end|>'");
  CHECK(ok);
  CHECK(ids == "256 258\n");
}

TEST_CASE_FIXTURE(Checkpoint, "with tokenizer.json beside it, tiktoken.model is left out") {
  const std::string out = dir + "/out";
  const auto manifest = convert(out);
  // tokenizer_config.json was written for the ranks (its eos_token is a rank special), so
  // tokenizer.json does not load with it and the container gets no compiled form.
  CHECK(manifest["tokenizer"]["files"] ==
        nlohmann::json::array({"tokenizer.json", "tokenizer_config.json"}));
  CHECK(!fs::exists(out + "/tiktoken.model"));
}
