// compute/chat/json_grammar.cpp: compiles a response_format or a JSON Schema
// (the subset json_constraint.h lists) into grammar nodes. It refuses, naming
// the schema path, every keyword it cannot enforce: never a silent weaker grammar.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compute/chat/json_grammar_node.h"
#include "proto/error.h"

namespace sluice::chat {

using Node = JsonGrammar::Node;
using json = nlohmann::json;

JsonGrammar::JsonGrammar() = default;
JsonGrammar::~JsonGrammar() = default;
const Node& JsonGrammar::root() const {
  return *nodes_.front();
}

struct GrammarCompiler {
  const json& root_schema;
  JsonGrammar& grammar;
  std::map<std::string, Node*> refs;  // "#/$defs/x" -> its node, made before its body
  Node* any_value = nullptr;

  Node* make() {
    grammar.nodes_.push_back(std::make_unique<Node>());
    return grammar.nodes_.back().get();
  }

  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    fail("json schema at {}: {}", path.empty() ? "/" : path, what);
  }

  Node* literal(std::vector<std::string> texts) {
    Node* n = make();
    n->kind = Node::Kind::kLiteral;
    n->literals = std::move(texts);
    for (const auto& t : n->literals) n->first.set(static_cast<uint8_t>(t[0]));
    return n;
  }

  // The shared nodes of "any JSON value": every container of them holds any value.
  Node* any() {
    if (any_value) return any_value;
    any_value = make();
    any_value->kind = Node::Kind::kChoice;
    Node* object = make();
    object->kind = Node::Kind::kObject;
    object->first.set('{');
    object->additional = any_value;
    Node* array = make();
    array->kind = Node::Kind::kArray;
    array->first.set('[');
    array->items = any_value;
    Node* string = make();
    string->kind = Node::Kind::kString;
    string->first.set('"');
    Node* number = make();
    set_number(*number, Node::Kind::kNumber);
    any_value->alternatives = {object,           array, string, number, literal({"true", "false"}),
                               literal({"null"})};
    for (const Node* a : any_value->alternatives) any_value->first |= a->first;
    return any_value;
  }

  static void set_number(Node& n, Node::Kind kind) {
    n.kind = kind;
    n.first.set('-');
    for (char c = '0'; c <= '9'; ++c) n.first.set(static_cast<uint8_t>(c));
  }

  static uint32_t count_of(const json& v, const std::string& path, const char* key) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= kUnbounded) {
      refuse(path, fmt::format("{} must be a non-negative integer", key));
    }
    return v.get<uint32_t>();
  }

  const Node* resolve_ref(const json& ref, const std::string& path) {
    if (!ref.is_string()) refuse(path, "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = refs.find(target); it != refs.end()) return it->second;
    if (target.rfind("#/", 0) != 0 && target != "#") {
      refuse(path, fmt::format("$ref {}: only local references (#/...) are supported", target));
    }
    const json* schema = &root_schema;
    if (target != "#") {
      const json::json_pointer pointer(target.substr(1));
      if (!root_schema.contains(pointer))
        refuse(path, fmt::format("$ref {}: no such definition", target));
      schema = &root_schema.at(pointer);
    }
    Node* n = make();
    refs[target] = n;
    compile_into(*n, *schema, target.substr(1));
    return n;
  }

  const Node* compile(const json& schema, const std::string& path) {
    Node* n = make();
    compile_into(*n, schema, path);
    return n;
  }

  void compile_into(Node& n, const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false allows no value");
      return alias(n, any());
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {
        "title", "description", "default", "examples",    "$schema",
        "$id",   "strict",      "$defs",   "definitions", "$comment"};
    static const std::set<std::string> kKnown = {"type",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "enum",
                                                 "const",
                                                 "anyOf",
                                                 "oneOf",
                                                 "allOf",
                                                 "$ref",
                                                 "items",
                                                 "prefixItems",
                                                 "minItems",
                                                 "maxItems",
                                                 "minLength",
                                                 "maxLength",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum"};
    for (const auto& [key, value] : s.items()) {
      if (!kKnown.count(key) && !kIgnored.count(key)) {
        refuse(path, fmt::format("the keyword \"{}\" is not supported", key));
      }
    }
    if (s.contains("$ref")) return alias(n, resolve_ref(s["$ref"], path + "/$ref"));
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        refuse(path + "/allOf", "only an allOf of exactly one schema is supported");
      }
      return alias(n, compile(all[0], path + "/allOf/0"));
    }
    if (s.contains("const")) return literal_into(n, {s["const"]});
    if (s.contains("enum")) {
      const json& values = s["enum"];
      if (!values.is_array() || values.empty() || values.size() > kMaxLiterals) {
        refuse(path + "/enum", fmt::format("enum must be a list of 1 to {} values", kMaxLiterals));
      }
      return literal_into(n, std::vector<json>(values.begin(), values.end()));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& list = s[key];
      if (!list.is_array() || list.empty()) refuse(path + "/" + key, "must be a non-empty list");
      std::vector<const Node*> alternatives;
      for (size_t i = 0; i < list.size(); ++i) {
        alternatives.push_back(compile(list[i], fmt::format("{}/{}/{}", path, key, i)));
      }
      return choice_into(n, std::move(alternatives), path + "/" + key);
    }
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("additionalProperties") ||
          s.contains("required")) {
        return typed_into(n, s, "object", path);
      }
      if (s.contains("items") || s.contains("prefixItems")) return typed_into(n, s, "array", path);
      return alias(n, any());
    }
    const json& type = s["type"];
    if (type.is_string()) return typed_into(n, s, type.get<std::string>(), path);
    if (!type.is_array() || type.empty())
      refuse(path + "/type", "must be a type name or a list of them");
    std::set<std::string> names;
    for (const json& t : type) {
      if (!t.is_string()) refuse(path + "/type", "must be a type name or a list of them");
      names.insert(t.get<std::string>());
    }
    if (names.count("number")) names.erase("integer");  // every integer is a number
    std::vector<const Node*> alternatives;
    for (const std::string& name : names) {
      Node* alt = make();
      typed_into(*alt, s, name, path);
      alternatives.push_back(alt);
    }
    choice_into(n, std::move(alternatives), path + "/type");
  }

  // n stands for `target`: a choice of one.
  void alias(Node& n, const Node* target) {
    n.kind = Node::Kind::kChoice;
    n.alternatives = {target};
    n.first = target->first;
  }

  void literal_into(Node& n, const std::vector<json>& values) {
    n.kind = Node::Kind::kLiteral;
    for (const json& v : values)
      n.literals.push_back(v.dump(-1, ' ', false, json::error_handler_t::strict));
    for (const auto& t : n.literals) n.first.set(static_cast<uint8_t>(t[0]));
  }

  void choice_into(Node& n, std::vector<const Node*> alternatives, const std::string& path) {
    n.kind = Node::Kind::kChoice;
    for (size_t i = 0; i < alternatives.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        const auto both = alternatives[i]->first & alternatives[j]->first;
        if (both.none()) continue;
        size_t c = 0;
        while (!both.test(c)) ++c;
        refuse(path,
               fmt::format("alternatives {} and {} can both begin with '{}': only alternatives "
                           "that begin differently (e.g. a type and null) are supported",
                           j, i, static_cast<char>(c)));
      }
      n.first |= alternatives[i]->first;
    }
    n.alternatives = std::move(alternatives);
  }

  void typed_into(Node& n, const json& s, const std::string& type, const std::string& path) {
    auto refuse_beside = [&](std::initializer_list<const char*> keys) {
      for (const char* key : keys) {
        if (s.contains(key))
          refuse(path, fmt::format("\"{}\" does not apply to type {}", key, type));
      }
    };
    if (type == "object") {
      object_into(n, s, path);
    } else if (type == "array") {
      array_into(n, s, path);
    } else if (type == "string") {
      n.kind = Node::Kind::kString;
      n.first.set('"');
      if (s.contains("minLength")) n.min_length = count_of(s["minLength"], path, "minLength");
      if (s.contains("maxLength")) n.max_length = count_of(s["maxLength"], path, "maxLength");
      if (n.min_length > n.max_length) refuse(path, "minLength is above maxLength");
    } else if (type == "integer") {
      set_number(n, Node::Kind::kInteger);
      integer_bounds(n, s, path);
    } else if (type == "number") {
      refuse_beside({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
      set_number(n, Node::Kind::kNumber);
    } else if (type == "boolean") {
      literal_into(n, {true, false});
    } else if (type == "null") {
      literal_into(n, {nullptr});
    } else {
      refuse(path + "/type", fmt::format("unknown type \"{}\"", type));
    }
  }

  void integer_bounds(Node& n, const json& s, const std::string& path) {
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      if (!s[key].is_number()) refuse(path, fmt::format("{} must be a number", key));
      const double v = s[key].get<double>();
      if (!(v > -9.0e18 && v < 9.0e18))
        refuse(path, fmt::format("{} is out of the integer range", key));
      return v;
    };
    if (auto v = bound("minimum")) n.minimum = static_cast<int64_t>(std::ceil(*v));
    if (auto v = bound("exclusiveMinimum")) {
      const auto m = static_cast<int64_t>(std::floor(*v)) + 1;
      n.minimum = n.minimum ? std::max(*n.minimum, m) : m;
    }
    if (auto v = bound("maximum")) n.maximum = static_cast<int64_t>(std::floor(*v));
    if (auto v = bound("exclusiveMaximum")) {
      const auto m = static_cast<int64_t>(std::ceil(*v)) - 1;
      n.maximum = n.maximum ? std::min(*n.maximum, m) : m;
    }
    if (n.minimum && n.maximum && *n.minimum > *n.maximum)
      refuse(path, "no integer is in the range");
  }

  void object_into(Node& n, const json& s, const std::string& path) {
    n.kind = Node::Kind::kObject;
    n.first.set('{');
    if (s.contains("properties")) {
      const json& props = s["properties"];
      if (!props.is_object()) refuse(path + "/properties", "must be an object");
      if (props.size() > kMaxProperties) {
        refuse(path + "/properties", fmt::format("more than {} properties", kMaxProperties));
      }
      for (const auto& [name, schema] : props.items()) {
        const std::string quoted = json(name).dump(-1, ' ', false, json::error_handler_t::strict);
        n.properties.push_back(
            {quoted.substr(1, quoted.size() - 2), compile(schema, path + "/properties/" + name)});
      }
    }
    if (s.contains("required")) {
      const json& required = s["required"];
      if (!required.is_array()) refuse(path + "/required", "must be a list of property names");
      for (const json& r : required) {
        size_t i = 0;
        while (i < n.properties.size() &&
               !(r.is_string() &&
                 json(r.get<std::string>()).dump() == "\"" + n.properties[i].key + "\"")) {
          ++i;
        }
        if (i == n.properties.size()) {
          refuse(path + "/required", fmt::format("{} is not one of the properties", r.dump()));
        }
        n.required |= uint64_t{1} << i;
      }
    }
    if (s.contains("additionalProperties")) {
      const json& extra = s["additionalProperties"];
      if (!(extra.is_boolean() && !extra.get<bool>())) {
        n.additional = compile(extra, path + "/additionalProperties");
      }
    }
  }

  void array_into(Node& n, const json& s, const std::string& path) {
    n.kind = Node::Kind::kArray;
    n.first.set('[');
    if (s.contains("prefixItems")) {
      const json& prefix = s["prefixItems"];
      if (!prefix.is_array()) refuse(path + "/prefixItems", "must be a list of schemas");
      for (size_t i = 0; i < prefix.size(); ++i) {
        n.prefix_items.push_back(compile(prefix[i], fmt::format("{}/prefixItems/{}", path, i)));
      }
    }
    n.items = any();
    if (s.contains("items")) {
      const json& items = s["items"];
      n.items =
          items.is_boolean() && !items.get<bool>() ? nullptr : compile(items, path + "/items");
    }
    if (s.contains("minItems")) n.min_items = count_of(s["minItems"], path, "minItems");
    if (s.contains("maxItems")) n.max_items = count_of(s["maxItems"], path, "maxItems");
    const uint32_t most =
        n.items ? n.max_items : std::min<uint32_t>(n.max_items, n.prefix_items.size());
    if (n.min_items > most) refuse(path, "minItems cannot be met");
  }
};

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  static const json kSchema = {{"type", "object"}, {"additionalProperties", true}};
  return from_schema(kSchema);
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(const json& schema) {
  std::shared_ptr<JsonGrammar> grammar(new JsonGrammar());
  GrammarCompiler compiler{schema, *grammar, {}, nullptr};
  Node* root = compiler.make();
  compiler.refs["#"] = root;
  compiler.compile_into(*root, schema, "");
  // A $ref to a definition still being compiled saw an empty first set:
  // settle the choices' sets now that every node is complete.
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& n : grammar->nodes_) {
      if (n->kind != Node::Kind::kChoice) continue;
      std::bitset<256> first;
      for (const Node* a : n->alternatives) first |= a->first;
      if (first != n->first) {
        n->first = first;
        changed = true;
      }
    }
  }
  if (root->first.none()) fail("json schema at /: no value can satisfy it (a $ref loop?)");
  return grammar;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_response_format(const json& format) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
    fail("response_format: expected an object with a \"type\"");
  }
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return nullptr;
  if (type == "json_object") return any_object();
  if (type != "json_schema") {
    fail("response_format.type: \"{}\" is not one of text, json_object, json_schema", type);
  }
  if (!format.contains("json_schema") || !format["json_schema"].is_object()) {
    fail("response_format.json_schema: expected an object with a \"schema\"");
  }
  const json& spec = format["json_schema"];
  if (!spec.contains("schema")) return any_object();
  try {
    return from_schema(spec["schema"]);
  } catch (const Error& e) {
    fail("response_format.json_schema.schema: {}", e.what());
  }
}

}  // namespace sluice::chat
