// tests/compute/tokenizer/tiktoken_test.cpp: the tiktoken loader and rank BPE
// on small rank files whose expected ids are worked out by hand, every kind
// of bad line, the 256 special ids (Kimi's layout), and how a file or a
// container picks the tiktoken path.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

using sluice::tokenizer::TiktokenPattern;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;
using Ids = std::vector<TokenId>;

namespace {

// 256 "bc", 257 "abc", 258 "ab", 259 "aa", 260 "xyz"; specials are 261..516.
const std::string kRanks = tiny::tiktoken_ranks({"bc", "abc", "ab", "aa", "xyz"});

Tokenizer tiny_tiktoken(const std::string& config = "") {
  return Tokenizer::from_tiktoken(kRanks, "tiny.model", config, "tiny_config.json");
}

std::string load_error(const std::string& ranks, const std::string& config = "") {
  try {
    Tokenizer::from_tiktoken(ranks, "bad.model", config, "bad_config.json");
  } catch (const sluice::Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct TempDir {
  std::string path;
  TempDir() {
    char dir_template[] = "/tmp/sluice-tiktoken-XXXXXX";
    path = mkdtemp(dir_template);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name, std::ios::binary) << text;
    return path + "/" + name;
  }
};

}  // namespace

TEST_CASE("merging joins the adjacent pair whose concatenation has the lowest rank") {
  const Tokenizer tok = tiny_tiktoken();
  // ab (258) and bc (256) compete: bc merges first, then a+bc is abc (257).
  CHECK(tok.encode("abcx") == Ids{257, 'x'});
  // Three equal candidates aa (259): the leftmost merges, leaving a alone.
  CHECK(tok.encode("aaax") == Ids{259, 'a', 'x'});
  // A whole piece that is a token is taken as is, though no merge leads to
  // it; one byte more and only the bytes are left.
  CHECK(tok.encode("xyz") == Ids{260});
  CHECK(tok.encode("xyzw") == Ids{'x', 'y', 'z', 'w'});
  CHECK(tok.encode("\xC3\xA9") == Ids{0xC3, 0xA9});
  CHECK(tok.encode("") == Ids{});
  // The Kimi pattern splits before BPE: "ab" and " ab" are separate pieces.
  CHECK(tok.encode("ab ab") == Ids{258, ' ', 258});
  CHECK(tok.decode(Ids{257, 'x', 260}) == "abcxxyz");
}

TEST_CASE(
    "Kimi cuts runs of more than 25,000 spaces or non-spaces, and texts every 400,000 code "
    "points") {
  const Tokenizer kimi = tiny_tiktoken();
  const Tokenizer o200k =
      Tokenizer::from_tiktoken(kRanks, "tiny.model", "", "", TiktokenPattern::kO200k);
  // 25,001 non-spaces: the cut falls between the a and b of the last "ab".
  const std::string run = std::string(24999, 'c') + "ab";
  Ids cut(24999, 'c');
  Ids whole = cut;
  cut.insert(cut.end(), {'a', 'b'});
  whole.push_back(258);
  CHECK(kimi.encode(run) == cut);
  CHECK(o200k.encode(run) == whole);
  // 400,002 code points of "ab ": the window ends after the a of the last one.
  std::string text;
  Ids windowed = {258};
  for (int i = 0; i < 133334; ++i) text += "ab ";
  for (int i = 0; i < 133332; ++i) windowed.insert(windowed.end(), {' ', 258});
  Ids unwindowed = windowed;
  windowed.insert(windowed.end(), {' ', 'a', 'b', ' '});
  unwindowed.insert(unwindowed.end(), {' ', 258, ' '});
  CHECK(kimi.encode(text) == windowed);
  CHECK(o200k.encode(text) == unwindowed);
}

TEST_CASE("ranks are ids and byte-level spellings name them") {
  const Tokenizer tok = tiny_tiktoken();
  CHECK(tok.vocab_size() == 261 + 256);
  CHECK(tok.token_bytes(258) == "ab");
  CHECK(tok.id_to_token(32) == "\u0120");  // GPT-2's character for the space byte
  CHECK(tok.token_to_id("ab") == 258);
  CHECK(tok.token_to_id("\u0120") == 32);
  CHECK(!tok.token_to_id("zz").has_value());
  CHECK(!tok.is_special(258));
  CHECK_THROWS_AS(tok.token_bytes(517), sluice::Error);
}

TEST_CASE("the 256 ids after the ranks are specials, named by added_tokens_decoder or reserved") {
  const std::string config = R"({
    "added_tokens_decoder": {
      "261": {"content": "[BOS]", "special": true},
      "262": {"content": "<|im_end|>", "lstrip": false, "rstrip": false, "special": true}
    },
    "bos_token": "[BOS]", "eos_token": {"content": "<|im_end|>"}})";
  const Tokenizer tok = tiny_tiktoken(config);
  CHECK(tok.bos_id() == 261);
  CHECK(tok.eos_id() == 262);
  CHECK(!tok.add_bos());
  CHECK(tok.token_to_id("<|reserved_token_263|>") == 263);
  CHECK(tok.token_to_id("<|reserved_token_516|>") == 516);
  CHECK(!tok.token_to_id("<|reserved_token_517|>").has_value());
  CHECK(tok.is_special(261));
  CHECK(tok.is_special(516));

  // Content never becomes a special token; markup does, reserved ones too.
  const std::string text = "ab<|im_end|>[BOS]<|reserved_token_300|>";
  for (TokenId id : tok.encode(text)) CHECK(id < 261);
  CHECK(tok.decode(tok.encode(text)) == text);
  CHECK(tok.encode_with_specials(text) == Ids{258, 262, 261, 300});
  CHECK(tok.encode_with_specials("<|im_end") == tok.encode("<|im_end"));
  CHECK(tok.decode(Ids{258, 262}) == "ab<|im_end|>");
  CHECK(tok.decode(Ids{258, 262}, true) == "ab");
}

TEST_CASE("Kimi's layout: 163,584 ranks, specials 163584..163839 from tokenizer_config.json") {
  const nlohmann::json named = {{"163584", "[BOS]"},
                                {"163585", "[EOS]"},
                                {"163586", "<|im_end|>"},
                                {"163587", "<|im_user|>"},
                                {"163588", "<|im_assistant|>"},
                                {"163590", "<|start_header_id|>"},
                                {"163591", "<|end_header_id|>"},
                                {"163593", "[EOT]"},
                                {"163594", "<|im_system|>"},
                                {"163601", "<|im_middle|>"},
                                {"163838", "[UNK]"},
                                {"163839", "[PAD]"}};
  nlohmann::json decoder = nlohmann::json::object();
  for (const auto& [id, content] : named.items()) {
    decoder[id] = {{"content", content}, {"lstrip", false},      {"normalized", false},
                   {"rstrip", false},    {"single_word", false}, {"special", true}};
  }
  const nlohmann::json config = {
      {"added_tokens_decoder", decoder}, {"bos_token", "[BOS]"}, {"eos_token", "[EOS]"}};
  const Tokenizer tok = Tokenizer::from_tiktoken(tiny::kimi_sized_ranks(), "tiktoken.model",
                                                 config.dump(), "tokenizer_config.json");
  CHECK(tok.vocab_size() == 163840);
  CHECK(tok.bos_id() == 163584);
  CHECK(tok.eos_id() == 163585);
  CHECK(tok.token_to_id("<|im_middle|>") == 163601);
  CHECK(tok.token_to_id("<|reserved_token_163589|>") == 163589);
  CHECK(tok.token_to_id("<|reserved_token_163837|>") == 163837);
  CHECK(tok.is_special(163839));
  CHECK(!tok.is_special(163583));
  const auto ids = tok.encode_with_specials("<|im_user|>user<|im_middle|>hi<|im_end|>");
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == 163587);
  CHECK(ids.back() == 163586);
  CHECK(std::count(ids.begin(), ids.end(), 163601) == 1);
  CHECK(tok.decode(ids) == "<|im_user|>user<|im_middle|>hi<|im_end|>");
}

TEST_CASE("every line of the rank file is checked, and the error names the file and line") {
  const std::string good = tiny::tiktoken_ranks({});
  CHECK(load_error("") == "bad.model: no tokens (expected lines of `base64 rank`)");
  CHECK(load_error(good + "YWI=\n") ==
        "bad.model:257: expected `base64 rank` (two fields, one space), got \"YWI=\"");
  CHECK(load_error(good + "YWI=  256\n").find("bad.model:257: expected `base64 rank`") == 0);
  CHECK(load_error(good + "YWI= 25x\n") ==
        "bad.model:257: rank \"25x\" is not a non-negative integer");
  CHECK(load_error(good + "YWI= -256\n") ==
        "bad.model:257: rank \"-256\" is not a non-negative integer");
  CHECK(load_error(good + "YW= 256\n") ==
        "bad.model:257: token \"YW=\" is not valid base64: 3 characters with their padding, not a multiple of 4");
  CHECK(load_error(good + "YW 256\n") ==
        "bad.model:257: token \"YW\" is not valid base64: 2 characters with their padding, not a multiple of 4");
  CHECK(load_error(good + "Y*I= 256\n") == "bad.model:257: token \"Y*I=\" is not valid base64: byte 1 is not base64");
  CHECK(load_error(good + "Y=I= 256\n") == "bad.model:257: token \"Y=I=\" is not valid base64: byte 1 is not base64");
  CHECK(load_error(good + "Y-I= 256\n") == "bad.model:257: token \"Y-I=\" is not valid base64: byte 1 is not base64");
  CHECK(load_error(good + "YWI= 255\n") == "bad.model:257: rank 255 was already given on line 256");
  CHECK(load_error(good + "YWI= 257\n") ==
        "bad.model:257: rank 257 leaves the ids not dense: the file has 257 tokens, so its ranks "
        "must be 0..256");
  CHECK(load_error(good + "YQ== 256\n") ==
        "bad.model:257: token repeats the bytes of rank 97 on line 98");
  // Without byte 0xFF (rank 255) nothing containing it could be encoded.
  const std::string no_ff = good.substr(0, good.rfind("/w== 255\n")) + "YWI= 255\n";
  CHECK(load_error(no_ff) ==
        "bad.model: no token for the single byte 0xFF; byte-level BPE needs all 256");
}

TEST_CASE("blank lines and CRLF line ends are read as tiktoken reads them; order does not matter") {
  std::string crlf;
  for (int b = 255; b >= 0; --b) {
    crlf += sluice::test_inputs::base64_encode(std::string(1, static_cast<char>(b))) + " " +
            std::to_string(b) + "\r\n\r\n";
  }
  const Tokenizer tok = Tokenizer::from_tiktoken(crlf + "YWI= 256", "crlf.model");
  CHECK(tok.encode("ab!") == Ids{256, '!'});
  // Line numbers still count the blank lines.
  CHECK(load_error(crlf + "YWI= 256\r\n\r\nYWI 257\r\n").find("bad.model:515:") == 0);
}

TEST_CASE("tokenizer_config.json's special names are checked") {
  CHECK(load_error(kRanks, R"({"added_tokens_decoder": {"12": {"content": "<x>"}}})") ==
        "bad_config.json: added_tokens_decoder[\"12\"]: id 12 is outside the special ids 261..516 "
        "that follow the 261 "
        "ranks");
  CHECK(load_error(kRanks, R"({"added_tokens_decoder": {"abc": {"content": "<x>"}}})") ==
        "bad_config.json: added_tokens_decoder[\"abc\"]: the key is not an id");
  CHECK(load_error(kRanks,
                   R"({"added_tokens_decoder": {"261": {"content": "<|reserved_token_262|>"}}})") ==
        "bad_config.json: special ids 261 and 262 are both named \"<|reserved_token_262|>\"");
  CHECK(load_error(kRanks, R"({"added_tokens_decoder": {"261": {"special": true}}})") ==
        "bad_config.json: added_tokens_decoder[\"261\"] has no \"content\"");
  CHECK(load_error(kRanks, R"({"eos_token": "<|im_end|>"})") ==
        "bad_config.json: eos_token \"<|im_end|>\" is not a token of the tokenizer");
  CHECK(load_error(kRanks, "[1]") == "bad_config.json: the top level is not an object");
}

TEST_CASE(
    "a rank file is found by content, and a container without tokenizer.json uses its "
    "tiktoken.model") {
  const TempDir dir;
  const std::string ranks = dir.write("ranks.model", kRanks);
  CHECK(Tokenizer::load(ranks).encode("abcx") == Ids{257, 'x'});
  CHECK(Tokenizer::load_tiktoken(ranks, "", TiktokenPattern::kO200k).encode("abcx") ==
        Ids{257, 'x'});
  // A .json name is always read as JSON, whatever it holds.
  const std::string misnamed = dir.write("ranks.json", kRanks);
  CHECK_THROWS_WITH_AS(Tokenizer::load(misnamed), doctest::Contains("ranks.json: not valid JSON"),
                       sluice::Error);

  dir.write("manifest.json", "{}");
  dir.write("tiktoken.model", kRanks);
  dir.write("tokenizer_config.json",
            R"({"added_tokens_decoder": {"262": {"content": "<|im_end|>"}}})");
  const Tokenizer tok = Tokenizer::load_from_container(dir.path);
  CHECK(tok.encode_with_specials("abcx<|im_end|>") == Ids{257, 'x', 262});
  // Both present: tokenizer.json wins, as for every other family.
  dir.write("tokenizer.json", tiny::json_of(tiny::Spec{}).dump());
  CHECK(Tokenizer::load_from_container(dir.path).vocab_size() == 256);
}
