// proto/families/kimi.h: the Kimi-Linear reading that Kimi K3 shares: K3's
// text_config is a kimi_linear config plus K3's own keys.
#pragma once

#include "proto/config_reader.h"
#include "proto/model_config.h"

namespace sluice::families {

// Reads a kimi_linear config. `k3` reads K3's keys (k3.md §1.1) instead of
// refusing them, and takes K3's defaults where the two releases differ.
void read_kimi_text(const ConfigReader& r, ModelConfig& c, bool k3);

}  // namespace sluice::families
