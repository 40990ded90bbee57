// tests/compute/tokenizer/cmd_tokenize_test.cpp: `sluice tokenize` and
// `sluice detokenize` as a user runs them (SLUICE_BIN), on a small
// tokenizer.json and a small tiktoken.model written to a temporary directory.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/compute/tokenizer/tiny_tokenizer.h"

namespace {

struct Result {
  int status;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  const char* bin = std::getenv("SLUICE_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "SLUICE_BIN is not set");
  const std::string command = std::string("'") + bin + "' " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

struct Fixture {
  std::string dir;
  std::string tokenizer;
  Fixture() {
    char dir_template[] = "/tmp/sluice-tok-cli-XXXXXX";
    dir = mkdtemp(dir_template);
    tiny::Spec spec;
    spec.merges = {{"h", "i"}};  // "hi" is 256
    spec.added = nlohmann::json::array({tiny::added_token(300, "<|end|>", true)});
    tokenizer = dir + "/tokenizer.json";
    std::ofstream(tokenizer) << tiny::json_of(spec).dump();
    std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<|end|>"})";
  }
  ~Fixture() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "tokenize prints ids; --specials decides whether markup is recognised") {
  CHECK(run("tokenize --tokenizer '" + tokenizer + "' 'hi!'").output == "256 33\n");
  CHECK(run("tokenize --tokenizer '" + tokenizer + "' --json 'hi<|end|>'").output.find("300") == std::string::npos);
  const auto object = nlohmann::json::parse(
      run("tokenize --tokenizer '" + tokenizer + "' --specials --json 'hi<|end|>'").output);
  CHECK(object["ids"] == nlohmann::json::array({256, 300}));
  CHECK(object["tokenizer"]["file"] == tokenizer);
  CHECK(object["tokenizer"]["load_seconds"].get<double>() >= 0.0);
  CHECK(run("tokenize --tokenizer '" + tokenizer + "' --bos 'hi'").output == "300 256\n");
  CHECK(run("tokenize --tokenizer '" + tokenizer + "' --verbose ' hi'").output == "32\t\"\u0120\"\n256\t\"hi\"\n");
}

TEST_CASE_FIXTURE(Fixture, "detokenize inverts tokenize, also through stdin") {
  CHECK(run("detokenize --tokenizer '" + tokenizer + "' '256, 33 300'").output == "hi!<|end|>");
  CHECK(run("detokenize --tokenizer '" + tokenizer + "' --skip-special '256,300'").output == "hi");
  const std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80\n tabs\t";
  std::ofstream(dir + "/text.txt", std::ios::binary) << text;
  const Result round = run("tokenize --tokenizer '" + tokenizer + "' --json - < '" + dir + "/text.txt' | '" +
                           std::getenv("SLUICE_BIN") + "' detokenize --tokenizer '" + tokenizer + "' -");
  CHECK(round.status == 0);
  CHECK(round.output == text);
}

TEST_CASE_FIXTURE(Fixture,
                  "mistakes are reported on one line: status 2 for arguments, 1 for files") {
  Result r = run("detokenize --tokenizer '" + tokenizer + "' '1,x'");
  CHECK(r.status == 2);
  CHECK(r.output == "sluice: error: IDS: \"x\" is not a token id\n");
  r = run("detokenize --tokenizer '" + tokenizer + "' '99999'");
  CHECK(r.status == 1);
  CHECK(r.output.find("99999") != std::string::npos);
  r = run("tokenize '" + dir + "' hi");
  CHECK(r.status == 1);
  CHECK(r.output.find("incomplete container: conversion did not finish") != std::string::npos);
  r = run("tokenize hi");
  CHECK(r.status == 2);  // an argument error
  CHECK(r.output.find("give MODEL and TEXT") != std::string::npos);
  r = run("tokenize --tokenizer '" + dir + "/nope.json' hi");
  CHECK(r.status == 1);
  CHECK(r.output.find("nope.json") != std::string::npos);
}

TEST_CASE_FIXTURE(Fixture, "a container directory with a manifest supplies its tokenizer") {
  std::ofstream(dir + "/manifest.json") << "{}";
  const Result r = run("tokenize '" + dir + "' --specials 'hi<|end|>'");
  CHECK(r.status == 0);
  CHECK(r.output == "256 300\n");
}

TEST_CASE_FIXTURE(Fixture,
                  "--tokenizer also takes a tiktoken.model, with the specials its config names") {
  std::filesystem::create_directory(dir + "/kimi");
  const std::string ranks = dir + "/kimi/tiktoken.model";
  std::ofstream(ranks) << tiny::tiktoken_ranks({"hi"});  // "hi" is 256; specials are 257..512
  std::ofstream(dir + "/kimi/tokenizer_config.json")
      << R"({"added_tokens_decoder": {"258": {"content": "<|im_end|>"}}, "eos_token": "<|im_end|>"})";
  CHECK(run("tokenize --tokenizer '" + ranks + "' 'hi!'").output == "256 33\n");
  CHECK(run("tokenize --tokenizer '" + ranks + "' --specials 'hi<|im_end|>'").output ==
        "256 258\n");
  CHECK(run("detokenize --tokenizer '" + ranks + "' '256 258 300'").output ==
        "hi<|im_end|><|reserved_token_300|>");
  std::ofstream(ranks) << "aGk= x\n";
  const Result r = run("tokenize --tokenizer '" + ranks + "' hi");
  CHECK(r.status == 1);
  CHECK(r.output == "sluice: error: " + ranks + ":1: rank \"x\" is not a non-negative integer\n");
}
