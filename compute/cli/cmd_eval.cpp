// compute/cli/cmd_eval.cpp: `sluice eval`, perplexity of the model over a
// text, in windows of the context length (each window starts fresh). With
// --image the images' media blocks open the first window and only the text's
// own tokens are scored.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "compute/cli/commands.h"
#include "compute/cli/image_prompt.h"
#include "compute/cli/run_options.h"
#include "compute/model/engine.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"

namespace sluice::cli {
namespace {

struct EvalArgs {
  std::string model;
  std::string text_file;
  std::string dump_logits;
  EngineFlags engine;
  bool json = false;
  std::vector<std::string> images;
};

// -log softmax(logits)[target], in double.
double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  double max_logit = logits[0];
  for (float l : logits) max_logit = std::max<double>(max_logit, l);
  double total = 0.0;
  for (float l : logits) total += std::exp(l - max_logit);
  return std::log(total) + max_logit - logits[static_cast<size_t>(target)];
}

void eval(const EvalArgs& args) {
  const std::string text = read_file(args.text_file, "--text");
  EngineFlags flags = args.engine;
  flags.images = !args.images.empty();
  Engine engine(args.model, flags.options());
  const TimedTokenizer timed_tokenizer = load_container_tokenizer(args.model);
  const tokenizer::Tokenizer& tok = timed_tokenizer.tokenizer;
  const std::vector<int32_t> text_ids = tok.encode(text);
  if (text_ids.size() < 2)
    fail("--text {}: needs at least two tokens to score, got {}", args.text_file, text_ids.size());
  const ImagePrompt placed = place_images(engine, tok, text_ids, args.images);
  const std::vector<int32_t>& ids = placed.tokens;
  // Targets before this index are the images' blocks, not the text.
  const size_t text_start = ids.size() - text_ids.size();

  PendingOutput dump_file(args.dump_logits);  // named only once every row is written
  std::ofstream dump;
  if (!args.dump_logits.empty()) {
    dump.open(dump_file.temp_path(), std::ios::binary | std::ios::trunc);
    if (!dump) fail("{}: cannot open for writing (--dump-logits)", args.dump_logits);
  }
  const uint32_t vocab = engine.config().vocab;
  const uint32_t window = engine.transformer().context();
  const uint32_t chunk = args.engine.chunk;
  if (text_start > window) {
    fail("the {} images take {} positions, more than the window of {} (--ctx)", args.images.size(),
         text_start, window);
  }
  const int32_t pad =
      engine.config().vision ? static_cast<int32_t>(engine.config().vision->media_pad_id) : -1;
  MediaRowCursor media(placed.rows, pad, engine.config().hidden);
  std::vector<float> logits(size_t{chunk} * vocab);
  double nll = 0.0;
  size_t scored = 0;
  for (size_t start = 0; start + 1 < ids.size(); start += window) {
    engine.sequence().reset();
    const size_t end = std::min(ids.size(), start + window);
    for (size_t at = start; at < end; at += chunk) {
      const size_t count = std::min<size_t>(chunk, end - at);
      const std::span<const int32_t> part = std::span<const int32_t>(ids).subspan(at, count);
      // The images sit in the first window (checked above), which reads all their rows.
      engine.transformer().forward(engine.sequence(), part, logits, true, media.next(part));
      check_logits_finite(std::span<const float>(logits).first(size_t{count} * vocab),
                          fmt::format("tokens {}..{} of --text", at, at + count - 1));
      for (size_t t = 0; t < count; ++t) {
        const std::span<const float> row(&logits[t * vocab], vocab);
        if (dump.is_open()) dump.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()));
        if (at + t + 1 < end && at + t + 1 >= text_start) {
          nll += negative_log_likelihood(row, ids[at + t + 1]);
          ++scored;
        }
      }
    }
  }
  if (dump.is_open()) {
    dump.close();
    if (!dump) fail("{}: cannot write logits", args.dump_logits);
  }
  dump_file.commit();
  const double perplexity = std::exp(nll / static_cast<double>(scored));
  const ExpertSourceStats stats = engine.experts().stats();
  if (args.json) {
    fmt::print("{}\n", nlohmann::json{{"tokens", ids.size()},
                                      {"scored", scored},
                                      {"mean_nll", nll / static_cast<double>(scored)},
                                      {"perplexity", perplexity},
                                      {"tokenizer", timed_tokenizer.report()},
                                      {"experts", experts_json(stats)}}
                           .dump());
  } else {
    fmt::print("perplexity {:.4f} over {} scored tokens ({} tokens, windows of {})\n", perplexity, scored, ids.size(),
               window);
    fmt::print(stderr, "sluice: {}\n", experts_summary(stats));
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Perplexity of the model over a text file");
  cmd->add_option("MODEL", args->model, "the .sluice container")->required();
  cmd->add_option("--text", args->text_file, "the text to score")->required();
  cmd->add_option("--dump-logits", args->dump_logits,
                  "write raw little-endian f32 logits, one row of vocabulary size per token of the text");
  add_engine_flags(*cmd, args->engine);
  cmd->add_option(
      "--image", args->images,
      "an image file (JPEG, PNG, BMP, GIF, PSD, TGA) for a model with a vision tower "
      "(Kimi K3), repeatable: its media block goes before the text, which alone is scored");
  cmd->add_flag("--json", args->json, "print the result as one JSON object");
  cmd->callback([args] { eval(*args); });
}

}  // namespace sluice::cli
