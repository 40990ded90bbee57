// proto/families/kimi_k3.cpp: Kimi K3 (k3.md §1): the outer
// KimiK3ForConditionalGeneration config nests the LM's kimi_linear config
// under text_config and prefixes every LM tensor with language_model.. Its
// vision_config (§4.1) describes the vision tower and projector
// (vision_tower.*, mm_projector.*); a K3 config without one runs text only
// and the converter skips those tensors.
#include "proto/error.h"
#include "proto/families/common.h"
#include "proto/families/kimi.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

void read_vision(const ConfigReader& outer, ModelConfig& c) {
  const nlohmann::json* vision = outer.find("vision_config");
  if (vision == nullptr) return;
  if (!vision->is_object()) fail("{}: key vision_config is not an object", outer.where());
  const ConfigReader r(*vision, outer.where() + " vision_config");
  VisionConfig& v = c.vision.emplace();
  v.patch = r.count_or("patch_size", 14, 1, 64);
  v.hidden = r.count("vt_hidden_size", 8, families::kMaxWidth);
  v.heads = r.count("vt_num_attention_heads", 1, families::kMaxHeads);
  v.qkv_width = r.count("qkv_hidden_size", 4, families::kMaxWidth);
  v.intermediate = r.count("vt_intermediate_size", 8, families::kMaxWidth);
  v.blocks = r.count("vt_num_hidden_layers", 1, families::kMaxLayers);
  v.pos_height = r.count("init_pos_emb_height", 1, 1024);
  v.pos_width = r.count("init_pos_emb_width", 1, 1024);
  // The 2-D RoPE rotates pairs of pairs: a head must split into quarters.
  if (v.qkv_width % v.heads != 0 || v.head_dim() % 4 != 0) {
    fail(
        "{}: key qkv_hidden_size = {} is not vt_num_attention_heads ({}) heads of a width "
        "divisible by 4",
        r.where(), v.qkv_width, v.heads);
  }
  const uint32_t text = r.count("text_hidden_size", 1, families::kMaxWidth);
  if (text != c.hidden) {
    fail("{}: key text_hidden_size = {} differs from text_config hidden_size {}", r.where(), text,
         c.hidden);
  }
  v.media_pad_id = outer.count("media_placeholder_token_id", 0, c.vocab - 1);
}

void read_kimi_k3(const ConfigReader& outer, ModelConfig& c) {
  const nlohmann::json* text = outer.find("text_config");
  if (text == nullptr || !text->is_object())
    fail("{}: key text_config is missing or not an object", outer.where());
  const ConfigReader r(*text, outer.where() + " text_config");
  const std::string type = r.string("model_type").value_or("kimi_linear");
  if (type != "kimi_linear")
    fail("{}: key model_type = \"{}\" is not kimi_linear", r.where(), type);
  families::read_kimi_text(r, c, true);
  read_vision(outer, c);
}

}  // namespace

const FamilySpec kKimiK3Family{.model_type = kKimiK3Type,
                               .read = read_kimi_k3,
                               .naming = {.prefix = "language_model.",
                                          .moe_block = "block_sparse_moe",
                                          .expert_matrix = {"w1", "w3", "w2"}},
                               .vision_prefixes = {"vision_tower.", "mm_projector."},
                               .chat_format = ChatFormatKind::kXtml};

}  // namespace sluice
