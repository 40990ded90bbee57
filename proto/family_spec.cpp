// proto/family_spec.cpp: the list of family specs. Adding a family is one
// file in proto/families/ and one line here.
#include "proto/family_spec.h"

#include <array>

namespace sluice {
namespace {

constexpr std::array<const FamilySpec*, 7> kFamilies = {&kOlmoeFamily,      &kQwen3MoeFamily, &kMixtralFamily,
                                                        &kDeepseekV3Family, &kKimiK2Family,   &kKimiLinearFamily,
                                                        &kKimiK3Family};

}  // namespace

const FamilySpec* find_family(std::string_view model_type) {
  for (const FamilySpec* family : kFamilies) {
    if (family->model_type == model_type) return family;
  }
  return nullptr;
}

std::span<const FamilySpec* const> all_families() { return kFamilies; }

}  // namespace sluice
