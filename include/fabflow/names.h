// Names of enumerated values: one table per enum serves its to_string, its parser and the
// CLI's check of a flag's value (which lists the valid names in help text and errors).
//
// An enum E opts in by declaring, in its own namespace, a function found by argument-dependent
// lookup that returns its table:
//   inline constexpr NameTable<Op, 6> kOpNames{{{"write", Op::write}, ...}};
//   constexpr const auto& name_table(Op) noexcept { return kOpNames; }
// The first entry with a value is its name; later entries with the same value are aliases
// accepted by the parser only.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fabflow {

template <class E>
struct NameEntry {
  std::string_view name;
  E value;
};

template <class E, std::size_t N>
struct NameTable {
  std::array<NameEntry<E>, N> entries;
  bool case_insensitive = false;

  constexpr std::string_view name(E value) const noexcept {
    for (const auto& e : entries)
      if (e.value == value) return e.name;
    return "?";
  }
  constexpr std::optional<E> parse(std::string_view s) const noexcept {
    for (const auto& e : entries)
      if (equal(e.name, s)) return e.value;
    return std::nullopt;
  }
  // The values in table order, each once.
  std::vector<E> values() const {
    std::vector<E> out;
    for (const auto& e : entries)
      if (name(e.value) == e.name) out.push_back(e.value);
    return out;
  }
  // "write, read, send": the names of every value, aliases left out.
  std::string list() const {
    std::string out;
    for (E v : values()) {
      if (!out.empty()) out += ", ";
      out += name(v);
    }
    return out;
  }

 private:
  constexpr bool equal(std::string_view a, std::string_view b) const noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      char x = a[i], y = b[i];
      if (case_insensitive) {
        if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
      }
      if (x != y) return false;
    }
    return true;
  }
};

// Generic access through the enum's table.
template <class E>
constexpr std::string_view name_of(E value) noexcept {
  return name_table(E{}).name(value);
}
template <class E>
constexpr std::optional<E> parse_name(std::string_view s) noexcept {
  return name_table(E{}).parse(s);
}
template <class E>
std::string name_list() {
  return name_table(E{}).list();
}
template <class E>
std::vector<E> all_values() {
  return name_table(E{}).values();
}

}  // namespace fabflow
